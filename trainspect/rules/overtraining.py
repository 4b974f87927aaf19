"""Overtraining: the training or validation loss stopped improving."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.rules._common import fmt
from trainspect.rules.base import Param, Requirement
from trainspect.rules.step_data import Check, StepData, as_float
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["Overtraining"]


@dataclass
class _Best:
    value: float = math.inf
    since: int = 0


@dataclass
class _State:
    modes: dict[ModeKeys, _Best] = field(default_factory=dict)


class Overtraining(TensorRule):
    """Trigger when the training or validation loss stops improving.

    The training loss must improve by more than ``delta`` within ``patience_train`` saved TRAIN steps, and the
    validation loss within ``patience_validation`` saved EVAL steps.

    Heuristic: early stopping with patience and min-delta (Prechelt 1998; Keras/Lightning EarlyStopping).

    Example:
        >>> Overtraining(delta="0.1").params["delta"]
        0.1
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("patience_train", int, 5, "saved TRAIN steps without improvement tolerated", min=1),
        Param("patience_validation", int, 10, "saved EVAL steps without improvement tolerated", min=1),
        Param("delta", float, 0.01, "smallest improvement that counts", min=0),
    )
    recommendation: ClassVar[str] = (
        "The loss stopped improving: stop training (early stopping), lower the learning rate, or regularise."
    )
    series_label: ClassVar[str] = "saved steps since the best loss"

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
        """Update the best loss of this step's mode."""
        if data.mode not in (ModeKeys.TRAIN, ModeKeys.EVAL):
            return None
        values = [v for v in (as_float(r) for r in data.role()) if v is not None and math.isfinite(v)]
        if not values:
            return None
        loss = float(np.mean(values))
        best = state.modes.setdefault(data.mode, _Best())
        if loss < best.value - self.params["delta"] or not math.isfinite(best.value):
            best.value, best.since = loss, 0
        else:
            best.since += 1
        train = data.mode is ModeKeys.TRAIN
        patience = self.params["patience_train" if train else "patience_validation"]
        which = "training" if train else "validation"
        detail = (
            f"{which} loss {fmt(loss)}, best {fmt(best.value)}, not improved by more than {fmt(self.params['delta'])} "
            f"for {best.since} saved steps (patience {patience})"
        )
        return Check(
            float(best.since),
            best.since >= patience,
            tuple(r.name for r in data.role()) if best.since >= patience else (),
            detail,
        )
