"""WorkerStraggler: one rank's own work per step is much slower than the others' (distributed jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from trainspect._units import duration
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.ranks import rank_times
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import ProfilerRule
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["WorkerStraggler"]

_PARTS = ("compute_s", "loader_s", "between_s")
_EXPLAINS = 1.25
"""A compute excess up to this many times another rank's input or between-steps excess may be the wait for that rank
in a collective of the forward pass (DDP's buffer broadcast, SyncBatchNorm): that rank is named, not this one."""


@dataclass(frozen=True)
class _Finding:
    worker: str
    part: str
    value: float
    reference: float
    excess: float
    busy: float


class WorkerStraggler(ProfilerRule):
    """Flag the rank whose own work per step cycle exceeds the other ranks' by ``threshold`` %.

    Under synchronous data parallelism (DDP) every rank waits in the gradient all-reduce for the slowest, so all
    step times are equal; what differs is each rank's own work (HTA's straggler analysis looks for the same rank,
    from the other side: the one whose collectives wait least). Per rank, the medians over its training step cycles
    of three parts (:mod:`trainspect.profiler.ranks`): *compute* (the step less the wait at the end of
    ``backward()``), the *data-loader wait*, and the time *between steps* outside the data loader. A rank straggles
    when one part exceeds the median of that part over the other ranks by more than ``threshold`` % of the other
    ranks' median own time per cycle (cycle less the synchronisation wait). ``measure="step"`` compares median step
    times with the median over all workers instead (the rule before synchronisation waits were recorded). Needs two
    or more workers with ``min_steps`` step cycles each.

    Example:
        >>> WorkerStraggler().threshold, WorkerStraggler().measure
        (20.0, 'compute')
    """

    parameters = (
        Param(
            "threshold",
            float,
            20.0,
            "% above the other ranks (of their own time per step) that makes a straggler",
            min=0,
        ),
        Param("min_steps", int, 10, "step cycles each worker needs before it is judged", min=1),
        Param(
            "measure",
            str,
            "compute",
            "what is compared: each rank's compute, data-loader wait and time between "
            "steps ('compute'), or its step time ('step', which synchronous training equalises)",
            choices=("compute", "step"),
        ),
    )
    threshold: float
    min_steps: int
    measure: str
    recommendation = (
        "One rank does more work per step than the others and every synchronous step waits for it: for compute, "
        "check that node's utilisation, its device and the share of the data (uneven batch or sequence lengths); "
        "for the data loader, its num_workers, its storage and its shard of the data; between steps, work only that "
        "rank does (logging, evaluation, checkpoints). Replace a degraded instance."
    )
    description = "straggler: a rank's compute or input wait per step is threshold % above the other ranks'"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Compare each rank's compute, data-loader wait and time between steps with the other ranks'."""
        if self.measure == "step":
            return self._by_step_time(data)
        ranks = rank_times(data, int(self.min_steps)).set_index("worker")
        if len(ranks) < 2:
            return self._too_few(len(ranks))
        found = _explained_away(self._findings(ranks))
        details: dict[str, Any] = {
            "measure": "compute",
            "by_worker": {
                w: {k: float(v) if k != "cycles" else int(v) for k, v in row.items() if k != "sync_recorded"}
                for w, row in ranks.iterrows()
            },
            "sync_waits_recorded": bool(ranks["sync_recorded"].all()),
            "stragglers": [f.worker for f in found],
            "parts": {f.worker: f.part.removesuffix("_s") for f in found},
        }
        series = _series(ranks, found)
        note = (
            ""
            if details["sync_waits_recorded"]
            else ("; no synchronisation waits were recorded, so compute is the whole step")
        )
        if found:
            msg = "; ".join(self._describe(f, len(ranks)) for f in found) + note
            return self.verdict(
                Status.ISSUES_FOUND,
                msg,
                len(ranks),
                [data.end_time() or 0.0],
                details,
                series,
                workers=[f.worker for f in found],
            )
        med = float(ranks["compute_s"].median())
        msg = (
            f"no straggler among {len(ranks)} workers (median compute {duration(med)} per step, data-loader wait "
            f"{duration(float(ranks['loader_s'].median()))}, threshold {self.threshold:g} %){note}"
        )
        return self.verdict(Status.NO_ISSUES_FOUND, msg, len(ranks), (), details, series)

    def _too_few(self, n: int) -> Verdict:
        return self.no_data(
            f"{n} worker(s) with at least {self.min_steps} step cycles of framework metrics: the rule compares two or "
            "more workers of a distributed job (record them with a ProfilerConfig)"
        )

    def _findings(self, ranks: pd.DataFrame) -> list[_Finding]:
        """Per straggling rank, its worst part."""
        limit = float(self.threshold) / 100.0
        found = []
        for worker in ranks.index:
            others = ranks.drop(index=worker)
            busy = float(others["busy_s"].median())
            if busy <= 0:
                continue
            cands = []
            for part in _PARTS:
                value, reference = float(ranks.at[worker, part]), float(others[part].median())
                cands.append(_Finding(str(worker), part, value, reference, value - reference, busy))
            worst = max(cands, key=lambda f: f.excess)
            if worst.excess > limit * busy:
                found.append(worst)
        return sorted(found, key=lambda f: -f.excess)

    def _describe(self, f: _Finding, n: int) -> str:
        others = "the other rank" if n == 2 else "the median of the other ranks"
        if f.part == "compute_s":
            pct = 100.0 * f.excess / f.reference if f.reference > 0 else float("inf")
            return (
                f"{f.worker} computes {pct:.0f} % longer per step than {others} ({duration(f.value)} vs "
                f"{duration(f.reference)}; threshold {self.threshold:g} %)"
            )
        share = 100.0 * f.excess / f.busy
        what = (
            "waits {} per step for its data loader"
            if f.part == "loader_s"
            else ("spends {} per step between steps outside the data loader")
        )
        return (
            f"{f.worker} {what.format(duration(f.value))}, {others} {duration(f.reference)}: every step waits "
            f"{duration(f.excess)} for it, {share:.0f} % of the others' own time per step (threshold "
            f"{self.threshold:g} %)"
        )

    def _by_step_time(self, data: ProfilerData) -> Verdict:
        """The rule before synchronisation waits: median step time against the median over all workers."""
        medians: dict[str, float] = {}
        for worker, tab in sorted(data.framework.items()):
            durations = np.asarray(tab.steps["end"], dtype=np.float64) - np.asarray(
                tab.steps["start"], dtype=np.float64
            )
            durations = durations[np.isfinite(durations) & (durations >= 0)]
            if len(durations) >= int(self.min_steps):
                medians[worker] = float(np.median(durations))
        if len(medians) < 2:
            return self._too_few(len(medians))
        overall = float(np.median(list(medians.values())))
        limit = overall * (1 + float(self.threshold) / 100.0)
        slow = [w for w, m in medians.items() if m > limit]
        workers = sorted(medians)
        series = [
            Series(
                "median step time (s) by worker rank",
                tuple(range(len(workers))),
                tuple(medians[w] for w in workers),
                "worker",
                tuple(workers.index(w) for w in slow),
                limit,
            )
        ]
        details = {
            "measure": "step",
            "median_step_s": medians,
            "median_over_workers_s": overall,
            "limit_s": limit,
            "stragglers": slow,
        }
        if slow:
            worst = max(slow, key=medians.__getitem__)
            msg = (
                f"{', '.join(slow)} straggle: {worst} takes {medians[worst]:.4g} s per step against "
                f"{overall:.4g} s over all workers (threshold {self.threshold:g} % above)"
            )
            return self.verdict(
                Status.ISSUES_FOUND, msg, len(medians), [data.end_time() or 0.0], details, series, workers=slow
            )
        msg = f"no straggler among {len(medians)} workers (median step {overall:.4g} s, threshold {self.threshold:g} %)"
        return self.verdict(Status.NO_ISSUES_FOUND, msg, len(medians), (), details, series)


def _explained_away(found: list[_Finding]) -> list[_Finding]:
    """Drop a compute straggler whose excess another rank's input or between-steps excess explains.

    Fast ranks that wait for a slow loader in a collective of the forward pass (DDP's buffer broadcast, SyncBatchNorm)
    count that wait as compute; it cannot exceed the slow rank's own excess.
    """
    waits = [f for f in found if f.part != "compute_s"]
    return [
        f
        for f in found
        if f.part != "compute_s" or not any(w.worker != f.worker and f.excess <= _EXPLAINS * w.excess for w in waits)
    ]


def _series(ranks: pd.DataFrame, found: list[_Finding]) -> list[Series]:
    workers = list(ranks.index)
    x = tuple(float(i) for i in range(len(workers)))
    out = []
    for part, label in (
        ("compute_s", "median compute per step (s) by worker rank"),
        ("loader_s", "median data-loader wait per step (s) by worker rank"),
    ):
        hits = tuple(float(workers.index(f.worker)) for f in found if f.part == part)
        out.append(Series(label, x, tuple(float(v) for v in ranks[part]), "worker", hits))
    return out
