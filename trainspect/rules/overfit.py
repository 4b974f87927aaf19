"""Overfit: the validation loss rises while it exceeds the training loss by more than a threshold."""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.rules._common import LITERAL, Z_RISE, Window, fmt, window_of
from trainspect.rules.base import Param, Requirement
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.step_data import Check, StepData, as_float
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["Overfit"]

TRAIN_WINDOW = 20
"""Training losses just before an evaluation that stand for "the training loss at the same point"."""

MIN_RISE = 0.1
"""Smallest relative rise of the validation loss above its best that counts (besides the noise test)."""

BROKEN_RATIO = 1000.0
"""A validation loss this many times the training loss (now and at the start of training) is three orders of
magnitude beyond any generalisation gap: the evaluation itself is broken (SageMaker's resnet50 example at lr 1.0:
about 15,700 against 5, BatchNorm running statistics wrecked). A summed validation loss would need batches of more
samples than this ratio, each as badly predicted as the untrained model's."""

MIN_NOISE = 4
"""Earlier evaluations of one batch each that the noise estimate needs (two second differences)."""

SCALE_HINT = 50.0
"""A first evaluation's loss this many times the training loss is more likely another unit than a model that bad
(pytorch/examples' MNIST sums its test loss over 1,000-sample batches and averages its training loss): the verdict's
message says so."""


@dataclass
class _State:
    train: list[float] = field(default_factory=list)
    last_train: list[float] = field(default_factory=list)
    recent: deque[tuple[int, float]] = field(default_factory=lambda: deque(maxlen=TRAIN_WINDOW))
    evals: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    best: Window | None = None
    best_values: list[float] = field(default_factory=list)
    first: Window | None = None
    first_train: list[tuple[int, float]] = field(default_factory=list)  # the first TRAIN_WINDOW training losses
    means: list[float] = field(default_factory=list)  # every evaluation's mean loss
    train_low: Window | None = None  # the lowest training loss at an evaluation
    scale: float | None = None  # the first evaluation's loss over the training loss, when above SCALE_HINT
    streak: int = 0
    evaluations: int = 0


