"""TensorVariance: a tensor's variance leaves [min_threshold, max_threshold]."""

from __future__ import annotations

import math
from typing import Any, ClassVar

from trainspect.exceptions import ConfigError
from trainspect.rules._common import COLLECTION_NAMES, TENSOR_REGEX, fmt, require_selection, user_select
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData, tensor_reduction
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["TensorVariance"]


class TensorVariance(TensorRule):
    """Trigger when an inspected tensor's variance is above ``max_threshold`` or below ``min_threshold``.

    Heuristic: very large variance signals exploding values, very small variance a collapsed (constant)
    tensor (smdebug's TensorVariance; Glorot and Bengio 2010 on variance propagation). Reads the
    ``variance`` reduction. ``collection_names`` or ``tensor_regex`` and at least one threshold are required.

    Example:
        >>> TensorVariance(collection_names="weights", max_threshold="10").params["max_threshold"]
        10.0
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        TENSOR_REGEX,
        Param("max_threshold", float, None, "largest acceptable variance", min=0),
        Param("min_threshold", float, None, "smallest acceptable variance", min=0),
    )
    collection_names: list[str] | None
    tensor_regex: list[str] | None
    max_threshold: float | None
    min_threshold: float | None
    recommendation: ClassVar[str] = (
        "A tensor's variance is out of range: check the initialisation scale, the learning rate and "
        "normalisation layers."
    )
    series_label: ClassVar[str] = "max variance"

    def validate(self) -> None:
        """Require a selection and a threshold."""
        require_selection(self.name, self.params)
        if self.max_threshold is None and self.min_threshold is None:
            raise ConfigError(f"{self.name}: give max_threshold or min_threshold (at least one is required)")
        lo, hi = self.min_threshold, self.max_threshold
        if lo is not None and hi is not None and lo > hi:
            raise ConfigError(f"{self.name}: min_threshold={lo!r} is above max_threshold={hi!r}; allowed: min <= max")

    def selects(self) -> list[Select]:
        """Read ``collection_names`` ∪ ``tensor_regex`` (variance only)."""
        sel = user_select(self.params, reductions=("variance",), raw=False)
        return [sel] if sel else []

    def chart_threshold(self) -> float | None:
        """Return ``max_threshold`` (else ``min_threshold``)."""
        value = self.max_threshold
        return value if value is not None else self.min_threshold

    def check(self, state: Any, data: StepData) -> Check | None:
        """Compare each tensor's variance with the thresholds."""
        var = {}
        for rec in data.role():
            v = tensor_reduction(rec, "variance")
            if v is not None and not math.isnan(v):
                var[rec.name] = v
        if not var:
            return None
        hi, lo = self.max_threshold, self.min_threshold
        bad = tuple(n for n, v in var.items() if (hi is not None and v > hi) or (lo is not None and v < lo))
        top = max(var, key=var.__getitem__)
        low = min(var, key=var.__getitem__)
        detail = (
            f"variance from {fmt(var[low])} ({low}) to {fmt(var[top])} ({top}) "
            f"(thresholds min {fmt(lo)}, max {fmt(hi)})"
        )
        return Check(var[top], bool(bad), bad, detail)
