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

from trainspect.exceptions import DamagedFile
from trainspect.profiler.schema import SCHEMA_VERSION
from trainspect.store.jsonfile import NUMBER, ListOf, Obj, load_json
from trainspect.store.warner import Kind, Warner

__all__ = ["OPERATOR_COLUMNS", "PYTHON_COLUMNS", "write_table", "read_tables"]

logger = logging.getLogger(__name__)
OPERATOR_COLUMNS = ["worker", "start_step", "end_step", "device", "name", "calls", "self_time_us", "total_time_us"]
PYTHON_COLUMNS = [
    "worker",
    "start_step",
    "end_step",
    "function",
    "filename",
    "line",
    "calls",
    "total_time_s",
    "cumulative_time_s",
]
_HEAD = {"schema_version": int, "worker": str, "start_step": int, "end_step": int}
_SHAPES = {
    "operators": Obj(
        {
            "rows": ListOf(
                Obj({"name": str, "calls": NUMBER, "self_time_us": NUMBER, "total_time_us": NUMBER}, {"device": str})
            )
        },
        _HEAD,
    ),
    "python": Obj(
        {
            "rows": ListOf(
                Obj(
                    {"function": str, "calls": NUMBER, "total_time_s": NUMBER, "cumulative_time_s": NUMBER},
                    {"filename": str, "line": int},
                )
            )
        },
        _HEAD,
    ),
}
"""The shapes of ``operators_*.json`` and ``python_*.json``."""
DAMAGED_TABLES = Kind("damaged profiler tables", "skipped profiler table ")
NEWER_TABLES = Kind("profiler tables of a newer schema version", "skipped profiler table ")


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


def read_tables(detailed_root: Path, prefix: str, problems: list[str] | None = None) -> pd.DataFrame:
    """All ``<prefix>_*.json`` tables under ``<profiler>/detailed/<worker>/`` as one DataFrame.

    Columns: :data:`OPERATOR_COLUMNS` (prefix ``operators``) or :data:`PYTHON_COLUMNS` (``python``).
    Unreadable files, files of the wrong shape and newer-version files are skipped with one warning per kind of
    problem (the file's own line for one file, else a count and the first file); ``problems``, when given, gets the
    first :attr:`Warner.SHOWN` files of each kind and a count of the others.
    """
    columns = OPERATOR_COLUMNS if prefix == "operators" else PYTHON_COLUMNS
    warn = Warner(deferred=True, kind=DAMAGED_TABLES, logger=logger)
    frames = [
        frame
        for path in sorted(detailed_root.glob(f"*/{prefix}_*.json"))
        if (frame := _read_table(path, prefix, columns, warn)) is not None
    ]
    warn.flush()
    if problems is not None:
        problems += warn.lines()
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=columns)


def _read_table(path: Path, prefix: str, columns: list[str], warn: Warner) -> pd.DataFrame | None:
    """One table file as a DataFrame of ``columns``, or None (noted in ``warn``) when it cannot be used."""
    try:
        doc = load_json(path, _SHAPES[prefix])
    except (FileNotFoundError, DamagedFile) as exc:
        warn(path, str(exc).removeprefix(f"{path}: "))
        return None
    if int(doc.get("schema_version") or 1) > SCHEMA_VERSION:
        warn(path, f"schema_version {doc['schema_version']} is newer than {SCHEMA_VERSION}", NEWER_TABLES)
        return None
    frame = pd.DataFrame(doc["rows"], columns=[c for c in columns if c not in _HEAD])
    frame["worker"] = doc.get("worker") or path.parent.name
    frame["start_step"] = doc.get("start_step", -1)
    frame["end_step"] = doc.get("end_step", -1)
    return frame.reindex(columns=columns)
