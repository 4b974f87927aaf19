"""Readers of SageMaker profiler-output folders (spec 3.2-3.3): system JSON lines and framework traces.

SageMaker's system monitor writes the CPU and the GPU samples of one sampling tick with timestamps a few
milliseconds apart. :class:`SageMakerSystemStore` puts them back into one row: each sample joins the tick of the
reference metric (the one sampled most often) nearest to it, when it lies within half the sampling interval.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import NamedTuple

import numpy as np

from trainspect.profiler._sm_framework import SageMakerFrameworkStore, Warner
from trainspect.profiler.arrays import SystemArrays, merge_system
from trainspect.profiler.events import key_for
from trainspect.profiler.traces import to_us

__all__ = [
    "is_sagemaker_dir",
    "SageMakerSystemStore",
    "SageMakerFrameworkStore",
    "SystemRecord",
    "read_system_file",
    "select_records",
    "tick_times",
]

_SYS_FILE = re.compile(r"(\d{10})\.algo-\d+\.json$")


def is_sagemaker_dir(path: Path) -> bool:
    """Whether ``path`` looks like a SageMaker profiler-output folder."""
    if (path / "system" / "incremental").is_dir() or (path / "framework" / "pevents").is_dir():
        return True
    return (path / "framework").is_dir() and any((path / "framework").glob("*/detailed_profiling"))


class SystemRecord(NamedTuple):
    """One line of a SageMaker system file, as written (``timestamp`` in epoch seconds)."""

    timestamp: float
    type: str
    name: str
    dimension: str
    value: float
    node_id: str
    key: str


def _record(line: str) -> SystemRecord:
    rec = json.loads(line)
    type_, name, dim = str(rec.get("Type", "")), str(rec.get("Name", "")), str(rec.get("Dimension", ""))
    return SystemRecord(
        float(rec["Timestamp"]),
        type_,
        name,
        dim,
        float(rec["Value"]),
        str(rec.get("NodeId", "algo-1")),
        key_for(type_, name, dim),
    )


def read_system_file(path: Path) -> tuple[list[SystemRecord], str | None]:
    """The records of one system file and what was wrong with it (``None``: nothing); bad lines are skipped."""
    try:
        text = Path(path).read_text(errors="replace")
    except OSError as exc:
        return [], str(exc)
    out, bad = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            out.append(_record(line))
        except (ValueError, KeyError, TypeError, AttributeError):
            bad += 1
    return out, (f"{bad} unreadable line(s)" if bad else None)


def select_records(
    records: list[SystemRecord], start: float, end: float, unit: str = "s", event_type: str | None = None
) -> list[SystemRecord]:
    """Records with ``start <= timestamp <= end`` (and ``type == event_type``), compared as smdebug compares them.

    smdebug truncates the bounds to whole microseconds and the timestamps to whole nanoseconds.
    """
    lo, hi = to_us(start, unit) * 1000, to_us(end, unit) * 1000
    return [r for r in records if lo <= int(r.timestamp * 1e9) <= hi and (event_type is None or r.type == event_type)]


class SageMakerSystemStore:
    """System metric files ``<base>/system/incremental/[…/]<10 digits>.algo-N.json``, parsed on refresh.

    Args:
        base: the profiler-output folder.
        interval_ms: the sampling interval; ``None`` infers it from the data (median spacing of the reference
            metric's samples).
    """

    def __init__(self, base: Path, interval_ms: int | None = None) -> None:
        self.base = base
        self.interval_ms = interval_ms
        self._files: dict[Path, tuple[int, list[SystemRecord]]] = {}
        self.warn = Warner()
        self._nodes: dict[str, SystemArrays] | None = None

    def refresh(self) -> None:
        """Parse new or grown files."""
        for path in sorted((self.base / "system").rglob("*.json")):
            if not _SYS_FILE.search(path.name):
                continue
            try:
                size = path.stat().st_size
            except OSError:
                continue
            if path in self._files and self._files[path][0] == size:
                continue
            self._files[path] = (size, self._parse(path))
            self._nodes = None

    def _parse(self, path: Path) -> list[SystemRecord]:
        records, problem = read_system_file(path)
        if problem:
            self.warn(path, problem)
        return records

    def file_times(self) -> list[float]:
        """Epoch seconds of each file, from its name."""
        return sorted(float(m.group(1)) for p in self._files if (m := _SYS_FILE.search(p.name)))

    def records(self) -> list[SystemRecord]:
        """Every sample as written, in file order."""
        return [r for _size, recs in self._files.values() for r in recs]

    def problems(self) -> list[str]:
        """What was skipped, one line per file."""
        return list(self.warn.problems.values())

    def nodes(self) -> dict[str, SystemArrays]:
        """Samples per node, one row per sampling tick."""
        if self._nodes is None:
            records: dict[str, list[SystemRecord]] = {}
            for rec in self.records():
                records.setdefault(rec.node_id, []).append(rec)
            self._nodes = {node: _rows(node, recs, self.interval_ms) for node, recs in sorted(records.items())}
        return self._nodes


def tick_times(times: np.ndarray, cols: np.ndarray, interval_s: float | None = None) -> tuple[np.ndarray, float | None]:
    """Per sample, the time of the sampling tick it belongs to, and the sampling interval (s) used.

    The reference metric is the column with the most distinct timestamps (the lowest column on ties); a sample
    joins its nearest reference timestamp when it lies within half the interval, else keeps its own time.
    Times are first rounded to the millisecond.

    Example:
        >>> t = np.array([0.0, 0.001, 0.5, 0.502, 1.0, 1.499])
        >>> tick_times(t, np.array([0, 1, 0, 1, 0, 1]))[0].tolist()
        [0.0, 0.0, 0.5, 0.5, 1.0, 1.499]
    """
    ms = np.round(times * 1000.0) / 1000.0
    if not len(ms):
        return ms, interval_s
    distinct = [np.unique(ms[cols == c]) for c in range(int(cols.max()) + 1)]
    ref = max(distinct, key=len)
    if interval_s is None:
        if len(ref) < 2:
            return ms, None
        interval_s = float(np.median(np.diff(ref)))
    idx = np.searchsorted(ref, ms)
    left = ref[np.clip(idx - 1, 0, len(ref) - 1)]
    right = ref[np.clip(idx, 0, len(ref) - 1)]
    nearest = np.where(np.abs(ms - left) <= np.abs(right - ms), left, right)
    return np.where(np.abs(ms - nearest) <= interval_s / 2.0 + 1e-9, nearest, ms), interval_s


def _rows(node: str, recs: list[SystemRecord], interval_ms: int | None) -> SystemArrays:
    keys = sorted({r.key for r in recs})
    col = {k: i for i, k in enumerate(keys)}
    cols = np.array([col[r.key] for r in recs], dtype=np.int64)
    ticks, interval = tick_times(
        np.array([r.timestamp for r in recs]), cols, None if interval_ms is None else interval_ms / 1000.0
    )
    stamps = np.round(ticks * 1000).astype(np.int64)
    uniq, row = np.unique(stamps, return_inverse=True)
    sums = np.zeros((len(uniq), len(keys)))
    counts = np.zeros((len(uniq), len(keys)))
    np.add.at(sums, (row, cols), np.array([r.value for r in recs]))
    np.add.at(counts, (row, cols), 1)
    with np.errstate(invalid="ignore"):
        values = (sums / counts).astype(np.float32)
    ms = None if interval is None else max(1, round(interval * 1000))
    return merge_system(node, [(uniq / 1000.0, tuple(keys), values)], ms)
