"""StepOutlier: steps much longer than the others (spec 2.8)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys, parse_mode
from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import SCAN, ProfilerRule, downsample, window_ends
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["StepOutlier"]

MIN_STEPS = 100


class StepOutlier(ProfilerRule):
    """Flag steps much longer than the others.

    Per worker and mode with more than 100 steps, at each scan window: steps longer than
    ``mean + stddev * std`` (over all steps so far) are outliers; more than ``n_outliers`` of them trigger.

    Example:
        >>> StepOutlier(mode="train").mode
        'train'
    """

    parameters = (
        Param("stddev", float, 3.0, "outlier threshold in standard deviations above the mean", min=0),
        Param("mode", str, None, "only steps of this mode (TRAIN, EVAL, ...); default: every mode"),
        Param("n_outliers", int, 10, "outliers tolerated", min=0),
        SCAN,
    )
    stddev: float
    mode: str | None
    n_outliers: int
    scan_interval_us: int
    recommendation = "Check if there are any bottlenecks (CPU, I/O) correlated to the step outliers."
    description = "step-duration outliers suggest stalls or bottlenecks"

    def validate(self) -> None:
        """Check ``mode`` names a mode."""
        if self.mode is not None:
            try:
                self.mode = parse_mode(str(self.mode).split("Step:")[-1]).name.lower()
            except ValueError as exc:
                raise ConfigError(f"parameter {exc}") from None

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every (worker, mode)."""
        if not data.has_steps:
            return self.no_data("no steps were recorded: the rule needs framework step timings")
        triggers: list[float] = []
        details: dict[str, Any] = {}
        series: list[Series] = []
        most, outliers_total = 0, 0
        for worker, tab in data.framework.items():
            for mode in np.unique(tab.steps["mode"]):
                name = ModeKeys(int(mode)).name
                if self.mode is not None and name.lower() != self.mode:
                    continue
                sel = tab.steps["mode"] == mode
                start, end = tab.steps["start"][sel], tab.steps["end"][sel]
                dur = end - start
                most = max(most, len(dur))
                if len(dur) <= MIN_STEPS:
                    continue
                trig, thr, out = self._scan(end, dur)
                triggers += trig
                outliers_total += int(out.sum())
                label = f"{worker}/{name}"
                details[label] = _stats(dur, thr, out, tab.steps["global_step"][sel], self.stddev)
                xs, ys = downsample(start, dur)
                series.append(Series(f"{label} step duration (s)", xs, ys, "s", tuple(start[out][:500]), thr))
        if most <= MIN_STEPS:
            return self.no_data(
                f"too little data: {most} steps per worker and mode; the rule needs more than 100", most
            )
        msg = (
            f"{outliers_total} step(s) longer than mean + {self.stddev:g}·std "
            f"(n_outliers {self.n_outliers} tolerated per worker and mode)"
        )
        status = Status.ISSUES_FOUND if triggers else Status.NO_ISSUES_FOUND
        return self.verdict(status, msg, most, triggers, details, series)

    def _scan(self, end: np.ndarray, dur: np.ndarray) -> tuple[list[float], float, np.ndarray]:
        order = np.argsort(end, kind="stable")
        end_sorted, dur_sorted = end[order], dur[order]
        trig = []
        for w_end, n in zip(
            (ends := window_ends(float(end_sorted[0]), float(end_sorted[-1]), self.scan_s())),
            np.searchsorted(end_sorted, ends, "right"),
            strict=True,
        ):
            if n <= MIN_STEPS:
                continue
            d = dur_sorted[:n]
            if int((d > d.mean() + self.stddev * d.std()).sum()) > self.n_outliers:
                trig.append(float(w_end))
        thr = float(dur.mean() + self.stddev * dur.std())
        return trig, thr, dur > thr


def _stats(dur: np.ndarray, thr: float, out: np.ndarray, steps: np.ndarray, stddev: float) -> dict[str, Any]:
    probs, edges = np.histogram(dur[~out], bins=100) if (~out).any() else (np.zeros(0), np.zeros(0))
    return {
        "step_stats": {
            "mean": float(dur.mean()),
            "max": float(dur.max()),
            "p99": float(np.percentile(dur, 99)),
            "p95": float(np.percentile(dur, 95)),
            "p50": float(np.percentile(dur, 50)),
            "min": float(dur.min()),
        },
        "threshold_s": thr,
        "number_of_outliers": int(out.sum()),
        "stddev": round(stddev, 2),
        "step_numbers": [int(s) for s in steps[out][:1000]],
        "probs": probs.tolist(),
        "binedges": edges.tolist(),
    }
