"""Shared logic of CPUBottleneck and IOBottleneck (spec 2.2-2.3)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.profiler.data import ProfilerData
from trainspect.rules.profiler._common import ProfilerRule, window_ends
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["BottleneckRule"]


class BottleneckRule(ProfilerRule):
    """A sample is a bottleneck when some GPU is below ``gpu_threshold`` while the watched resource is high.

    Cumulatively at each scan window: more than ``patience`` samples and bottlenecks above ``threshold``
    percent of them trigger.
    """

    resource = "CPU"
    threshold: float
    gpu_threshold: float
    patience: int

    def _high(self, arr: Any) -> np.ndarray | None:
        """Per row, whether the watched resource is high (``None``: not recorded)."""
        raise NotImplementedError

    def _limit(self) -> float:
        raise NotImplementedError

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Count bottleneck samples over every node."""
        missing = self.no_gpu(data)
        if missing:
            return missing
        times, flags, lows = [], [], 0
        for arr in data.system.values():
            gpus = arr.matrix([f"gpu{g}_utilization_percent" for g in arr.gpus])
            high = self._high(arr)
            if not arr.gpus or high is None:
                continue
            with np.errstate(invalid="ignore"):
                low = np.any(gpus < self.gpu_threshold, axis=1)
            lows += int(low.sum())
            times.append(arr.timestamps)
            flags.append(low & high)
        if not times:
            return self.no_data(f"no {self.resource} metrics were recorded next to the GPU metrics")
        t = np.concatenate(times)
        order = np.argsort(t, kind="stable")
        t, b = t[order], np.concatenate(flags)[order]
        cum = np.cumsum(b)
        ends = window_ends(float(t[0]), float(t[-1]), self.scan_s())
        counts = np.searchsorted(t, ends, "right")
        share = np.where(counts > 0, 100.0 * cum[np.maximum(counts - 1, 0)] / np.maximum(counts, 1), 0.0)
        judged = counts > self.patience
        trig = ends[judged & (share > self.threshold)]
        n, total = len(t), int(cum[-1])
        details = {
            "datapoints": n,
            "bottlenecks": total,
            "low_gpu_utilization": lows,
            "bottleneck_percent": round(100.0 * total / n, 3),
            "steps_during_bottlenecks": _steps_at(data, t[b]),
        }
        series = [
            Series(
                f"bottleneck samples (% of all, {self.resource})",
                tuple(ends[judged]),
                tuple(share[judged]),
                "s",
                tuple(trig),
                self.threshold,
            )
        ]
        if n <= self.patience:
            return self.no_data(f"too little data: {n} samples; the rule needs more than patience={self.patience}", n)
        what = (
            f"{total} of {n} samples ({100.0 * total / n:.1f}%) had a GPU below {self.gpu_threshold:g}% while "
            f"{self.resource} was above {self._limit():g}% (threshold {self.threshold:g}% of samples)"
        )
        status = Status.ISSUES_FOUND if len(trig) else Status.NO_ISSUES_FOUND
        return self.verdict(status, what, n, tuple(trig), details, series)


def _steps_at(data: ProfilerData, instants: np.ndarray) -> int:
    """Number of steps (any worker) spanning at least one of the instants."""
    count = 0
    for tab in data.framework.values():
        if not tab.step_count or not len(instants):
            continue
        idx = np.searchsorted(instants, tab.steps["start"], "right")
        inside = (idx < len(instants)) & (instants[np.minimum(idx, len(instants) - 1)] < tab.steps["end"])
        count += int(inside.sum())
    return count
