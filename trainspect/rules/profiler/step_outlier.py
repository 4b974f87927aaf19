"""StepOutlier: steps much longer than the others, costing a real share of the training loop (spec 2.8)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from trainspect._units import duration
from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys, parse_mode
from trainspect.profiler.data import ProfilerData
from trainspect.rules._common import LITERAL
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import SCAN, ProfilerRule, downsample, window_ends
from trainspect.rules.profiler._prefix_outliers import PrefixOutliers
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["StepOutlier"]

MIN_STEPS = 100
"""A worker and mode needs more than this many steps to be judged (smdebug's limit)."""

MAD_SCALE = 1.4826
"""Scales the median absolute deviation to a standard deviation for normally distributed durations."""

MIN_SPREAD = 0.01
"""Smallest spread, as a fraction of the typical step: identical durations (timer resolution) are no outliers."""

SUSTAINED_STEPS = 21
"""Window (steps, centred) in which a slowdown is sustained when over ``SUSTAINED_SHARE`` of its steps are outliers."""

SUSTAINED_SHARE = 0.8
"""Share of outliers in the window that makes a slowdown sustained (scheduler noise that slows a third of the
steps at random reaches it in about one window in 10^5)."""


@dataclass
class _Group:
    """The steps of one worker and mode, in time order, and the worker's training-loop time."""

    label: str
    start: np.ndarray
    end: np.ndarray
    steps: np.ndarray
    loop_s: float

    @property
    def dur(self) -> np.ndarray:
        return self.end - self.start


@dataclass
class _Judged:
    """One group's outcome: trigger times, threshold, outlier mask, steps marked on the chart, details, message."""

    triggers: list[float]
    threshold: float
    out: np.ndarray
    marks: np.ndarray
    details: dict[str, Any] = field(default_factory=dict)
    message: str = ""


class StepOutlier(ProfilerRule):
    """Flag step-duration outliers that cost a real share of the training loop.

    Per worker and mode with more than 100 steps, a step is an outlier when it lasts longer than
    ``median + mad_factor · MAD`` (the Hampel identifier: the median absolute deviation scaled by 1.4826 to a
    standard deviation; Iglewicz & Hoaglin, *How to Detect and Handle Outliers*, 1993), with the median and MAD
    of the steps after the first ``warmup_steps``. Scheduler blips on a loaded machine are normal, so the count
    of outliers decides nothing. An outlier *costs* time when it lasts over ``min_step_excess_s`` longer than
    the median (a stall: checkpoint, evaluation, garbage collection; an OS time slice is a few to ~20 ms) or
    lies in a sustained slowdown (over 80 % of the 21 steps around it are outliers). The rule triggers only
    when the time the costly outliers after warm-up lose, the sum of (duration − median), exceeds
    ``min_lost_percent`` % of the worker's training loop (first step start to last step end) *and*
    ``min_excess_s`` seconds. The trigger times are the start times of the costly outlier steps themselves
    (warm-up ones included), never a later time.

    ``literal=True`` is smdebug's rule: at each ``scan_interval_us`` window, more than ``n_outliers`` steps longer
    than ``mean + stddev · std`` of all steps so far trigger; the trigger time is the start of the step that
    exceeded ``n_outliers``.

    Example:
        >>> StepOutlier(mode="train").mode
        'train'
        >>> StepOutlier().min_lost_percent, StepOutlier().min_excess_s
        (20.0, 0.5)
    """

    parameters = (
        Param("stddev", float, 3.0, "literal only: outlier threshold in standard deviations above the mean", min=0),
        Param("mode", str, None, "only steps of this mode (TRAIN, EVAL, ...); default: every mode"),
        Param("n_outliers", int, 10, "literal only: outliers tolerated per worker and mode", min=0),
        Param(
            "mad_factor",
            float,
            5.0,
            "outlier threshold in scaled median absolute deviations above the median (> 0)",
            min=0,
        ),
        Param(
            "min_lost_percent",
            float,
            20.0,
            "trigger only when the outliers cost more than this % of the training loop",
            min=0,
            max=100,
        ),
        Param("min_excess_s", float, 0.5, "... and more than this many seconds beyond the median", min=0),
        Param(
            "min_step_excess_s",
            float,
            0.05,
            "an isolated outlier costs time only when this much longer than the median (shorter: scheduler noise)",
            min=0,
        ),
        Param("warmup_steps", int, 2, "first steps per worker and mode not counted (start-up, autotuning)", min=0),
        LITERAL,
        SCAN,
    )
    stddev: float
    mode: str | None
    n_outliers: int
    mad_factor: float
    min_lost_percent: float
    min_excess_s: float
    min_step_excess_s: float
    warmup_steps: int
    literal: bool
    scan_interval_us: int
    recommendation = "Check if there are any bottlenecks (CPU, I/O) correlated to the step outliers."
    description = "step-duration outliers that cost a real share of the training loop"

    def validate(self) -> None:
        """Check ``mode`` names a mode and ``mad_factor`` is positive."""
        if self.mode is not None:
            try:
                self.mode = parse_mode(str(self.mode).split("Step:")[-1]).name.lower()
            except ValueError as exc:
                raise ConfigError(f"{self.name}: parameter {exc}") from None
        if not self.mad_factor > 0:
            raise ConfigError(f"{self.name}: parameter mad_factor={self.mad_factor!r} is out of range; allowed: > 0")

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every (worker, mode)."""
        if not data.has_steps:
            return self.no_data("no steps were recorded: the rule needs framework step timings")
        groups = list(self._groups(data))
        most = max((len(g.start) for g in groups), default=0)
        if most <= MIN_STEPS:
            return self.no_data(
                f"too little data: {most} steps per worker and mode; the rule needs more than {MIN_STEPS}", most
            )
        judge = self._literal if self.literal else self._robust
        triggers: list[float] = []
        details: dict[str, Any] = {}
        series: list[Series] = []
        parts: list[str] = []
        for g in groups:
            if len(g.start) <= MIN_STEPS:
                continue
            res = judge(g)
            triggers += res.triggers
            details[g.label] = {**_stats(g, res.threshold, res.out, self.stddev), **res.details}
            parts.append(f"{g.label}: {res.message}")
            xs, ys = downsample(g.start, g.dur)
            trig_x = tuple(float(t) for t in g.start[res.marks][:500]) if res.triggers else ()
            series.append(Series(f"{g.label} step duration (s)", xs, ys, "s", trig_x, res.threshold))
        status = Status.ISSUES_FOUND if triggers else Status.NO_ISSUES_FOUND
        return self.verdict(status, "; ".join(parts), most, triggers, details, series)

    def _groups(self, data: ProfilerData) -> list[_Group]:
        groups = []
        for worker, tab in data.framework.items():
            if not tab.step_count:
                continue
            loop_s = float(tab.steps["end"].max() - tab.steps["start"].min())
            for mode in np.unique(tab.steps["mode"]):
                name = ModeKeys(int(mode)).name
                if self.mode is not None and name.lower() != self.mode:
                    continue
                sel = np.flatnonzero(tab.steps["mode"] == mode)
                sel = sel[np.argsort(tab.steps["start"][sel], kind="stable")]
                groups.append(
                    _Group(
                        f"{worker}/{name}",
                        tab.steps["start"][sel],
                        tab.steps["end"][sel],
                        tab.steps["global_step"][sel],
                        loop_s,
                    )
                )
        return groups

    # --- trainspect's rule: robust threshold, judged by the time the outliers cost -----------------------
    def _robust(self, g: _Group) -> _Judged:
        dur = g.dur
        counted = np.arange(len(dur)) >= self.warmup_steps
        base = dur[counted]
        typical = float(np.median(base))
        mad = MAD_SCALE * float(np.median(np.abs(base - typical)))
        thr = typical + self.mad_factor * max(mad, MIN_SPREAD * typical)
        out = dur > thr
        costly = out & ((dur - typical > self.min_step_excess_s) | _sustained(out))
        excess = float((dur[costly & counted] - typical).sum())
        lost = 100.0 * excess / g.loop_s if g.loop_s > 0 else 0.0
        hit = lost > self.min_lost_percent and excess > self.min_excess_s
        msg = (
            f"{int(out.sum())} step(s) longer than median {duration(typical)} + {self.mad_factor:g}·MAD "
            f"({duration(thr)}), "
            f"{int(costly.sum())} of them stalls (> min_step_excess_s {self.min_step_excess_s:g} s over the median) "
            f"or in a sustained slowdown; after the first {self.warmup_steps} (warm-up) they cost {excess:.3g} s, "
            f"{lost:.1f}% of the {g.loop_s:.3g} s training "
            f"loop (triggers above min_lost_percent {self.min_lost_percent:g}% and min_excess_s "
            f"{self.min_excess_s:g} s)"
        )
        details: dict[str, Any] = {
            "typical_s": typical,
            "mad_s": mad,
            "stall_step_numbers": [int(x) for x in g.steps[costly][:1000]],
            "excess_s": excess,
            "lost_percent": lost,
            "loop_s": g.loop_s,
        }
        return _Judged([float(t) for t in g.start[costly]] if hit else [], thr, out, costly, details, msg)

    # --- smdebug's literal rule ------------------------------------------------------------------------
    def _literal(self, g: _Group) -> _Judged:
        order = np.argsort(g.end, kind="stable")
        end_sorted, dur_sorted, start_sorted = g.end[order], g.dur[order], g.start[order]
        trig = []
        scan = PrefixOutliers(dur_sorted, self.stddev)  # each window from cumulative sums, not its whole prefix
        for n in np.searchsorted(
            end_sorted, window_ends(float(end_sorted[0]), float(end_sorted[-1]), self.scan_s()), "right"
        ):
            if n <= MIN_STEPS:
                continue
            i = scan.nth_outlier(int(n), self.n_outliers)
            if i is not None:
                trig.append(float(start_sorted[i]))  # the step that exceeded n_outliers
        thr = float(g.dur.mean() + self.stddev * g.dur.std())
        out = g.dur > thr
        msg = (
            f"{int(out.sum())} step(s) longer than mean + {self.stddev:g}·std ({duration(thr)}; "
            f"n_outliers {self.n_outliers} tolerated)"
        )
        return _Judged(trig, thr, out, out, {}, msg)


def _sustained(out: np.ndarray) -> np.ndarray:
    """Per step: whether over ``SUSTAINED_SHARE`` of the ``SUSTAINED_STEPS`` steps centred on it are outliers."""
    n, half = len(out), SUSTAINED_STEPS // 2
    csum = np.concatenate([[0], np.cumsum(out)])
    idx = np.arange(n)
    lo, hi = np.clip(idx - half, 0, n), np.clip(idx + half + 1, 0, n)
    return np.asarray(csum[hi] - csum[lo] > SUSTAINED_SHARE * (hi - lo))


def _stats(g: _Group, thr: float, out: np.ndarray, stddev: float) -> dict[str, Any]:
    dur = g.dur
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
        "step_numbers": [int(s) for s in g.steps[out][:1000]],
        "outlier_times": [float(t) for t in g.start[out][:1000]],
        "probs": probs.tolist(),
        "binedges": edges.tolist(),
    }
