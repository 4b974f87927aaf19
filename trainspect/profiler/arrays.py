"""Bulk, array-shaped profiler data: system samples per node and framework tables per worker."""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from trainspect.modes import ModeKeys

__all__ = ["SystemArrays", "FrameworkTables", "SPAN_NAMES", "merge_system", "aggregate_buckets"]

SPAN_NAMES = {1: "forward", 2: "backward", 3: "optimizer", 4: "dataloader", 5: "backward_sync"}
"""Span code -> kind (docs/profiler.md); ``backward_sync`` lies inside a backward span. Readers name a code they do
not know by its number (``spans_df``) or skip it (trace events)."""
_CORE = re.compile(r"^cpu(\d+)_utilization_percent$")
_GPU = re.compile(r"^gpu(\d+)_utilization_percent$")


@dataclass
class SystemArrays:
    """All system samples of one node.

    Attributes:
        node: the node's name.
        timestamps: float64 epoch seconds, ascending (one per row).
        keys: the metric keys (columns), e.g. ``cpu0_utilization_percent``, ``gpu1_memory_used_percent``.
        values: float32 array (rows x keys); NaN where a metric was not sampled.
        interval_ms: the sampling interval, when known.
    """

    node: str
    timestamps: np.ndarray
    keys: tuple[str, ...]
    values: np.ndarray
    interval_ms: int | None = None

    def __len__(self) -> int:
        return len(self.timestamps)

    def column(self, key: str) -> np.ndarray | None:
        """One metric's values (a view), or ``None`` when the node has no such metric."""
        try:
            return self.values[:, self.keys.index(key)]
        except ValueError:
            return None

    @property
    def cpu_cores(self) -> list[int]:
        """Indices of the CPU cores with a utilisation column, ascending."""
        return sorted(int(m.group(1)) for k in self.keys if (m := _CORE.match(k)))

    @property
    def gpus(self) -> list[int]:
        """Indices of the GPUs with a utilisation column, ascending."""
        return sorted(int(m.group(1)) for k in self.keys if (m := _GPU.match(k)))

    def matrix(self, keys: list[str]) -> np.ndarray:
        """Values of several metrics (rows x len(keys)); missing metrics are NaN columns."""
        idx = {k: i for i, k in enumerate(self.keys)}
        out = np.full((len(self), len(keys)), np.nan, dtype=np.float32)
        for j, key in enumerate(keys):
            if key in idx:
                out[:, j] = self.values[:, idx[key]]
        return out

    def cpu_total(self) -> np.ndarray:
        """Mean utilisation over the cores per row (smdebug's BatchSize/OverallSystemUsage CPU total)."""
        cores = [f"cpu{i}_utilization_percent" for i in self.cpu_cores]
        if not cores:
            col = self.column("cpu_utilization_percent")
            return np.full(len(self), np.nan) if col is None else col.astype(np.float64)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rows without any core sample are NaN
            return np.nanmean(self.matrix(cores).astype(np.float64), axis=1)

    def slice(self, start: float | None = None, end: float | None = None) -> SystemArrays:
        """Rows with ``start <= timestamp <= end`` (epoch seconds)."""
        lo = 0 if start is None else int(np.searchsorted(self.timestamps, start, "left"))
        hi = len(self) if end is None else int(np.searchsorted(self.timestamps, end, "right"))
        return SystemArrays(self.node, self.timestamps[lo:hi], self.keys, self.values[lo:hi], self.interval_ms)

    def to_dataframe(self) -> pd.DataFrame:
        """Wide DataFrame: ``timestamp`` (epoch s) then one column per key."""
        frame = pd.DataFrame(self.values, columns=list(self.keys))
        frame.insert(0, "timestamp", self.timestamps)
        return frame


