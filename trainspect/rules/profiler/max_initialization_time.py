"""MaxInitializationTime: the first step comes too late (spec 2.7)."""

from __future__ import annotations

import numpy as np

from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import SCAN, ProfilerRule
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["MaxInitializationTime"]


class MaxInitializationTime(ProfilerRule):
    """Flag a first step that comes too late.

    Each scan window that starts more than ``threshold`` minutes after the job start (the process start)
    without any step seen by its end is a violation.

    Example:
        >>> MaxInitializationTime().threshold
        20.0
    """

    parameters = (Param("threshold", float, 20.0, "minutes the job may take before its first step", min=0), SCAN)
    threshold: float
    scan_interval_us: int
    recommendation = (
        "Initialization takes too long. If using File mode, consider switching to Pipe mode in case you are "
        "using TensorFlow framework."
    )
    description = "initialization too long: the first step comes more than threshold minutes after the start"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Scan the windows from the job start to the last record."""
        if not data.framework:
            return self.no_data("no framework metrics were recorded: the rule needs the step start times")
        first, last = data.start_time(), data.end_time()
        assert first is not None and last is not None
        starts = [float(t.steps["start"][0]) for t in data.framework.values() if t.step_count]
        first_step = min(starts) if starts else None
        scan, limit = self.scan_s(), float(self.threshold) * 60.0
        windows = first + scan * np.arange(0, max(1, int(np.ceil((last - first) / scan))))
        seen = np.full(len(windows), False) if first_step is None else (first_step < windows + scan)
        elapsed = windows - first
        bad = (elapsed > limit) & ~seen
        trig = windows[bad]
        waited = (first_step if first_step is not None else last) - first
        details = {
            "job_start": first,
            "job_end": last,
            "first_step_start": first_step,
            "initialization_s": waited if first_step is not None else None,
        }
        minutes = np.where(seen, np.nan, elapsed / 60.0)
        series = [Series("minutes without a step", tuple(windows), tuple(minutes), "s", tuple(trig), self.threshold)]
        steps = sum(t.step_count for t in data.framework.values())
        if first_step is None:
            msg = f"no step yet after {waited / 60.0:.1f} min (threshold {self.threshold:g} min)"
        else:
            msg = f"initialization took {waited / 60.0:.2f} min (threshold {self.threshold:g} min)"
        if len(trig):
            return self.verdict(Status.ISSUES_FOUND, msg, steps, tuple(trig), details, series)
        if first_step is None and elapsed[-1] + scan <= limit and data.job_ended:
            return self.no_data(f"the job ended without a step after {waited / 60.0:.1f} min")
        return self.verdict(Status.NO_ISSUES_FOUND, msg, steps, (), details, series)
