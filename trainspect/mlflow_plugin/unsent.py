"""``<run>/mlflow/unsent*.jsonl``: the metrics a logger could not send, kept exactly as they would have been sent.

One JSON object a line (``key``, ``value``, ``timestamp`` in ms, ``step``), appended by the
:class:`~trainspect.mlflow_plugin.logger.MlflowLogger` when metrics leave its memory buffer during an outage and at
close; read by ``trainspect mlflow-sync``, which removes the files once their metrics arrived. One file per logging
worker (``unsent.jsonl`` for the chief, ``unsent-<worker>.jsonl`` for the others).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Sequence
from pathlib import Path

from mlflow.entities import Metric

__all__ = ["unsent_file", "unsent_files", "append_unsent", "read_unsent"]

log = logging.getLogger(__name__)


def unsent_file(run_dir: str | os.PathLike[str], key_prefix: str = "") -> Path:
    """The unsent file of the logger whose metric keys start with ``key_prefix`` (``""`` for the chief)."""
    suffix = "-" + key_prefix.strip("/").replace("/", "_") if key_prefix else ""
    return Path(run_dir) / "mlflow" / f"unsent{suffix}.jsonl"


def unsent_files(run_dir: str | os.PathLike[str]) -> list[Path]:
    """Every unsent file of a run directory."""
    return sorted((Path(run_dir) / "mlflow").glob("unsent*.jsonl"))


def append_unsent(path: Path, metrics: Sequence[Metric]) -> None:
    """Append metrics to an unsent file.

    Raises:
        OSError: the file could not be written.
    """
    rows = "".join(
        json.dumps({"key": m.key, "value": m.value, "timestamp": m.timestamp, "step": m.step}) + "\n" for m in metrics
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(rows)


def read_unsent(path: Path) -> list[Metric]:
    """The metrics of an unsent file; a damaged line (a write cut short) is skipped with one warning."""
    out: list[Metric] = []
    damaged = 0
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
            out.append(Metric(str(row["key"]), float(row["value"]), int(row["timestamp"]), int(row["step"])))
        except (ValueError, KeyError, TypeError):
            damaged += 1
    if damaged:
        log.warning("trainspect: skipped %d damaged line(s) of %s", damaged, path)
    return out