class Overfit(TensorRule):
    """Trigger when the validation loss rises above its best while exceeding the training loss by a margin.

    An evaluation is a run of consecutive EVAL steps; it is judged when training resumes (or the data
    ends). trainspect's default compares its mean loss with the mean of the last 20 training losses before
    it (the training loss at the same point of training), and counts it when the relative gap
    ``(val − train) / train`` exceeds ``ratio_threshold`` *and* the validation loss lies above its best
    evaluation by more than 3 standard errors and 10 % of the best (or first, if larger: a loss converged near
    zero does not rise) evaluation's loss: the gap grows because validation gets worse, not because training is
    still going well. The noise comes from the data, never assumed: batch by batch when the evaluations cover
    the same number of batches, else from their spreads; an evaluation of one batch has the residual noise of
    the evaluation series around its trend (second differences), so with fewer than 4 such evaluations the
    message says the rise cannot be told from noise. An evaluation does not count while the training loss
    itself rises (above its lowest at an evaluation by 3 standard errors and 10 % of its scale) or is not
    finite: the run diverges, LossNotDecreasing's finding, not overfitting. ``patience`` consecutive counted
    evaluations trigger. Apart from that, a validation loss over 1,000x the training loss (now and at the
    start of training) triggers at once, even at the first evaluation: no generalisation gap is that large,
    the evaluation itself is broken (BatchNorm statistics wrecked by a too-high learning rate, inputs
    preprocessed differently). With ``literal=True`` the rule is smdebug's: the static gap against the mean
    training loss since the previous evaluation. Steps before ``start_step`` are ignored. Heuristic: the
    generalisation gap (Goodfellow et al., *Deep Learning*, 2016, §5.2; Prechelt 1998's GL criterion).

    Example:
        >>> Overfit(patience="2").params["patience"]
        2
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("tensor_regex", list, None, "regexes of the loss (None: the losses collection)"),
        Param("start_step", int, 0, "first global step considered", min=0),
        Param("patience", int, 1, "consecutive evaluations above the threshold needed", min=1),
        Param("ratio_threshold", float, 0.1, "largest acceptable relative gap", min=0),
        LITERAL,
    )
    tensor_regex: list[str] | None
    start_step: int
    patience: int
    ratio_threshold: float
    literal: bool
    recommendation: ClassVar[str] = (
        "The model overfits: add regularisation (weight decay, dropout, augmentation), get more data, "
        "reduce capacity, or stop earlier. A validation loss orders of magnitude above the training loss is a "
        "broken evaluation instead: check the model in eval mode (BatchNorm statistics), the held-out "
        "preprocessing and the loss's reduction."
    )
    series_label: ClassVar[str] = "relative generalisation gap"

    def selects(self) -> list[Select]:
        """Losses, or tensors matching ``tensor_regex``."""
        regex = tuple(self.tensor_regex or ())
        return [Select(regex=regex) if regex else Select(collections=("losses",))]

    def requirements(self) -> list[Requirement]:
        """Losses in TRAIN and EVAL mode."""
        return [Requirement("losses", include_regex=tuple(self.tensor_regex or ()), modes=("TRAIN", "EVAL"))]

    def chart_threshold(self) -> float:
        """Return ``ratio_threshold``."""
        return float(self.ratio_threshold)

    def init_state(self) -> _State:
        """Losses of the current training and evaluation phases."""
        return _State()

    def check(self, state: _State, data: StepData) -> Check | None:
        """Collect losses; judge an evaluation when training resumes."""
        if data.step < self.start_step:
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
            loss = float(np.mean(values))
            state.train.append(loss)
            state.recent.append((data.step, loss))
            if len(state.first_train) < TRAIN_WINDOW:
                state.first_train.append((data.step, loss))
            return result
        return None

    def check_columns(self, state: _State, cols: Columns) -> Checks | None:
        """Collect a chunk's losses run by run of one mode; an evaluation is judged where training resumes."""
        out = ChecksBuilder()
        col = cols.role()
        if col is None:
            return out.build()
        for mode, idx in cols.mode_runs(col.present & (cols.steps >= self.start_step)):
            steps, values = cols.steps[idx].tolist(), col.values[idx].tolist()
            if mode is ModeKeys.EVAL:
                state.evals.extend(values)
                state.eval_steps.extend(steps)
            elif mode is ModeKeys.TRAIN:  # only the run's first step can close an evaluation
                out.single(int(idx[0]), self._close(state))
                state.train.extend(values)
                state.recent.extend(zip(steps, values, strict=True))
                room = TRAIN_WINDOW - len(state.first_train)
                state.first_train.extend(list(zip(steps[: max(0, room)], values, strict=False)))
        return out.build()

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
        state.evaluations += 1
        if self.literal:
            return self._literal(state, float(np.mean(train)), float(np.mean(evals)), steps)
        state.means.append(float(np.mean(evals)))
        return self._windowed(state, window_of(evals, steps, _spread(evals, state.means)), evals)

    def _windowed(self, state: _State, val: Window, values: list[float]) -> Check:
        recent = list(state.recent)
        train = window_of([v for _, v in recent], [s for s, _ in recent])
        gap = (val.mean - train.mean) / abs(train.mean) if train.mean else float("inf")
        best, first = state.best, state.first or val
        state.first = first
        rising = best is not None and math.isfinite(val.sigma) and _rising(val, values, best, state.best_values, first)
        diverging = self._diverging(state, train)
        state.streak = state.streak + 1 if gap > self.chart_threshold() and rising and not diverging else 0
        broken = _broken(val, train, [v for _, v in state.first_train])
        detail = (
            f"validation loss {fmt(val.mean)} (EVAL steps {val.steps()}) vs training loss {fmt(train.mean)} "
            f"(TRAIN steps {train.steps()}): gap {fmt(gap)} (threshold {fmt(self.chart_threshold())}); "
        )
        if best is None:
            detail += "first evaluation"
            if train.mean > 0 and SCALE_HINT * train.mean < val.mean and not broken:
                state.scale = val.mean / train.mean
        else:
            detail += f"best validation loss {fmt(best.mean)} (steps {best.steps()}), " + _how(rising, val)
        detail += f" ({state.streak}/{self.patience} in a row)"
        if diverging:
            detail += f"; {diverging}"
        if broken:
            detail += f"; {broken}"
        elif state.scale is not None:
            detail += (
                f"; the first validation loss was {fmt(state.scale)}x the training loss: if one is summed over its "
                "batch (reduction='sum') and the other averaged, the gap compares different units "
                "(the rise test does not)"
            )
        if best is None or val.mean < best.mean:
            state.best, state.best_values = val, list(values)
        return Check(gap, state.streak >= self.patience or bool(broken), (), detail)

    def _diverging(self, state: _State, train: Window) -> str:
        """Why the training loss itself rises (then the gap is no overfitting); empty when it does not.

        The training loss now (the mean of the last 20) is compared with its lowest: at an earlier evaluation or at
        the start of training (the first 20). Above it by 10 % of the larger of both, it rises: then the gap says
        nothing about generalisation.
        """
        if not math.isfinite(train.mean):
            return "the training loss is not finite: the run diverges (LossNotDecreasing's, ExplodingTensor's finding)"
        start = window_of([v for _, v in state.first_train], [s for s, _ in state.first_train])
        low = state.train_low if state.train_low is not None and state.train_low.mean < start.mean else start
        if state.train_low is None or train.mean < state.train_low.mean:
            state.train_low = train
        floor = MIN_RISE * max(abs(low.mean), abs(start.mean))
        if train.mean - low.mean <= floor:  # no noise margin: a miss is safer than a misdiagnosis
            return ""
        return (
            f"the training loss rises too ({fmt(train.mean)}, lowest {fmt(low.mean)} at TRAIN steps {low.steps()}): "
            "the run diverges, it does not overfit (LossNotDecreasing's finding), so this is not counted"
        )

    def _literal(self, state: _State, mean_train: float, mean_eval: float, steps: list[int]) -> Check:
        gap = (mean_eval - mean_train) / abs(mean_train) if mean_train else float("inf")
        state.streak = state.streak + 1 if gap > self.chart_threshold() else 0
        detail = (
            f"validation loss {fmt(mean_eval)} (EVAL steps {steps[0]}-{steps[-1]}) vs training loss {fmt(mean_train)}: "
            f"gap {fmt(gap)} (threshold {fmt(self.chart_threshold())}, {state.streak}/{self.patience} in a row)"
        )
        return Check(gap, state.streak >= self.patience, (), detail)

    def insufficient(self, state: _State) -> str:
        """Needs losses of both modes."""
        return "needs losses saved in both TRAIN and EVAL mode (an evaluation after some training)"


