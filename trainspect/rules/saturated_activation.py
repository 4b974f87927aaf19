"""SaturatedActivation: most units of a tanh or sigmoid layer sit where the gradient vanishes."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from trainspect.exceptions import ConfigError
from trainspect.rules._common import COLLECTION_NAMES, fmt, per_unit
from trainspect.rules.base import Param, Requirement
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["SaturatedActivation"]


class SaturatedActivation(TensorRule):
    """Trigger when more than ``threshold_layer`` % of a tanh/sigmoid layer's units are saturated.

    The rule reads the activations' *inputs*. An input outside (min, max) for its activation sits where
    the activation's gradient is below 1e-7 (the default limits). A unit (element position, axis 0 the
    batch) is saturated when it is inside the limits in fewer than ``threshold_inactivity`` % of samples.
    Heuristic: saturation of sigmoid/tanh units stalls learning (LeCun et al., "Efficient BackProp", 1998;
    Glorot and Bengio 2010). Tensors of collection ``sigmoid_input`` or named like ``*sigmoid*`` use the
    sigmoid limits, the others the tanh limits.

    Example:
        >>> SaturatedActivation(threshold_layer="40").params["threshold_layer"]
        40.0
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        Param("tensor_regex", list, [".*tanh_input", ".*sigmoid_input"], "regexes of activation inputs"),
        Param("threshold_tanh_min", float, -9.4999, "tanh input below which the gradient vanishes"),
        Param("threshold_tanh_max", float, 9.4999, "tanh input above which the gradient vanishes"),
        Param("threshold_sigmoid_min", float, -23.0, "sigmoid input below which the gradient vanishes"),
        Param("threshold_sigmoid_max", float, 16.99999, "sigmoid input above which the gradient vanishes"),
        Param(
            "threshold_inactivity",
            float,
            1.0,
            "a unit active in fewer than this % of samples is saturated",
            min=0,
            max=100,
        ),
        Param("threshold_layer", float, 50.0, "largest acceptable % of saturated units per layer", min=0, max=100),
    )
    collection_names: list[str] | None
    tensor_regex: list[str]
    threshold_tanh_min: float
    threshold_tanh_max: float
    threshold_sigmoid_min: float
    threshold_sigmoid_max: float
    threshold_inactivity: float
    threshold_layer: float
    recommendation: ClassVar[str] = (
        "Activations saturate: normalise inputs, use Xavier initialisation, batch normalisation, a lower "
        "learning rate, or ReLU-family activations."
    )
    series_label: ClassVar[str] = "max % saturated units per layer"

    def validate(self) -> None:
        """Each activation's lower limit must lie below its upper limit."""
        for kind in ("tanh", "sigmoid"):
            lo, hi = self.params[f"threshold_{kind}_min"], self.params[f"threshold_{kind}_max"]
            if lo is None or hi is None or lo >= hi:
                raise ConfigError(
                    f"{self.name}: threshold_{kind}_min={lo!r} and threshold_{kind}_max={hi!r}; allowed: min < max"
                )

    def selects(self) -> list[Select]:
        """Read the inputs of Tanh and Sigmoid modules."""
        regex = tuple(self.tensor_regex or ())
        colls = tuple(self.collection_names or ())
        return [
            Select("sigmoid", collections=("sigmoid_input",), module_types=("Sigmoid",), module_inputs=True),
            Select("tanh", collections=("tanh_input",), module_types=("Tanh",), module_inputs=True),
            Select("any", collections=colls, regex=regex),
        ]

    def requirements(self) -> list[Requirement]:
        """The inputs of Tanh and Sigmoid modules, plus any collections the user named."""
        reqs = [r for r in super().requirements() if r.collection in ("sigmoid_input", "tanh_input")]
        return reqs + [Requirement(c) for c in self.collection_names or ()]

    def chart_threshold(self) -> float:
        """Return ``threshold_layer``."""
        return float(self.threshold_layer)

    def check(self, state: Any, data: StepData) -> Check | None:
        """Compute the share of saturated units of each layer."""
        pct: dict[str, float] = {}
        for role in ("sigmoid", "tanh", "any"):
            for rec in data.role(role):
                if rec.value is None or np.asarray(rec.value).size == 0:
                    continue
                kind = "sigmoid" if role == "sigmoid" or (role == "any" and "sigmoid" in rec.name.lower()) else "tanh"
                lo, hi = self.params[f"threshold_{kind}_min"], self.params[f"threshold_{kind}_max"]
                x = per_unit(rec.value)
                if not np.isfinite(x).all():
                    continue  # NaN/Inf inputs are ExplodingTensor's business
                active = 100.0 * np.mean((x > lo) & (x < hi), axis=0)
                pct[rec.name] = 100.0 * float(np.mean(active < self.threshold_inactivity))
        if not pct:
            return None
        limit = self.threshold_layer
        worst = max(pct, key=pct.__getitem__)
        bad = tuple(n for n, p in pct.items() if p > limit)
        return Check(
            pct[worst], bool(bad), bad, f"{fmt(pct[worst])}% of units saturated in {worst} (threshold {fmt(limit)}%)"
        )
