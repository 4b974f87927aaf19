"""GPUMemoryIncrease: the moving average of GPU memory jumps (spec 2.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import ProfilerRule, boxplot, downsample
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["GPUMemoryIncrease"]


class GPUMemoryIncrease(ProfilerRule):
    """Flag jumps of the GPU memory moving average.

    On every sample ``i`` of a GPU's memory utilisation (after ``patience`` samples), compare the mean of
    the last ``window`` values with the mean of the previous full window; an increase of more than
    ``increase`` percentage points is a violation. (smdebug compares with a window one element shorter, a
    quirk spec 2.5 allows fixing.).

    Example:
        >>> GPUMemoryIncrease().increase
        5.0
    """

    parameters = (
        Param("increase", float, 5.0, "moving-average increase that is a violation (percentage points)", min=0),
        Param("patience", int, 1000, "samples a GPU needs before it is judged", min=1),
        Param("window", int, 10, "moving-average window (samples)", min=1),
    )
    increase: float
    patience: int
    window: int
    recommendation = "Choose a larger instance type with more memory if footprint is close to maximum available memory."
    description = "large increase in average GPU memory"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every GPU of every node."""
        missing = self.no_gpu(data)
        if missing:
            return missing
        triggers: list[float] = []
        details: dict[str, Any] = {}
        series: list[Series] = []
        most, biggest = 0, (float("-inf"), "")
        for node, arr in data.system.items():
            for g in arr.gpus:
                col = arr.column(f"gpu{g}_memory_used_percent")
                if col is None:
                    continue
                ok = np.isfinite(col)
                t, v = arr.timestamps[ok], col[ok].astype(np.float64)
                most = max(most, len(v))
                w = self.window
                if len(v) <= w + 1:
                    continue
                csum = np.concatenate([[0.0], np.cumsum(v)])
                moving = (csum[w:] - csum[:-w]) / w  # moving[k] = mean(v[k:k+w])
                diff = moving[1:] - moving[:-1]  # diff[j] belongs to sample i = j + w
                idx = np.arange(w, len(v))
                bad = (diff > self.increase) & (idx + 1 > self.patience) & (idx > w)
                label = f"{node}/gpu{g}"
                triggers += [float(x) for x in t[idx[bad]]]
                details[label] = {**boxplot(v), "increase": float(diff.max()), "violations": int(bad.sum())}
                if diff.max() > biggest[0]:
                    biggest = (float(diff.max()), label)
                xs, ys = downsample(t[w - 1 :], moving)
                series.append(Series(f"{label} memory moving average (%)", xs, ys, "s", tuple(t[idx[bad]][:500])))
        if most <= self.patience:
            return self.no_data(
                f"too little data: {most} GPU memory samples; the rule needs more than patience={self.patience}", most
            )
        msg = (
            f"largest increase of the {self.window}-sample moving average: {biggest[0]:.2f} points on {biggest[1]} "
            f"(threshold {self.increase:g}); {len(triggers)} violation(s)"
        )
        status = Status.ISSUES_FOUND if triggers else Status.NO_ISSUES_FOUND
        return self.verdict(status, msg, most, triggers, details, series)
