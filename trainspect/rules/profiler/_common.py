"""Shared mechanics of the profiler rules (spec 2.0): scan windows, statistics, verdict building."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param, Rule
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["ProfilerRule", "SCAN", "window_ends", "boxplot", "downsample", "pct", "job_cpu", "JOB_CPU_KEY"]

SCAN = Param("scan_interval_us", int, 60_000_000, "length of one evaluation window (µs)", min=1)
MAX_SERIES_POINTS = 500
JOB_CPU_KEY = "process_cpu_utilization_percent"
"""The training job's own CPU (its process tree) as a share of all the node's cores."""


def job_cpu(arr: SystemArrays) -> tuple[np.ndarray, bool]:
    """Per row, the CPU the rules judge, and whether it is the training job's own.

    The job's process tree (``process_cpu_utilization_percent``) when it was recorded, so that other jobs on a
    shared machine are not blamed on the training; else the host's mean over cores (runs recorded before it,
    SageMaker traces).
    """
    col = arr.column(JOB_CPU_KEY)
    if col is not None and np.isfinite(col).any():
        return col.astype(np.float64), True
    return arr.cpu_total(), False


def window_ends(first: float, last: float, scan_s: float) -> np.ndarray:
    """Ends of the scan windows ``first + k·scan`` (k >= 1) covering ``[first, last]`` (epoch seconds)."""
    count = max(1, int(np.ceil((last - first) / scan_s)))
    return first + scan_s * np.arange(1, count + 1)


def pct(values: np.ndarray, q: float) -> float:
    """Percentile ``q`` (0-100) of the finite values, NaN when empty."""
    v = values[np.isfinite(values)]
    return float(np.percentile(v, q)) if len(v) else float("nan")


def boxplot(values: np.ndarray) -> dict[str, float]:
    """Smdebug's boxplot statistics: min, max, p25, p50, p75, p95, and the whiskers upper/lower."""
    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if not len(v):
        return {}
    p25, p50, p75, p95 = (float(x) for x in np.percentile(v, [25, 50, 75, 95]))
    iqr = p75 - p25
    return {
        "min": float(v.min()),
        "max": float(v.max()),
        "p25": p25,
        "p50": p50,
        "p75": p75,
        "p95": p95,
        "upper": min(p75 + 1.5 * iqr, float(v.max())),
        "lower": max(p25 - 1.5 * iqr, float(v.min())),
    }


def downsample(x: np.ndarray, y: np.ndarray, max_points: int = MAX_SERIES_POINTS) -> tuple[tuple[float, ...], ...]:
    """At most ``max_points`` evenly spaced (x, y) pairs, as tuples for :class:`Series`."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if len(x) > max_points:
        idx = np.linspace(0, len(x) - 1, max_points).round().astype(int)
        x, y = x[idx], y[idx]
    return tuple(float(v) for v in x), tuple(round(float(v), 4) for v in y)


class ProfilerRule(Rule):
    """Base of the profiler rules: ``kind = "profiler"`` and a verdict builder."""

    kind: ClassVar[str] = "profiler"

    def scan_s(self) -> float:
        """The scan window in seconds."""
        return float(self.params.get("scan_interval_us", SCAN.default)) / 1e6

    def verdict(
        self,
        status: Status,
        message: str,
        datapoints: int = 0,
        trigger_times: Sequence[float] = (),
        details: dict[str, Any] | None = None,
        series: Sequence[Series] = (),
        workers: Sequence[str] = (),
    ) -> Verdict:
        """Build this rule's verdict; triggers and first/last trigger times come from ``trigger_times``."""
        times = sorted(float(t) for t in trigger_times)
        return Verdict(
            rule=self.name,
            status=status,
            message=message,
            recommendation=self.recommendation,
            kind="profiler",
            datapoints=int(datapoints),
            triggers=len(times),
            first_trigger_time=times[0] if times else None,
            last_trigger_time=times[-1] if times else None,
            workers=tuple(workers),
            parameters=dict(self.params),
            details=details or {},
            series=tuple(series),
        )

    def no_data(self, message: str, datapoints: int = 0) -> Verdict:
        """A ``NoData`` verdict saying what is missing."""
        return self.verdict(Status.NO_DATA, message, datapoints=datapoints)

    def no_gpu(self, data: ProfilerData) -> Verdict | None:
        """``NoData`` when the run recorded no GPU metrics, else ``None``."""
        if data.has_gpu:
            return None
        where = "no system metrics were recorded" if not data.system else "the run recorded no GPU metrics"
        return self.no_data(f"{where} (CPU-only run, or NVML unavailable): this rule needs GPU utilisation")