def merge_system(
    node: str, parts: list[tuple[np.ndarray, tuple[str, ...], np.ndarray]], interval: int | None
) -> SystemArrays:
    """Concatenate (timestamps, keys, values) parts with possibly different keys into one sorted array set."""
    if not parts:
        return SystemArrays(node, np.zeros(0), (), np.zeros((0, 0), np.float32), interval)
    keys: list[str] = []
    for _t, ks, _v in parts:
        keys.extend(k for k in ks if k not in keys)
    if all(ks == tuple(keys) for _t, ks, _v in parts):
        times = np.concatenate([t for t, _k, _v in parts])
        values = np.concatenate([v for _t, _k, v in parts]) if len(parts) > 1 else parts[0][2]
    else:
        times = np.concatenate([t for t, _k, _v in parts])
        values = np.full((len(times), len(keys)), np.nan, dtype=np.float32)
        row = 0
        for t, ks, v in parts:
            cols = [keys.index(k) for k in ks]
            values[row : row + len(t), cols] = v
            row += len(t)
    if len(times) > 1 and np.any(np.diff(times) < 0):
        order = np.argsort(times, kind="stable")
        times, values = times[order], values[order]
    return SystemArrays(node, times, tuple(keys), values, interval)


def _empty_steps() -> dict[str, np.ndarray]:
    return {
        "mode": np.zeros(0, np.uint8),
        "mode_step": np.zeros(0, np.int64),
        "global_step": np.zeros(0, np.int64),
        "start": np.zeros(0),
        "end": np.zeros(0),
    }


def _empty_spans() -> dict[str, np.ndarray]:
    return {
        "kind": np.zeros(0, np.uint8),
        "start": np.zeros(0),
        "end": np.zeros(0),
        "global_step": np.zeros(0, np.int64),
        "workers": np.zeros(0, np.int16),
        "pid": np.zeros(0, np.int64),
    }


def _empty_step_metrics() -> dict[str, np.ndarray]:
    return {"global_step": np.zeros(0, np.int64), "time": np.zeros(0)}


@dataclass
class FrameworkTables:
    """All framework records of one worker.

    Attributes:
        worker: the worker's name.
        node: its node.
        steps: columns ``mode`` (ModeKeys value), ``mode_step``, ``global_step``, ``start``, ``end``
            (epoch s), sorted by ``start``.
        spans: columns ``kind`` (1 forward, 2 backward, 3 optimizer, 4 dataloader, 5 backward_sync: the wait
            inside a backward span from the rank's last local gradient to the end of ``backward()``), ``start``,
            ``end``, ``global_step`` (-1 unknown), ``workers`` (dataloader worker processes, -1 unknown), ``pid``.
        step_metrics: per-step framework metrics: ``global_step``, ``time`` (epoch s, when recorded) and one
            float64 column per metric key (``gpu0_memory_allocated_bytes`` …; NaN where a row lacks it),
            sorted by ``time``.
        process_start: epoch seconds the process started, when known.
        job_start: when the job began (start of initialization): the process start for a script's first hook, the
            hook's start in a notebook or for a later run of the process; None in older runs (the process start).
        recorder_start: when the recorder started.
        close_time: when the recorder closed (end of finalization), when known.
        dataloader_workers: the last known number of dataloader workers (of whichever loader ran last; the
            training loader's: :func:`trainspect.profiler.analysis.training_loader`).
        loaders: the loaders' changes, oldest first: ``time``, ``num_workers``, ``batch_size`` (recorded since the
            training loader is told apart; empty in older runs).
        pid: the worker's process id.
    """

    worker: str
    node: str = ""
    steps: dict[str, np.ndarray] = field(default_factory=_empty_steps)
    spans: dict[str, np.ndarray] = field(default_factory=_empty_spans)
    step_metrics: dict[str, np.ndarray] = field(default_factory=_empty_step_metrics)
    process_start: float | None = None
    job_start: float | None = None
    recorder_start: float | None = None
    close_time: float | None = None
    dataloader_workers: int | None = None
    loaders: list[dict[str, Any]] = field(default_factory=list)
    pid: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def step_count(self) -> int:
        """Number of recorded steps."""
        return len(self.steps["start"])

    def first_time(self) -> float | None:
        """Earliest time known for this worker (process start, recorder start or first record)."""
        cands = [t for t in (self.began, self.recorder_start) if t is not None]
        for table in (self.steps, self.spans):
            if len(table["start"]):
                cands.append(float(table["start"].min()))
        return min(cands) if cands else None

    @property
    def began(self) -> float | None:
        """When the job began: ``job_start``, else (older runs) ``process_start``."""
        return self.job_start if self.job_start is not None else self.process_start

    def last_time(self) -> float | None:
        """Latest time known for this worker (close or last record end)."""
        cands = [t for t in (self.close_time, self.recorder_start) if t is not None]
        for table in (self.steps, self.spans):
            if len(table["end"]):
                cands.append(float(table["end"].max()))
        return max(cands) if cands else None

    def phases(self) -> dict[str, tuple[float, float] | None]:
        """Job phases as (start, end) epoch seconds: ``initialization``, ``training_loop``, ``finalization``.

        A phase is ``None`` when its bounds are unknown (no steps yet, no close record yet).
        """
        if not self.step_count:
            return {"initialization": None, "training_loop": None, "finalization": None}
        first, last = float(self.steps["start"][0]), float(self.steps["end"].max())
        begin = self.began if self.began is not None else self.recorder_start
        return {
            "initialization": (begin, first) if begin is not None else None,
            "training_loop": (first, last),
            "finalization": (last, self.close_time) if self.close_time is not None else None,
        }

    def steps_df(self) -> pd.DataFrame:
        """Steps as a DataFrame: ``worker, mode (name), mode_step, global_step, start, end, duration``."""
        frame = pd.DataFrame({k: np.asarray(v) for k, v in self.steps.items()})
        frame["mode"] = _names(frame["mode"].to_numpy(), {int(m): m.name for m in ModeKeys})
        frame["duration"] = frame["end"] - frame["start"]
        frame.insert(0, "worker", self.worker)
        return frame

    def spans_df(self) -> pd.DataFrame:
        """Spans as a DataFrame: ``worker, kind (name), start, end, duration, global_step, workers, pid``."""
        frame = pd.DataFrame({k: np.asarray(v) for k, v in self.spans.items()})
        frame["kind"] = _names(frame["kind"].to_numpy(), {int(k): v for k, v in SPAN_NAMES.items()})
        frame["duration"] = frame["end"] - frame["start"]
        frame.insert(0, "worker", self.worker)
        return frame


