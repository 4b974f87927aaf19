"""WorkerStraggler: one worker's steps are much slower than the others' (distributed jobs)."""

from __future__ import annotations

import numpy as np

from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import ProfilerRule
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["WorkerStraggler"]


class WorkerStraggler(ProfilerRule):
    """Flag workers whose median training-step time exceeds the median over all workers by ``threshold`` %.

    In data-parallel training every step waits for the slowest rank, so one straggler slows the whole job;
    HTA's straggler analysis and SageMaker's per-node comparison rest on the same idea. Needs two or more workers
    with ``min_steps`` steps each.

    Example:
        >>> WorkerStraggler().threshold
        20.0
    """

    parameters = (
        Param("threshold", float, 20.0, "% above the median over workers that makes a straggler", min=0),
        Param("min_steps", int, 10, "steps each worker needs before it is judged", min=1),
    )
    threshold: float
    min_steps: int
    recommendation = (
        "One worker is slower than the others and every synchronous step waits for it: check that node's "
        "utilisation and data loading, balance the data shards, or replace a degraded instance."
    )
    description = "straggler: a worker's median step time is threshold % above the median over all workers"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Compare each worker's median step duration with the median over all workers."""
        medians: dict[str, float] = {}
        for worker, tab in sorted(data.framework.items()):
            durations = np.asarray(tab.steps["end"], dtype=np.float64) - np.asarray(
                tab.steps["start"], dtype=np.float64
            )
            durations = durations[np.isfinite(durations) & (durations >= 0)]
            if len(durations) >= int(self.min_steps):
                medians[worker] = float(np.median(durations))
        if len(medians) < 2:
            return self.no_data(
                f"{len(medians)} worker(s) with at least {self.min_steps} steps: the rule compares two or more "
                "workers of a distributed job"
            )
        overall = float(np.median(list(medians.values())))
        limit = overall * (1 + float(self.threshold) / 100.0)
        slow = [w for w, m in medians.items() if m > limit]
        workers = sorted(medians)
        series = [Series("median step time (s) by worker rank", tuple(range(len(workers))),
                         tuple(medians[w] for w in workers), "worker", tuple(workers.index(w) for w in slow),
                         limit)]  # fmt: skip
        details = {"median_step_s": medians, "median_over_workers_s": overall, "limit_s": limit, "stragglers": slow}
        if slow:
            worst = max(slow, key=medians.__getitem__)
            msg = (f"{', '.join(slow)} straggle: {worst} takes {medians[worst]:.4g} s per step against "
                   f"{overall:.4g} s over all workers (threshold {self.threshold:g} % above)")  # fmt: skip
            return self.verdict(Status.ISSUES_FOUND, msg, len(medians), [data.end_time() or 0.0], details, series,
                                workers=slow)  # fmt: skip
        msg = f"no straggler among {len(medians)} workers (median step {overall:.4g} s, threshold {self.threshold:g} %)"
        return self.verdict(Status.NO_ISSUES_FOUND, msg, len(medians), (), details, series)
