"""Operator and Python-profile tables of the profiled step windows (``RunLayout.detailed_dir(worker)``).

Files per window ``<a>-<b>`` (global steps ``a <= step < b``):

* ``operators_<a>-<b>.json``: ``{"schema_version", "worker", "start_step", "end_step", "rows": [{"device":
  "cpu"|"gpu", "name", "calls", "self_time_us", "total_time_us"}]}``
* ``trace_<a>-<b>.json``: the Chrome trace of the window (open in Perfetto / chrome://tracing)
* ``python_<a>-<b>.json``: ``{... "rows": [{"function", "filename", "line", "calls", "total_time_s",
  "cumulative_time_s"}]}`` and ``python_<a>-<b>.pstats`` (load with ``pstats.Stats``)
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from trainspect.profiler.schema import SCHEMA_VERSION

__all__ = ["OPERATOR_COLUMNS", "PYTHON_COLUMNS", "write_table", "read_tables"]

logger = logging.getLogger(__name__)
OPERATOR_COLUMNS = ["worker", "start_step", "end_step", "device", "name", "calls", "self_time_us", "total_time_us"]
PYTHON_COLUMNS = [
    "worker", "start_step", "end_step", "function", "filename", "line", "calls", "total_time_s", "cumulative_time_s",
]  # fmt: skip


def write_table(
    directory: str | os.PathLike[str], prefix: str, worker: str, start: int, end: int, rows: Sequence[dict[str, Any]]
) -> Path:
    """Write ``<prefix>_<start>-<end>.json`` atomically and return its path."""
    target = Path(directory) / f"{prefix}_{start}-{end}.json"
    target.parent.mkdir(parents=True, exist_ok=True)
    doc = {"schema_version": SCHEMA_VERSION, "worker": worker, "start_step": start, "end_step": end, "rows": list(rows)}
    tmp = target.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc), encoding="utf-8")
    os.replace(tmp, target)
    return target


def read_tables(detailed_root: Path, prefix: str) -> pd.DataFrame:
    """All ``<prefix>_*.json`` tables under ``<profiler>/detailed/<worker>/`` as one DataFrame.

    Columns: :data:`OPERATOR_COLUMNS` (prefix ``operators``) or :data:`PYTHON_COLUMNS` (``python``).
    Unreadable or newer-version files are skipped with a warning.
    """
    columns = OPERATOR_COLUMNS if prefix == "operators" else PYTHON_COLUMNS
    frames = []
    for path in sorted(detailed_root.glob(f"*/{prefix}_*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
            if int(doc.get("schema_version", 1)) > SCHEMA_VERSION:
                raise ValueError(f"schema_version {doc['schema_version']} is newer than {SCHEMA_VERSION}")
            frame = pd.DataFrame(doc["rows"])
        except (OSError, ValueError, KeyError, TypeError) as exc:
            logger.warning("trainspect: skipped profiler table %s: %s", path, exc)
            continue
        frame["worker"] = doc.get("worker", path.parent.name)
        frame["start_step"] = doc.get("start_step", -1)
        frame["end_step"] = doc.get("end_step", -1)
        frames.append(frame.reindex(columns=columns))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)
