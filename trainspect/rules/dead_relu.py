"""DeadRelu: most units of a ReLU layer output zero for (almost) every sample."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import fmt, per_unit
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["DeadRelu"]


class DeadRelu(TensorRule):
    """Trigger when more than ``threshold_layer`` % of a ReLU layer's units are dead.

    A unit (an element position, with axis 0 the batch) is dead when it is positive in fewer than
    ``threshold_inactivity`` % of the batch's samples. Heuristic: "dying ReLU" (Maas, Hannun and Ng,
    "Rectifier nonlinearities improve neural network acoustic models", 2013; Lu et al., "Dying ReLU and
    initialization", 2019). Reads the outputs of ``ReLU`` modules (collection ``relu_output``, which a hook
    given this rule records, and which holds every recorded output of a ReLU or LeakyReLU module) or tensors
    matching ``tensor_regex``. Tensors holding NaN or Inf are skipped (ExplodingTensor reports them).

    Example:
        >>> DeadRelu(threshold_layer="60").params["threshold_layer"]
        60.0
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("tensor_regex", list, [".*relu_output"], "regexes of ReLU outputs"),
        Param(
            "threshold_inactivity", float, 1.0, "a unit active in fewer than this % of samples is dead", min=0, max=100
        ),
        Param("threshold_layer", float, 50.0, "largest acceptable % of dead units per layer", min=0, max=100),
    )
    tensor_regex: list[str]
    threshold_inactivity: float
    threshold_layer: float
    recommendation: ClassVar[str] = (
        "Many ReLU units never activate: lower the learning rate, use He initialisation, LeakyReLU/ELU, "
        "or batch normalisation before the activation."
    )
    series_label: ClassVar[str] = "max % dead units per layer"

    def selects(self) -> list[Select]:
        """Read ReLU outputs."""
        return [
            Select(
                collections=("relu_output",),
                regex=tuple(self.tensor_regex or ()),
                module_types=("ReLU", "LeakyReLU"),
                module_outputs=True,
            )
        ]

    def chart_threshold(self) -> float:
        """Return ``threshold_layer``."""
        return float(self.threshold_layer)

    def check(self, state: Any, data: StepData) -> Check | None:
        """Compute the share of dead units of each layer."""
        dead: dict[str, float] = {}
        inactivity = self.threshold_inactivity
        for rec in data.role():
            if rec.value is None or np.asarray(rec.value).size == 0:
                continue
            x = per_unit(rec.value)
            if not np.isfinite(x).all():
                continue  # NaN/Inf activations are ExplodingTensor's business, not dead units
            active = 100.0 * ((x > 0).sum(axis=0) / x.shape[0])  # == 100 * mean over the batch, without its overhead
            dead[rec.name] = 100.0 * (int(np.count_nonzero(active < inactivity)) / active.size)
        if not dead:
            return None
        limit = self.threshold_layer
        worst = max(dead, key=dead.__getitem__)
        bad = tuple(n for n, pct in dead.items() if pct > limit)
        return Check(
            dead[worst], bool(bad), bad, f"{fmt(dead[worst])}% of units dead in {worst} (threshold {fmt(limit)}%)"
        )