def _names(codes: np.ndarray, names: dict[int, str]) -> np.ndarray:
    """Map integer codes to names, vectorised; unknown codes become their decimal string."""
    codes = codes.astype(np.int64)
    if codes.size == 0:
        return codes.astype(object)
    lo, hi = int(codes.min()), int(codes.max())
    if hi - lo > 4096:  # corrupt codes: no dense table
        return np.array([names.get(int(c), str(int(c))) for c in codes], dtype=object)
    lookup = np.array([names.get(i, str(i)) for i in range(lo, hi + 1)], dtype=object)
    return lookup[codes - lo]


def aggregate_buckets(values: np.ndarray, starts: np.ndarray, hows: Sequence[str]) -> np.ndarray:
    """Each column's aggregate over its finite values in each bucket of rows (``Metric.aggregate`` of the catalogue).

    Args:
        values: samples, rows x columns (NaN: not sampled).
        starts: the first row of each bucket, ascending, starting at 0.
        hows: each column's aggregation (``mean``, ``max``, ``min``, ``last``).

    Returns:
        buckets x columns; NaN where a bucket holds no finite value of the column.

    Example:
        >>> v = np.array([[1.0, 1.0], [3.0, np.nan], [5.0, 4.0]])
        >>> aggregate_buckets(v, np.array([0, 2]), ["mean", "max"]).tolist()
        [[2.0, 1.0], [5.0, 4.0]]
    """
    vals = np.asarray(values, dtype=np.float64)
    ok = np.isfinite(vals)
    with np.errstate(all="ignore"):
        out = np.add.reduceat(np.where(ok, vals, 0.0), starts, axis=0) / np.add.reduceat(ok, starts, axis=0)
    for how, ufunc in (("max", np.fmax), ("min", np.fmin)):
        cols = [j for j, h in enumerate(hows) if h == how]
        if cols:
            out[:, cols] = ufunc.reduceat(np.where(ok[:, cols], vals[:, cols], np.nan), starts, axis=0)
    cols = [j for j, h in enumerate(hows) if h == "last"]
    if cols:
        rows = np.arange(len(vals))[:, None]
        seen = np.maximum.accumulate(np.where(ok[:, cols], rows, -1), axis=0)  # the last finite row so far
        ends = np.r_[starts[1:], len(vals)] - 1
        pick = seen[ends]
        taken = vals[:, cols][np.clip(pick, 0, None), np.arange(len(cols))]
        out[:, cols] = np.where(pick >= starts[:, None], taken, np.nan)
    return out
