"""The plugin's identity: its name, the protocol version of its HTTP API, and its summary metadata.

trainspect writes no plugin-specific TensorBoard summaries: bulk profiler data and verdicts are read from
the run directory (docs/http_api.md explains why). The metadata below is what a future summary written for
this plugin would carry, so that the data provider lists it (``data_class`` must be set, or TensorBoard
silently ignores the tag).
"""

from __future__ import annotations

import json
from typing import Any

from tensorboard.compat.proto import summary_pb2

__all__ = ["PLUGIN_NAME", "PROTOCOL_VERSION", "TAB_NAME", "create_summary_metadata", "parse_plugin_metadata"]

PLUGIN_NAME = "trainspect"
"""URL prefix ``/data/plugin/trainspect/`` and ``SummaryMetadata.plugin_data.plugin_name``."""

TAB_NAME = "trainspect"
"""The dashboard's tab title in TensorBoard."""

PROTOCOL_VERSION = 1
"""Version of the HTTP API (docs/http_api.md) and of the plugin content below."""


def create_summary_metadata(
    display_name: str = "", description: str = "", **content: Any
) -> summary_pb2.SummaryMetadata:
    """Return ``SummaryMetadata`` for a tensor summary owned by this plugin.

    Args:
        display_name: the tag's display name.
        description: the tag's description.
        **content: JSON-serialisable fields stored in the plugin content next to ``version``.

    Returns:
        Metadata with ``data_class=DATA_CLASS_TENSOR`` (visible to ``DataProvider.read_tensors``).

    Example:
        >>> parse_plugin_metadata(create_summary_metadata(kind="x").plugin_data.content)["kind"]
        'x'
    """
    payload = json.dumps({"version": PROTOCOL_VERSION, **content}, sort_keys=True).encode("utf-8")
    return summary_pb2.SummaryMetadata(
        display_name=display_name,
        summary_description=description,
        plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name=PLUGIN_NAME, content=payload),
        data_class=summary_pb2.DATA_CLASS_TENSOR,
    )


def parse_plugin_metadata(content: bytes) -> dict[str, Any]:
    """Parse the plugin content of :func:`create_summary_metadata`.

    Args:
        content: ``SummaryMetadata.plugin_data.content``.

    Returns:
        The content as a dict (``version`` included); empty content gives ``{"version": 0}``.

    Raises:
        ValueError: the content is not a JSON object, or its version is newer than this plugin's.
    """
    if not content:
        return {"version": 0}
    doc = json.loads(content.decode("utf-8"))
    if not isinstance(doc, dict):
        raise ValueError(f"plugin content is not a JSON object: {content[:40]!r}")
    if int(doc.get("version", 0)) > PROTOCOL_VERSION:
        raise ValueError(f"plugin content version {doc['version']} is newer than {PROTOCOL_VERSION}")
    return doc
