"""VanishingGradient: some gradient's mean absolute value falls below a threshold."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from trainspect.rules._common import fmt
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData, tensor_reduction
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["VanishingGradient"]


class VanishingGradient(TensorRule):
    """Trigger when the mean absolute value of a gradient tensor is below ``threshold``.

    Heuristic: gradients that shrink layer after layer stop the early layers from learning (Hochreiter 1991;
    Bengio, Simard and Frasconi, "Learning long-term dependencies with gradient descent is difficult", 1994;
    Glorot and Bengio 2010). smdebug's rule compares ``reduction_value(step, "mean", abs=True)`` of every
    tensor in the ``gradients`` collection with the threshold. Non-finite gradients are ignored here
    (they are ExplodingTensor's business), so a diverging run does not also report vanishing gradients.

    Example:
        >>> VanishingGradient(threshold="1e-6").threshold()
        1e-06
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("threshold", float, 1e-7, "smallest acceptable mean |gradient|", min=0),
    )
    recommendation: ClassVar[str] = (
        "Gradients vanish: use ReLU-family activations instead of sigmoid/tanh, He/Xavier initialisation, "
        "batch normalisation or residual connections, or a larger learning rate."
    )
    series_label: ClassVar[str] = "min abs_mean of gradients"

    def selects(self) -> list[Select]:
        """Read the ``gradients`` collection, as reductions only (``abs_mean``)."""
        return [Select(collections=("gradients",), regex=("^gradient/",), reductions=("abs_mean",), raw=False)]

    def threshold(self) -> float:
        """Return ``threshold``."""
        return float(self.params["threshold"])

    def check(self, state: Any, data: StepData) -> Check | None:
        """Judge the smallest finite mean |gradient| at this step."""
        limit = self.threshold()
        values = {}
        for rec in data.role():
            value = tensor_reduction(rec, "mean", abs=True)
            if value is not None and math.isfinite(value):
                values[rec.name] = value
        if not values:
            return None
        low = [name for name, v in values.items() if v < limit]
        smallest = min(values, key=values.__getitem__)
        detail = f"abs_mean of {smallest} is {fmt(values[smallest])} (threshold {fmt(limit)})"
        if low:
            detail = (
                f"{len(low)} gradient(s) below threshold {fmt(limit)}; "
                f"smallest abs_mean {fmt(values[smallest])} in {smallest}"
            )
        return Check(values[smallest], bool(low), tuple(low), detail)
