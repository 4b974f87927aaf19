"""LowGPUUtilization: a GPU whose utilisation is low or fluctuates (spec 2.1)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import SCAN, ProfilerRule, boxplot, window_ends
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["LowGPUUtilization", "UNDERUSED_P95"]

UNDERUSED_P95 = 70.0
"""A GPU whose utilisation p95 is below this (%) is underutilised: the default ``threshold_p95``, and the cut-off of
OverallSystemUsage's narrative and of the report's advice (:func:`~.overall_system_usage.usage_class`)."""


class LowGPUUtilization(ProfilerRule):
    """Flag GPUs with low or fluctuating utilisation.

    Per GPU, over the last ``window`` samples at each scan window: p95 below ``threshold_p95`` means
    underutilised; otherwise p95 above it with p5 below ``threshold_p5`` means fluctuating. Only GPUs with
    more than ``patience`` samples are judged (smdebug ProfilerReport's LowGPUUtilization).

    Example:
        >>> LowGPUUtilization(threshold_p95=60).threshold_p95
        60.0
    """

    parameters = (
        Param("threshold_p95", float, UNDERUSED_P95, "p95 utilisation below this is underutilisation (%)", 0, 100),
        Param("threshold_p5", float, 10.0, "p5 utilisation below this, with a high p95, is fluctuation (%)", 0, 100),
        Param("window", int, 500, "number of most recent samples the quantiles are taken over", min=1),
        Param("patience", int, 1000, "samples a GPU needs before it is judged", min=1),
        SCAN,
    )
    threshold_p95: float
    threshold_p5: float
    window: int
    patience: int
    scan_interval_us: int
    recommendation = (
        "Check if there are bottlenecks, minimize blocking calls, change distributed training strategy, "
        "or increase the batch size."
    )
    description = "GPU utilisation is low or fluctuating: bottlenecks, blocking calls or a small batch"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every GPU of every node."""
        missing = self.no_gpu(data)
        if missing:
            return missing
        triggers: list[float] = []
        series: list[Series] = []
        details: dict[str, Any] = {}
        worst: tuple[float, str, str] | None = None
        most = 0
        for node, arr in data.system.items():
            ends = window_ends(float(arr.timestamps[0]), float(arr.timestamps[-1]), self.scan_s())
            for g in arr.gpus:
                col = arr.column(f"gpu{g}_utilization_percent")
                assert col is not None
                ok = np.isfinite(col)
                t, v = arr.timestamps[ok], col[ok].astype(np.float64)
                most = max(most, len(v))
                label = f"{node}/gpu{g}"
                res = self._judge(t, v, ends)
                if res is None:
                    continue
                xs, p95s, trig, reason, last = res
                triggers += trig
                details[label] = {**boxplot(v), "gpu_95": last[0], "gpu_5": last[1], "issue": reason}
                series.append(Series(f"{label} p95 utilisation (%)", xs, p95s, "s", tuple(trig), self.threshold_p95))
                if trig and (worst is None or last[0] < worst[0]):
                    worst = (last[0], label, reason or "")
        if most <= self.patience:
            return self.no_data(
                f"too little data: at most {most} GPU utilisation samples per GPU; the rule needs more than "
                f"patience={self.patience}",
                most,
            )
        if worst is not None:
            d = details[worst[1]]
            msg = (
                f"{worst[1]} {worst[2]}: p95 utilisation {d['gpu_95']:.1f}% (threshold_p95 {self.threshold_p95:g}%), "
                f"p5 {d['gpu_5']:.1f}% (threshold_p5 {self.threshold_p5:g}%); {len(triggers)} trigger(s)"
            )
            return self.verdict(Status.ISSUES_FOUND, msg, most, triggers, details, series)
        low = min(d["gpu_95"] for d in details.values())
        msg = f"every GPU is well used: lowest p95 utilisation {low:.1f}% >= threshold_p95 {self.threshold_p95:g}%"
        return self.verdict(Status.NO_ISSUES_FOUND, msg, most, (), details, series)

    def _judge(
        self, t: np.ndarray, v: np.ndarray, ends: np.ndarray
    ) -> tuple[tuple[float, ...], tuple[float, ...], list[float], str | None, tuple[float, float]] | None:
        xs, p95s, trig = [], [], []
        reason: str | None = None
        last = (float("nan"), float("nan"))
        for end, n in zip(ends, np.searchsorted(t, ends, "right"), strict=True):
            if n <= self.patience:
                continue
            p95, p5 = (float(x) for x in np.percentile(v[max(0, n - self.window) : n], [95, 5]))
            xs.append(float(end))
            p95s.append(round(p95, 3))
            last = (p95, p5)
            if p95 < self.threshold_p95:
                trig.append(float(end))
                reason = "underutilised"
            elif p5 < self.threshold_p5:
                trig.append(float(end))
                reason = reason or "fluctuating"
        if not xs:
            return None
        return tuple(xs), tuple(p95s), trig, reason, last
