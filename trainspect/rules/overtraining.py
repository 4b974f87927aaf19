"""Overtraining: training goes on while the validation loss no longer improves (or the training loss rises)."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.rules._common import LITERAL, Z_PROGRESS, Window, fmt, window_of
from trainspect.rules.base import Param, Requirement
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.step_data import Check, StepData, as_float
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["Overtraining"]

MIN_TREND = 3
"""Evaluations a trend line needs: with fewer there are no residuals to estimate the noise from."""

RESOLUTION = 1e-7
"""A fall per evaluation below this share of the loss (float32 rounding) is no trend."""

CONVERGED = "the training loss did not improve meanwhile either: converged (or stalled), not overtrained"


@dataclass
class _Best:
    value: float = math.inf
    since: int = 0


@dataclass
class _State:
    modes: dict[ModeKeys, _Best] = field(default_factory=dict)  # literal
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=20))
    evals: list[tuple[int, float]] = field(default_factory=list)
    best_val: Window | None = None
    train_at_best: Window | None = None
    val_streak: int = 0
    since_best: list[float] = field(default_factory=list)  # evaluation means from the best one on
    evaluations: int = 0


@dataclass(frozen=True)
class _Trend:
    """The least-squares slope of evaluation means per evaluation, with its standard error from the residuals."""

    slope: float
    se: float
    count: int
    level: float

    @property
    def falling(self) -> bool:
        """Whether the slope is negative beyond 2 standard errors (and beyond float32 rounding)."""
        return -self.slope > max(Z_PROGRESS * self.se, RESOLUTION * self.level)

    def describe(self) -> str:
        """Why a falling trend holds the trigger back, for messages."""
        return (
            f"not overtrained: the last {self.count} evaluations still fall by {fmt(-self.slope)} per evaluation "
            f"(> {fmt(Z_PROGRESS)} standard errors, {fmt(Z_PROGRESS * self.se)}): the validation loss improves slowly"
        )


class Overtraining(TensorRule):
    """Trigger when training goes on although the validation loss stopped improving.

    trainspect's default judges evaluations, not single losses: each evaluation (a run of EVAL steps) is
    averaged and, as in Keras/Lightning EarlyStopping, improves when it lies below the best evaluation so far by
    more than ``delta`` (min_delta). After ``patience_validation`` evaluations without improvement the rule
    triggers if the training loss (the mean of the last 20 TRAIN losses) went down meanwhile (by ``delta`` and
    2 standard errors of those losses) and the evaluations since the best do not still fall: a least-squares
    line through them (the best one left out when three or more follow it) must not slope down by more than 2
    standard errors of its residuals. No spread is assumed: an evaluation of one batch has the noise its series
    shows, so a validation loss that falls, however slowly, never triggers, and one that rises or stays flat for
    ``patience_validation`` evaluations does. A training loss that levels off is converged, not overtrained, and
    one that rises is LossNotDecreasing's finding, so ``patience_train`` applies only to the literal rule;
    without EVAL losses the rule has no data, and with ``patience_validation`` evaluations or fewer the message
    says they are too few to tell.

    With ``literal=True`` the rule is smdebug's: the best single loss per mode, which must improve by more
    than ``delta`` within ``patience_train`` saved TRAIN steps and ``patience_validation`` saved EVAL steps.
    Heuristic: early stopping with patience and min-delta (Prechelt 1998; Keras/Lightning EarlyStopping).

    Example:
        >>> Overtraining(delta="0.1").params["delta"]
        0.1
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("patience_train", int, 5, "saved TRAIN steps without improvement tolerated (literal only)", min=1),
        Param("patience_validation", int, 10, "evaluations (literal: saved EVAL steps) without improvement", min=1),
        Param("delta", float, 0.01, "smallest improvement that counts", min=0),
        LITERAL,
    )
    patience_train: int
    patience_validation: int
    delta: float
    literal: bool
    recommendation: ClassVar[str] = (
        "The loss stopped improving: stop training (early stopping), lower the learning rate, or regularise."
    )
    series_label: ClassVar[str] = "evaluations without improvement"

    def selects(self) -> list[Select]:
        """The losses collection."""
        return [Select(collections=("losses",))]

    def requirements(self) -> list[Requirement]:
        """Losses in TRAIN and EVAL mode."""
        return [Requirement("losses", modes=("TRAIN", "EVAL"))]

    def init_state(self) -> _State:
        """The best loss per mode and the steps since."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Collect losses; judge an evaluation when training resumes."""
        if data.mode not in (ModeKeys.TRAIN, ModeKeys.EVAL):
            return None
        values = [v for v in (as_float(r) for r in data.role()) if v is not None and math.isfinite(v)]
        if not values:
            return None
        loss = float(np.mean(values))
        if self.literal:
            return self._literal(state, data, loss)
        if data.mode is ModeKeys.EVAL:
            state.evals.append((data.step, loss))
            return None
        result = self._close_evaluation(state)
        state.recent.append((data.step, loss))
        return result

    def check_columns(self, state: _State, cols: Columns) -> Checks | None:
        """Collect a chunk's finite losses run by run of one mode (the literal rule is fed step by step)."""
        col = cols.role()
        if self.literal:
            return None
        out = ChecksBuilder()
        if col is None:
            return out.build()
        modes = np.isin(cols.codes, (int(ModeKeys.TRAIN), int(ModeKeys.EVAL)))
        for mode, idx in cols.mode_runs(col.present & modes & np.isfinite(col.values)):
            pairs = list(zip(cols.steps[idx].tolist(), col.values[idx].tolist(), strict=True))
            if mode is ModeKeys.EVAL:
                state.evals.extend(pairs)
                continue
            out.single(int(idx[0]), self._close_evaluation(state))  # only the run's first step can close one
            state.recent.extend(pairs)
        return out.build()

    def finish(self, state: _State, last: StepData | None) -> Check | None:
        """Judge an evaluation still open when the data ends."""
        return None if self.literal else self._close_evaluation(state)

    def _close_evaluation(self, state: _State) -> Check | None:
        if not state.evals or not state.recent:
            state.evals = []
            return None
        evals, state.evals = state.evals, []
        val = window_of([v for _, v in evals], [s for s, _ in evals])
        train = window_of([v for _, v in state.recent], [s for s, _ in state.recent])
        state.evaluations += 1
        best = state.best_val
        if best is None or best.mean - val.mean > self.delta:  # EarlyStopping: better than the best by > min_delta
            state.best_val, state.train_at_best, state.val_streak, state.since_best = val, train, 0, [val.mean]
        else:
            state.val_streak += 1
            state.since_best.append(val.mean)
        ref = state.train_at_best or train
        training_improved = ref.mean - train.mean > max(self.delta, Z_PROGRESS * (ref.se + train.se))
        trend = _trend(state.since_best)
        stalled = state.val_streak >= self.patience_validation
        triggered = stalled and training_improved and not (trend is not None and trend.falling)
        best_val = state.best_val or val
        detail = (
            f"validation loss {fmt(val.mean)} (EVAL steps {val.steps()}), best {fmt(best_val.mean)} "
            f"(steps {best_val.steps()}); {state.val_streak} evaluation(s) without improvement > {fmt(self.delta)} "
            f"(patience {self.patience_validation}); training loss {fmt(train.mean)} vs {fmt(ref.mean)} at the best "
            "evaluation"
        )
        if stalled and not triggered:
            detail += "; " + (trend.describe() if trend is not None and trend.falling else CONVERGED)
        elif state.evaluations <= self.patience_validation:
            detail += (
                f"; {state.evaluations} evaluation(s) so far: too few to tell, patience {self.patience_validation} "
                f"needs {self.patience_validation + 1}"
            )
        return Check(float(state.val_streak), triggered, (), detail)

    def _literal(self, state: _State, data: StepData, loss: float) -> Check:
        best = state.modes.setdefault(data.mode, _Best())
        if loss < best.value - self.delta or not math.isfinite(best.value):
            best.value, best.since = loss, 0
        else:
            best.since += 1
        train = data.mode is ModeKeys.TRAIN
        patience = self.params["patience_train" if train else "patience_validation"]
        which = "training" if train else "validation"
        detail = (
            f"{which} loss {fmt(loss)} at step {data.step}, best {fmt(best.value)}, not improved by more than "
            f"{fmt(self.delta)} for {best.since} saved steps (patience {patience})"
        )
        hit = best.since >= patience
        return Check(float(best.since), hit, tuple(r.name for r in data.role()) if hit else (), detail)


def _trend(values: list[float]) -> _Trend | None:
    """The trend of the evaluations since the best one; None with fewer than ``MIN_TREND`` of them.

    The best evaluation itself is left out when enough follow it: a lucky low would tilt the line upwards.
    The noise is the residuals' spread around the line (the data's own, nothing assumed).
    """
    pts = values[1:] if len(values) > MIN_TREND else values
    if len(pts) < MIN_TREND:
        return None
    y = np.asarray(pts, dtype=np.float64)
    x = np.arange(y.size, dtype=np.float64) - (y.size - 1) / 2.0
    slope = float(x @ (y - y.mean()) / (x @ x))
    resid = y - y.mean() - slope * x
    se = math.sqrt(float(resid @ resid) / (y.size - 2) / float(x @ x))
    return _Trend(slope, se, int(y.size), abs(float(y.mean())))
