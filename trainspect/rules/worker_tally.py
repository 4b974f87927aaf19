"""One rule judging every worker of a run: a :class:`~trainspect.rules.tally.Tally` per worker, one verdict.

Each worker is judged on its own data with its own rule state (a NaN on rank 3, a loss that stalls on rank 1), and
the verdict is :func:`~trainspect.rules.worker_verdicts.combine_workers` of the workers' verdicts; its counts are
steps, each counted once however many workers gave a datapoint or triggered at it. With a single worker the verdict
is that worker's tally's, unchanged.
"""

from __future__ import annotations

from typing import Any

from trainspect.rules.columns import Checks, Columns
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tally import Tally
from trainspect.rules.verdict import Verdict
from trainspect.rules.worker_verdicts import combine_workers, rank_key

__all__ = ["WorkerTally"]


class WorkerTally:
    """Evaluation state of one tensor rule over the steps of one or more workers.

    Args:
        rule: the rule.
        several: whether the run has several workers (the per-worker tallies then name their worker).

    Example:
        >>> from trainspect.modes import ModeKeys
        >>> from trainspect.rules import ExplodingTensor
        >>> from trainspect.step import TensorRecord
        >>> import numpy as np
        >>> wt = WorkerTally(ExplodingTensor(), several=True)
        >>> for worker, loss in (("worker_0", 1.0), ("worker_1", float("nan"))):
        ...     loss_record = TensorRecord("loss", np.float32(loss))
        ...     _ = wt.feed(StepData(4, ModeKeys.TRAIN, 4, 0.0, worker, {"main": (loss_record,)}))
        >>> v = wt.verdict(finished=True)
        >>> v.details["worker"], v.first_trigger_step, v.triggers, v.datapoints
        ('worker_1', 4, 1, 1)
    """

    def __init__(self, rule: Any, several: bool = False) -> None:
        self.rule = rule
        self.several = several
        self.tallies: dict[str, Tally[Any]] = {}
        self._points: dict[int, int] = {}  # per step, the most datapoints any worker gave at it
        self._hits: dict[int, int] = {}  # per step, the most triggers any worker had at it
        self._failure: BaseException | None = None

    def tally(self, worker: str) -> Tally[Any]:
        """The tally of one worker (created on first use)."""
        found = self.tallies.get(worker)
        if found is None:
            found = self.tallies[worker] = Tally(self.rule, name_worker=self.several)
            if self._failure is not None:
                found.fail(self._failure)
        return found

    def done(self, worker: str) -> bool:
        """Whether the worker's tally stopped (its rule failed)."""
        return self.tally(worker).error is not None

    def feed(self, data: StepData) -> Check | None:
        """Judge one step of one worker (``data.worker``); return the check when it triggered."""
        tally = self.tally(data.worker)
        if not self.several:
            return tally.feed(data)
        before = tally.datapoints, tally.triggers
        check = tally.feed(data)
        self._count(data.step, tally, before)
        return check

    def feed_columns(self, cols: Columns) -> Checks | None:
        """Judge a chunk of one worker's steps at once (see :meth:`Tally.feed_columns`); None when declined."""
        checks = self.tally(cols.worker).feed_columns(cols)
        if checks is None or not self.several:
            return checks
        for step, hit in zip(cols.steps[checks.index].tolist(), checks.triggered.tolist(), strict=True):
            self._points[step] = max(self._points.get(step, 0), 1)
            if hit:
                self._hits[step] = max(self._hits.get(step, 0), 1)
        return checks

    def end(self) -> None:
        """Tell every worker's rule the data has ended."""
        for tally in self.tallies.values():
            before = tally.datapoints, tally.triggers
            tally.end()
            if self.several and tally.last_step is not None:
                self._count(tally.last_step.step, tally, before)

    def fail(self, exc: BaseException) -> None:
        """Mark the rule as failed on every worker (its verdict becomes Error)."""
        self._failure = exc
        for tally in self.tallies.values():
            tally.fail(exc)

    def _count(self, step: int, tally: Tally[Any], before: tuple[int, int]) -> None:
        points, hits = tally.datapoints - before[0], tally.triggers - before[1]
        if points > self._points.get(step, 0):
            self._points[step] = points
        if hits > self._hits.get(step, 0):
            self._hits[step] = hits

    def verdict(self, finished: bool) -> Verdict:
        """The verdict over every worker so far (``finished``: whether the data has ended, else InProgress)."""
        if not self.tallies:  # no step at all: the rule's NoData (or Error) verdict
            return self.tally("worker_0").verdict(finished)
        parts = [self.tallies[w].verdict(finished) for w in sorted(self.tallies, key=rank_key)]
        if len(parts) == 1:
            return parts[0]
        return combine_workers(parts, (sum(self._points.values()), sum(self._hits.values())))
