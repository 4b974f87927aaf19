"""Whether a run directory is over, so that its verdicts are final.

A run is over when its end marker ``training_job_end.ts`` exists (at the run root, or under a SageMaker
folder's ``system/`` or ``framework/``), when the caller says so (``final=True``, ``trainspect rules --final``),
or when it has no end marker and its newest data is older than ``stale_after_s`` (default
:data:`STALE_AFTER_S`). SageMaker writes no trainspect end marker, so a finished SageMaker job's folder is
over once its data is that old. The age of SageMaker data is read from the data and the file names (the
newest sample of the newest system file, the last event of each trace), which survive a download; the age of
other data is the newest modification time of its files (the verdicts and reports trainspect writes are
not data).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from trainspect.profiler.readers import resolve_profiler_root
from trainspect.profiler.sagemaker import read_system_file
from trainspect.profiler.traces import tf_trace_metadata

__all__ = ["STALE_AFTER_S", "end_marker_exists", "newest_data_time", "run_over"]

STALE_AFTER_S = 3600.0
"""Default age (seconds) of the newest data after which a directory without an end marker is taken as over."""
_MARKER = "training_job_end.ts"
_SYS = re.compile(r"^(\d{10})\.algo-\d+\.json$")
_TRACE = re.compile(r"^(\d{16,19})_[^_]+_.+$")
_NOT_DATA = ("rules", "report.html")


def end_marker_exists(path: str | os.PathLike[str]) -> bool:
    """Whether ``training_job_end.ts`` exists at ``path`` or under its profiler folder's ``system``/``framework``."""
    base = Path(path)
    _source, root = resolve_profiler_root(base)
    places = [base, root, root / "system", root / "framework"]
    return any((p / _MARKER).exists() for p in places)


def _sagemaker_newest(root: Path) -> float | None:
    times: list[float] = []
    minutes = [(int(m.group(1)), p) for p in (root / "system").rglob("*.json") if (m := _SYS.match(p.name))]
    if minutes:
        minute, _path = max(minutes)
        records = [r for m, p in minutes if m == minute for r in read_system_file(p)[0]]
        times.append(max((r.timestamp for r in records), default=float(minute)))
    for path in (root / "framework").rglob("*"):
        if match := _TRACE.match(path.name):
            value = int(match.group(1))
            times.append(value / 1e9 if value > 1e17 else value / 1e6)
        elif path.name.endswith(".trace.json.gz") and (meta := tf_trace_metadata(path)) is not None:
            times.append(meta[2] / 1e6)
    return max(times) if times else None


def _newest_mtime(base: Path) -> float | None:
    newest = None
    for path in base.rglob("*"):
        rel = path.relative_to(base).parts
        if not rel or rel[0] in _NOT_DATA:
            continue
        try:
            if path.is_file():
                mtime = path.stat().st_mtime
                newest = mtime if newest is None else max(newest, mtime)
        except OSError:
            continue
    return newest


def newest_data_time(path: str | os.PathLike[str]) -> float | None:
    """Epoch seconds of the newest data under ``path`` (``None``: no data)."""
    base = Path(path)
    source, root = resolve_profiler_root(base)
    if source == "sagemaker":
        return _sagemaker_newest(root)
    return _newest_mtime(base) if base.is_dir() else None


def run_over(
    path: str | os.PathLike[str], *, final: bool = False, stale_after_s: float | None = None, now: float | None = None
) -> bool:
    """Whether the run at ``path`` is over (see the module docstring).

    Args:
        path: a run directory or a SageMaker profiler-output folder (or its parent).
        final: the caller knows the job is over (``--final``).
        stale_after_s: age of the newest data after which a directory without an end marker is over
            (``None``: :data:`STALE_AFTER_S`).
        now: the current time (tests).

    Example:
        >>> import tempfile
        >>> run_over(tempfile.mkdtemp()), run_over(tempfile.mkdtemp(), final=True)
        (False, True)
    """
    if final or end_marker_exists(path):
        return True
    newest = newest_data_time(path)
    if newest is None:
        return False
    age = (time.time() if now is None else now) - newest
    return age > (STALE_AFTER_S if stale_after_s is None else float(stale_after_s))
