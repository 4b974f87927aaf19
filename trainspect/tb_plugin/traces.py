"""The Chrome traces of a run's profiled windows: listed for the Profiler tab and served for download.

trainspect writes ``profiler/detailed/<worker>/trace_<a>-<b>.json`` (open in Perfetto or chrome://tracing); a
SageMaker profiler-output folder holds ``framework/**/*.trace.json.gz``. A request names a trace by the ``id``
listed here, never by a path, so nothing outside those files can be served.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tensorboard import errors

__all__ = ["list_traces", "find_trace", "MAX_TRACES"]

MAX_TRACES = 50
_WINDOW = re.compile(r"trace_([0-9]+)-([0-9]+)\.json$")
_ID = re.compile(r"[0-9]{1,9}")  # ASCII digits only: "²" and "①" are digits to str.isdigit, not to int()


def _candidates(run: Path) -> list[Path]:
    found: list[Path] = []
    detailed = run / "profiler" / "detailed"
    if detailed.is_dir():
        found += sorted(detailed.glob("*/trace_*.json"))
    framework = run / "framework"
    if framework.is_dir():
        found += sorted(framework.rglob("*.trace.json.gz"))
    return [p for p in found if p.is_file() and not p.is_symlink()][:MAX_TRACES]


def list_traces(run: Path) -> list[dict[str, Any]]:
    """The run's Chrome traces.

    Returns:
        ``id`` (for the ``/trace`` route), ``worker``, ``start_step``, ``end_step`` (``None`` when the name does
        not say), ``file`` (its name) and ``bytes``.
    """
    out = []
    for i, path in enumerate(_candidates(run)):
        m = _WINDOW.search(path.name)
        try:
            size = path.stat().st_size
        except OSError:
            continue
        out.append(
            {
                "id": i,
                "worker": path.parent.name,
                "file": path.name,
                "bytes": size,
                "start_step": int(m.group(1)) if m else None,
                "end_step": int(m.group(2)) - 1 if m else None,
            }
        )
    return out


def find_trace(run: Path, trace_id: str | None) -> Path:
    """The trace listed as ``trace_id``.

    Raises:
        InvalidArgumentError: the id is missing or not a number (1 to 9 ASCII digits).
        NotFoundError: the run has no trace with that id.
    """
    if trace_id is None or not _ID.fullmatch(trace_id):
        raise errors.InvalidArgumentError("parameter 'id' must be a trace id from the profiler overview")
    paths = _candidates(run)
    index = int(trace_id)
    if index >= len(paths):
        raise errors.NotFoundError(f"this run has no trace {index}")
    return paths[index]