def _rising(val: Window, values: list[float], best: Window, best_values: list[float], first: Window) -> bool:
    """Whether the validation loss lies above its best evaluation beyond noise and 10 % of its scale.

    Evaluations over the same held-out batches are compared batch by batch (a paired test: the spread between
    different batches is no noise here); otherwise by their means and standard errors.
    """
    floor = MIN_RISE * max(abs(best.mean), abs(first.mean))
    if len(values) == len(best_values) and len(values) > 1:
        diffs = np.asarray(values) - np.asarray(best_values)
        se = float(np.std(diffs, ddof=1)) / np.sqrt(diffs.size)
        return float(diffs.mean()) > max(Z_RISE * se, floor)
    best_se = best.se if math.isfinite(best.se) else val.sigma  # one batch then: the series' noise now
    return val.mean - best.mean > max(Z_RISE * (val.se + best_se), floor)


def _how(rising: bool, val: Window) -> str:
    """The rise test's outcome, for messages."""
    if rising:
        return "rising"
    if not math.isfinite(val.sigma):
        return f"too few evaluations of one batch to tell a rise from noise (the noise needs {MIN_NOISE} earlier ones)"
    return "not rising beyond its noise"


def _broken(val: Window, train: Window, first_train: list[float]) -> str:
    """Why the validation loss is orders of magnitude above the training loss; empty when it is not."""
    start = float(np.mean(first_train)) if first_train else train.mean
    ref = max(train.mean, start)
    if not (ref > 0 and math.isfinite(val.mean)) or val.mean <= BROKEN_RATIO * ref:
        return ""
    return (
        f"the validation loss is {fmt(val.mean / ref)}x the training loss ({fmt(train.mean)} now, {fmt(start)} "
        f"at the start of training), more than {fmt(BROKEN_RATIO)}x: not overfitting, the evaluation itself is "
        "broken (BatchNorm running statistics wrecked by a too-high learning rate, held-out inputs preprocessed "
        "differently, a model evaluated in the wrong mode), or the validation loss is summed over more than "
        f"{fmt(val.mean / ref)} samples a batch"
    )


def _spread(values: list[float], means: list[float]) -> float:
    """The noise of an evaluation's mean loss, estimated from the data, never assumed.

    The spread of its batch losses; for an evaluation of one batch, the residual spread of the earlier evaluation
    means around their local trend (NaN while there are fewer than ``MIN_NOISE``: too few to tell).
    """
    if len(values) > 1:
        return float(np.std(values, ddof=1))
    return _residual_sigma(means[:-1])  # the noise so far: an evaluation that runs away cannot hide


def _residual_sigma(values: list[float]) -> float:
    """The noise of a series around its local trend: the robust spread of its second differences over sqrt(6).

    Second differences remove a linear trend (a rising or falling loss does not count as noise). NaN with fewer
    than ``MIN_NOISE`` finite values.

    Example:
        >>> round(_residual_sigma([1.0, 1.1, 1.2, 1.3, 1.4]), 6)
        0.0
        >>> import math; math.isnan(_residual_sigma([1.0, 2.0]))
        True
    """
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size < MIN_NOISE:
        return math.nan
    return float(1.4826 * np.median(np.abs(np.diff(arr, 2))) / math.sqrt(6.0))
