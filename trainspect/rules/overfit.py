"""Overfit: the validation loss exceeds the training loss by a growing margin."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.rules._common import fmt
from trainspect.rules.base import Param, Requirement
from trainspect.rules.step_data import Check, StepData, as_float
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["Overfit"]


@dataclass
class _State:
    train: list[float] = field(default_factory=list)
    last_train: list[float] = field(default_factory=list)
    evals: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    streak: int = 0
    evaluations: int = 0


class Overfit(TensorRule):
    """Trigger when the relative gap between validation and training loss stays above a threshold.

    The gap ``(mean(val loss) − mean(train loss)) / mean(train loss)`` must exceed ``ratio_threshold`` for
    ``patience`` consecutive evaluations.

    An evaluation is a run of consecutive EVAL steps; it is judged when training resumes (or the data
    ends), against the mean TRAIN loss since the previous evaluation. Steps before ``start_step`` are
    ignored. Heuristic: the generalisation gap (Goodfellow et al., *Deep Learning*, 2016, §5.2; Prechelt
    1998's GL criterion).

    Example:
        >>> Overfit(patience="2").params["patience"]
        2
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("tensor_regex", list, None, "regexes of the loss (None: the losses collection)"),
        Param("start_step", int, 0, "first global step considered", min=0),
        Param("patience", int, 1, "consecutive evaluations above the threshold needed", min=1),
        Param("ratio_threshold", float, 0.1, "largest acceptable relative gap", min=0),
    )
    recommendation: ClassVar[str] = (
        "The model overfits: add regularisation (weight decay, dropout, augmentation), get more data, "
        "reduce capacity, or stop earlier."
    )
    series_label: ClassVar[str] = "relative generalisation gap"

    def selects(self) -> list[Select]:
        """Losses, or tensors matching ``tensor_regex``."""
        regex = tuple(self.params["tensor_regex"] or ())
        return [Select(regex=regex) if regex else Select(collections=("losses",))]

    def requirements(self) -> list[Requirement]:
        """Losses in TRAIN and EVAL mode."""
        return [Requirement("losses", include_regex=tuple(self.params["tensor_regex"] or ()), modes=("TRAIN", "EVAL"))]

    def threshold(self) -> float:
        """Return ``ratio_threshold``."""
        return float(self.params["ratio_threshold"])

    def init_state(self) -> _State:
        """Losses of the current training and evaluation phases."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Collect losses; judge an evaluation when training resumes."""
        if data.step < self.params["start_step"]:
            return None
        values = [v for v in (as_float(r) for r in data.role()) if v is not None]
        if not values:
            return None
        if data.mode is ModeKeys.EVAL:
            state.evals.append(float(np.mean(values)))
            state.eval_steps.append(data.step)
            return None
        if data.mode is ModeKeys.TRAIN:
            result = self._close(state)
            state.train.append(float(np.mean(values)))
            return result
        return None

    def finish(self, state: _State, last: StepData | None) -> Check | None:
        """Judge an evaluation still open at the end of the data."""
        return self._close(state)

    def _close(self, state: _State) -> Check | None:
        if not state.evals:
            return None
        train = state.train or state.last_train
        evals, steps = state.evals, state.eval_steps
        state.evals, state.eval_steps = [], []
        if state.train:
            state.last_train, state.train = state.train, []
        if not train:
            return None
        mean_train, mean_eval = float(np.mean(train)), float(np.mean(evals))
        gap = (mean_eval - mean_train) / abs(mean_train) if mean_train else float("inf")
        state.evaluations += 1
        state.streak = state.streak + 1 if gap > self.threshold() else 0
        triggered = state.streak >= self.params["patience"]
        detail = (
            f"validation loss {fmt(mean_eval)} (steps {steps[0]}-{steps[-1]}) vs training loss {fmt(mean_train)}: "
            f"gap {fmt(gap)} (threshold {fmt(self.threshold())}, {state.streak}/{self.params['patience']} in a row)"
        )
        return Check(gap, triggered, (), detail)

    def insufficient(self, state: _State) -> str:
        """Needs losses of both modes."""
        return "needs losses saved in both TRAIN and EVAL mode (an evaluation after some training)"
