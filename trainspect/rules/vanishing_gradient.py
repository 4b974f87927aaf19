"""VanishingGradient: some gradient's mean absolute value falls below a threshold."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.rules._common import LITERAL, fmt, is_training
from trainspect.rules._dead_gradients import DEAD_STEPS_PARAM, DeadGradients, beside_healthy_weight, listed
from trainspect.rules.base import Param, Requirement
from trainspect.rules.columns import Checks, ChecksBuilder, Columns
from trainspect.rules.step_data import Check, StepData, as_float, tensor_reduction
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["VanishingGradient"]


@dataclass
class _State:
    first_loss: float | None = None
    loss: float | None = None
    excused: dict[str, str] = field(default_factory=dict)
    grads_seen: bool = False
    dead: DeadGradients = field(default_factory=DeadGradients)
    dead_now: dict[str, str] = field(default_factory=dict)


class VanishingGradient(TensorRule):
    """Trigger when the mean absolute value of a gradient tensor is below ``threshold``.

    Heuristic: gradients that shrink layer after layer stop the early layers from learning (Hochreiter 1991;
    Bengio, Simard and Frasconi, "Learning long-term dependencies with gradient descent is difficult", 1994;
    Glorot and Bengio 2010). smdebug's rule compares ``reduction_value(step, "mean", abs=True)`` of every
    tensor in the ``gradients`` collection with the threshold. Non-finite gradients are ignored here
    (they are ExplodingTensor's business), so a diverging run does not also report vanishing gradients.

    trainspect's default leaves out, and names in the details, three kinds of tiny gradients that are no
    vanishing-gradient problem: a gradient that has been exactly zero since its first record (no gradient flows
    by construction: an unused or masked parameter, units dead from the start, which DeadRelu reports); a bias
    gradient that is tiny while its layer's weight gradient is not (a bias followed by a normalisation, or an
    attention key bias: zero up to rounding); and every gradient at a training step whose loss is below
    ``converged_loss_ratio`` times the first loss (the model has converged, so its gradients are tiny).
    A gradient that was non-zero and then stays exactly zero for ``dead_steps`` recorded steps is dead (a
    learning rate so high that it killed the network) and is counted, named per parameter.
    ``literal=True`` judges every gradient, as smdebug does.

    Example:
        >>> VanishingGradient(threshold="1e-6").chart_threshold()
        1e-06
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("threshold", float, 1e-7, "smallest acceptable mean |gradient|", min=0),
        Param(
            "converged_loss_ratio",
            float,
            1e-3,
            "loss / first loss below which tiny gradients are expected",
            min=0,
            max=1,
        ),
        DEAD_STEPS_PARAM,
        LITERAL,
    )
    threshold: float
    converged_loss_ratio: float
    dead_steps: int
    literal: bool
    recommendation: ClassVar[str] = (
        "Gradients vanish: use ReLU-family activations instead of sigmoid/tanh, He/Xavier initialisation, "
        "batch normalisation or residual connections."
    )
    series_label: ClassVar[str] = "min abs_mean of gradients"

    def selects(self) -> list[Select]:
        """Read the ``gradients`` collection, as reductions only (``abs_mean``), and the losses."""
        grads = Select(collections=("gradients",), regex=("^gradient/",), reductions=("abs_mean",), raw=False)
        return [grads, Select("loss", collections=("losses",))]

    def requirements(self) -> list[Requirement]:
        """The gradients' ``abs_mean`` (losses are always recorded)."""
        return [Requirement("gradients", include_regex=("^gradient/",), reductions=("abs_mean",), raw=False)]

    def describe_inputs(self) -> str:
        """Gradients are what must be recorded."""
        return "collection 'gradients'"

    def insufficient(self, state: _State) -> str:
        """No gradients were recorded (only losses), or none was finite."""
        if state.grads_seen:
            return "every recorded gradient was NaN/Inf (ExplodingTensor's finding)"
        return "no gradients were recorded; record collection 'gradients'"

    def chart_threshold(self) -> float:
        """Return ``threshold``."""
        return float(self.threshold)

    def init_state(self) -> _State:
        """The first and latest training loss, each gradient's zero history, and the gradients not counted."""
        return _State(dead=DeadGradients(self.dead_steps))

    def check(self, state: _State, data: StepData) -> Check | None:
        """Judge the smallest finite mean |gradient| at this step."""
        self._note_loss(state, data)
        state.grads_seen = state.grads_seen or bool(data.role())
        limit = self.chart_threshold()
        values = {}
        for rec in data.role():
            value = tensor_reduction(rec, "mean", abs=True)
            if value is not None and math.isfinite(value):
                values[rec.name] = value
        if not values:
            return None
        state.dead.update(data.step, values)
        state.dead_now = {}
        low = [name for name, v in values.items() if v < limit]
        if not self.literal:
            low = self._real(state, values, low)
        return Check(min(values.values()), bool(low), tuple(low), self._detail(state, data, values, low))

    def check_columns(self, state: _State, cols: Columns) -> Checks | None:
        """A chunk without gradients: note the training loss (the gradients' steps are judged step by step)."""
        if cols.role() is not None:
            return None
        loss = cols.role("loss")
        if loss is not None:
            training = np.isin(cols.codes, (int(ModeKeys.TRAIN), int(ModeKeys.GLOBAL)))
            finite = loss.values[loss.present & training & np.isfinite(loss.values)]
            if finite.size:
                state.loss = float(finite[-1])
                if state.first_loss is None:
                    state.first_loss = float(finite[0])
        return ChecksBuilder().build()

    def _detail(self, state: _State, data: StepData, values: dict[str, float], low: list[str]) -> str:
        limit = self.chart_threshold()
        smallest = min(values, key=values.__getitem__)
        detail = f"abs_mean of {smallest} is {fmt(values[smallest])} (threshold {fmt(limit)})"
        if low:
            detail = (
                f"{len(low)} gradient(s) below threshold {fmt(limit)} at step {data.step}; "
                f"smallest abs_mean {fmt(min(values[n] for n in low))} in {min(low, key=values.__getitem__)}"
            )
        if state.dead_now:
            detail += f"; {len(state.dead_now)} dead (non-zero, then exactly zero): " + listed(state.dead_now)
        if state.excused:
            detail += "; not counted: " + listed(state.excused)
        return detail

    def _note_loss(self, state: _State, data: StepData) -> None:
        if not is_training(data.mode):
            return
        losses = [v for v in (as_float(r) for r in data.role("loss")) if v is not None and math.isfinite(v)]
        if losses:
            state.loss = float(np.mean(losses))
            if state.first_loss is None:
                state.first_loss = state.loss

    def _real(self, state: _State, values: dict[str, float], low: list[str]) -> list[str]:
        """The tiny gradients that are a vanishing-gradient problem (the others go to ``state.excused``)."""
        if not low:
            return low
        first, loss = state.first_loss, state.loss
        if first is not None and loss is not None and abs(loss) < self.converged_loss_ratio * abs(first):
            for name in low:
                state.excused[name] = f"loss {fmt(loss)} has converged"
            return []
        real = []
        for name in low:
            sibling = beside_healthy_weight(name, values, self.chart_threshold())
            if sibling is not None:
                state.excused[name] = f"bias gradient tiny while {sibling} is not: zero by construction"
            elif values[name] == 0 and state.dead.dead(name) is None:
                state.excused[name] = state.dead.describe(name)
            else:
                if values[name] == 0:
                    state.dead_now[name] = state.dead.describe(name)
                state.excused.pop(name, None)
                real.append(name)
        return real
