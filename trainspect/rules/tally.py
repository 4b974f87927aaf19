"""The running account of one rule's evaluation: feeds steps to its check and builds the verdict.

Offline evaluation and the live runner both use a :class:`Tally`, so the same data yields the same
verdict either way. A rule that raises stops being fed and ends as ``Error``; the others go on.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Mapping
from typing import Any, ClassVar, Generic, Protocol, TypeVar

import numpy as np

from trainspect.rules.columns import Checks, Columns
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["Tally"]

_log = logging.getLogger(__name__)

MAX_SERIES_POINTS = 2000
"""Series longer than this are thinned (every other point) so verdict files stay small."""


class _Judge(Protocol):
    """What a Tally uses of a rule: a :class:`~trainspect.rules.tensor_rule.TensorRule` (typed here, not imported)."""

    kind: ClassVar[str]
    recommendation: ClassVar[str]
    series_label: ClassVar[str]
    needs_tensors: ClassVar[bool]

    @property
    def name(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...

    def init_state(self) -> Any: ...
    def check(self, state: Any, data: StepData) -> Check | None: ...
    def check_columns(self, state: Any, cols: Columns) -> Checks | None: ...
    def finish(self, state: Any, last: StepData | None) -> Check | None: ...
    def idle(self, state: Any, now: float, last: StepData | None) -> Check | None: ...
    def insufficient(self, state: Any) -> str: ...
    def describe_inputs(self) -> str: ...
    def chart_threshold(self) -> float | None: ...


_R = TypeVar("_R", bound=_Judge)


class Tally(Generic[_R]):
    """Evaluation state of one tensor rule over a growing sequence of steps.

    Args:
        rule: the rule.
        name_worker: the tally judges one worker of a multi-worker job: its messages name the worker
            ("first in worker_3 at step 12") and its details carry ``worker``, ``first_detail`` and
            ``first_trigger_count``, which :func:`~trainspect.rules.worker_verdicts.combine_workers` reads.

    Example:
        >>> from trainspect.rules import VanishingGradient
        >>> t = Tally(VanishingGradient())
        >>> t.verdict(finished=True).status.value
        'NoData'
    """

    def __init__(self, rule: _R, name_worker: bool = False) -> None:
        self.rule = rule
        self.name_worker = name_worker
        self.first_count = 0  # the tensors of the first trigger
        self.state: Any = rule.init_state()
        self.datapoints = 0
        self.inputs_seen = 0
        self.triggers = 0
        self.first: tuple[int, float] | None = None
        self.last: tuple[int, float] | None = None
        self.tensors: dict[str, None] = {}  # the tensors of the triggers
        self.read: dict[str, None] = {}  # every tensor the rule was given
        self.workers: dict[str, None] = {}
        self.first_detail = ""
        self.first_mode: tuple[str, int] | None = None
        self.last_detail = ""
        self.x: list[float] = []
        self.y: list[float] = []
        self.trigger_x: list[float] = []
        self.stride = 1
        self.error: BaseException | None = None
        self.last_step: StepData | None = None
        self.last_seen = time.time()
        self.new_trigger: Check | None = None

    # --- feeding ---------------------------------------------------------------------------------------
    def feed(self, data: StepData) -> Check | None:
        """Judge one step; return the check when it triggered (for actions), else None."""
        if self.error is not None:
            return None
        self.last_seen = time.time()
        if data.empty and self.rule.needs_tensors:
            return None
        self.inputs_seen += 1
        if data.worker not in self.workers:
            self.workers[data.worker] = None
        for role in data.roles.values():
            for t in role:
                if t.name not in self.read:
                    self.read[t.name] = None
        try:
            result = self.rule.check(self.state, data)
        except Exception as exc:  # a failing rule ends as Error, the others go on
            _log.debug("rule %s failed", self.rule.name, exc_info=True)
            self.error = exc
            result = None
        self.last_step = data
        return self._record(data, result) if result is not None else None

    def feed_columns(self, cols: Columns) -> Checks | None:
        """Judge a chunk of steps at once; None when the rule declines it (then feed it step by step).

        The account afterwards is what feeding the chunk's steps one by one would have left (datapoints, triggers,
        the first and last trigger, the series), so both paths give the same verdict.
        """
        if self.error is not None:
            return _NO_CHECKS
        fed = np.flatnonzero(cols.seen) if self.rule.needs_tensors else np.arange(len(cols))
        try:
            checks = self.rule.check_columns(self.state, cols)
        except Exception as exc:  # a failing rule ends as Error, the others go on
            _log.debug("rule %s failed", self.rule.name, exc_info=True)
            self.error = exc
            return _NO_CHECKS
        if checks is None:
            return None
        if fed.size:
            self.last_seen = time.time()
            self.inputs_seen += int(fed.size)
            self.workers.setdefault(cols.worker, None)
            for col in cols.roles.values():
                if col.name not in self.read and col.present[fed].any():
                    self.read[col.name] = None
            self.last_step = cols.step_data(int(fed[-1]))
        self._record_checks(cols, checks)
        return checks

    def _record_checks(self, cols: Columns, checks: Checks) -> None:
        n = len(checks)
        if not n:
            return
        first_count = self.datapoints
        self.datapoints += n
        for k in range(n - 1, -1, -1):  # the newest non-empty detail, as step by step keeps it
            detail = checks.detail(k)
            if detail:
                self.last_detail = detail
                break
        self._add_points(cols.steps[checks.index], checks.values, checks.has_value, first_count)
        hit = np.flatnonzero(checks.triggered)
        if not hit.size:
            return
        self.triggers += int(hit.size)
        at = checks.index[hit]
        if self.first is None:
            i = int(at[0])
            self.first = (int(cols.steps[i]), float(cols.walls[i]))
            self.first_mode = (_mode(cols.modes[i]), int(cols.mode_steps[i]))
            self.first_detail = checks.detail(int(hit[0]))
            self.first_count = len(checks.tensors(int(hit[0])))
        last = int(at[-1])
        self.last = (int(cols.steps[last]), float(cols.walls[last]))
        for k in hit.tolist():
            for name in checks.tensors(k):
                self.tensors.setdefault(name, None)
        room = MAX_SERIES_POINTS - len(self.trigger_x)
        if room > 0:
            self.trigger_x.extend(float(s) for s in cols.steps[at[:room]].tolist())

    def _add_points(self, steps: np.ndarray, values: np.ndarray, has_value: np.ndarray | None, before: int) -> None:
        """:meth:`_add_point` of each datapoint in turn (the k-th is datapoint number ``before + k + 1``)."""
        counts = before + 1 + np.arange(steps.size)
        pos = 0
        while pos < steps.size:
            wanted = counts[pos:] % self.stride == 0
            if has_value is not None:
                wanted &= has_value[pos:]
            take = (np.flatnonzero(wanted) + pos)[: MAX_SERIES_POINTS + 1 - len(self.x)]
            if not take.size:
                return
            self.x.extend(float(s) for s in steps[take].tolist())
            self.y.extend(float(v) for v in values[take].tolist())
            if len(self.x) <= MAX_SERIES_POINTS:
                return
            self.x, self.y = self.x[::2], self.y[::2]
            self.stride *= 2
            pos = int(take[-1]) + 1

    def end(self) -> Check | None:
        """Tell the rule the data has ended (it may judge a pending window)."""
        if self.error is not None:
            return None
        result = self._guard(lambda: self.rule.finish(self.state, self.last_step))
        return self._record(self.last_step, result) if self.last_step is not None else None

    def idle(self, now: float) -> Check | None:
        """Let the rule judge the time passed without data (StalledTrainingRule)."""
        if self.error is not None:
            return None
        result = self._guard(lambda: self.rule.idle(self.state, now, self.last_step))
        if result is None or self.last_step is None:
            return None
        return self._record(self.last_step, result, wall_time=now)

    def fail(self, exc: BaseException) -> None:
        """Mark the rule as failed (its verdict becomes Error)."""
        self.error = exc

    def _guard(self, fn: Any) -> Check | None:
        try:
            result: Check | None = fn()
        except Exception as exc:  # a failing rule ends as Error, the others go on
            _log.debug("rule %s failed", self.rule.name, exc_info=True)
            self.error = exc
            return None
        return result

    def _record(self, data: StepData | None, result: Check | None, wall_time: float | None = None) -> Check | None:
        if result is None or data is None:
            return None
        self.datapoints += 1
        self.last_detail = result.detail or self.last_detail
        self._add_point(data.step, result)
        if not result.triggered:
            return None
        when = data.wall_time if wall_time is None else wall_time
        self.triggers += 1
        if self.first is None:
            self.first = (data.step, when)
            self.first_mode = (_mode(data.mode), data.mode_step)
            self.first_detail = result.detail
            self.first_count = len(result.tensors)
        self.last = (data.step, when)
        for name in result.tensors:
            self.tensors.setdefault(name, None)
        if len(self.trigger_x) < MAX_SERIES_POINTS:
            self.trigger_x.append(float(data.step))
        return result

    def _add_point(self, step: int, result: Check) -> None:
        if result.value is None or self.datapoints % self.stride:
            return
        self.x.append(float(step))
        self.y.append(float(result.value))
        if len(self.x) > MAX_SERIES_POINTS:
            self.x, self.y = self.x[::2], self.y[::2]
            self.stride *= 2

    # --- the verdict -----------------------------------------------------------------------------------
    def verdict(self, finished: bool) -> Verdict:
        """Build the verdict so far; ``finished`` says whether the data has ended (else InProgress)."""
        status, message = self._status(finished)
        first, last = self.first, self.last
        return Verdict(
            rule=self.rule.name,
            status=status,
            message=message,
            recommendation=self.rule.recommendation if status is Status.ISSUES_FOUND else "",
            kind=self.rule.kind,
            datapoints=self.datapoints,
            triggers=self.triggers,
            first_trigger_step=first[0] if first else None,
            last_trigger_step=last[0] if last else None,
            first_trigger_time=_finite(first[1]) if first else None,
            last_trigger_time=_finite(last[1]) if last else None,
            tensors=tuple(self.tensors) if self.triggers else tuple(sorted(self.read)),  # what was wrong, else read
            workers=tuple(self.workers),
            parameters=dict(self.rule.params),
            details=self._details(),
            series=(self._series(),) if self.x or self.trigger_x else (),
            start_step=int(self.x[0]) if self.x else None,
            end_step=self.last_step.step if self.last_step is not None else None,
        )

    def _details(self) -> dict[str, Any]:
        details: dict[str, Any] = {"inputs_seen": self.inputs_seen, "last_detail": self.last_detail}
        if self.first_mode is not None:
            details["step_numbering"] = "global"  # first/last_trigger_step and the steps in messages
            details["first_trigger_mode"], details["first_trigger_mode_step"] = self.first_mode
        if self.name_worker and self.workers:
            details["worker"] = next(iter(self.workers))
            if self.triggers:
                details["first_detail"], details["first_trigger_count"] = self.first_detail, self.first_count
        return details

    def _where(self) -> str:
        """`` in worker_3`` when the tally names its worker, else nothing."""
        return f" in {next(iter(self.workers))}" if self.name_worker and self.workers else ""

    def _status(self, finished: bool) -> tuple[Status, str]:
        name = self.rule.name
        if self.error is not None:
            return Status.ERROR, f"{name} failed: {type(self.error).__name__}: {self.error}"
        if self.triggers:
            first = self.first[0] if self.first else None
            mode = mode_text(*self.first_mode) if self.first_mode else ""
            return (
                Status.ISSUES_FOUND,
                issue_message(name, self.triggers, self.datapoints, self._where(), first, mode, self.first_detail),
            )
        if self.datapoints:
            where = f" of {next(iter(self.workers))}" if self._where() else ""
            text = f"no trigger in {self.datapoints} evaluated steps{where}; last: {self.last_detail}"
            return (Status.NO_ISSUES_FOUND if finished else Status.IN_PROGRESS), text
        if self.inputs_seen:
            text = f"{name} saw its inputs at {self.inputs_seen} step(s) but could not judge: "
            text += self.rule.insufficient(self.state)
        else:
            text = f"{name} found no inputs; record {self.rule.describe_inputs()}"
        return (Status.NO_DATA if finished else Status.IN_PROGRESS), text

    def _series(self) -> Series:
        return Series(
            label=self.rule.series_label,
            x=tuple(self.x),
            y=tuple(self.y),
            trigger_x=tuple(self.trigger_x),
            threshold=self.rule.chart_threshold(),
        )


_NO_CHECKS = Checks(np.zeros(0, dtype=np.int64), np.zeros(0), np.zeros(0, dtype=bool), lambda _k: "", lambda _k: ())


def issue_message(
    rule: str, triggers: int, datapoints: int, where: str, first: int | None, mode: str, detail: str
) -> str:
    """The message of a verdict that found issues (``where``: `` in worker_3`` or nothing).

    Example:
        >>> issue_message("ExplodingTensor", 2, 9, " in worker_3", 12, ", TRAIN step 12", "NaN in loss")
        'ExplodingTensor triggered at 2 of 9 evaluated steps (first in worker_3 at step 12, TRAIN step 12): NaN in loss'
    """
    counts = f"{rule} triggered at {triggers} of {datapoints} evaluated steps"
    return f"{counts} (first{where} at step {first}{mode}): {detail}"


def mode_text(mode: str, mode_step: int) -> str:
    """``", TRAIN step 12"``: the mode and mode step of a first trigger, for messages."""
    return f", {mode} step {mode_step}"


def _mode(mode: object) -> str:
    return str(getattr(mode, "name", mode))


def _finite(value: float) -> float | None:
    return value if isinstance(value, (int, float)) and math.isfinite(value) else None
