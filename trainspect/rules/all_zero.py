"""AllZero: (nearly) all values of a tensor are zero."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import COLLECTION_NAMES, TENSOR_REGEX, fmt, require_selection, user_select
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["AllZero"]


class AllZero(TensorRule):
    """Trigger when at least ``threshold`` % of an inspected tensor's values are exactly zero.

    Heuristic: an all-zero tensor means a dead layer, a zero initialisation or a broken input pipeline
    (smdebug's AllZero; symmetric zero initialisation cannot break symmetry, Goodfellow et al., *Deep
    Learning*, 2016, §8.4). ``collection_names`` or ``tensor_regex`` is required.

    Example:
        >>> AllZero(collection_names="weights").params["collection_names"]
        ['weights']
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        TENSOR_REGEX,
        Param("threshold", float, 100.0, "% of zero values that triggers", min=0, max=100),
    )
    collection_names: list[str] | None
    tensor_regex: list[str] | None
    threshold: float
    recommendation: ClassVar[str] = (
        "A tensor is all zeros: check the initialisation, dead activations upstream and the input pipeline."
    )
    series_label: ClassVar[str] = "max % zeros"

    def validate(self) -> None:
        """Require a selection."""
        require_selection(self.name, self.params)

    def selects(self) -> list[Select]:
        """Read ``collection_names`` ∪ ``tensor_regex``."""
        sel = user_select(self.params)
        return [sel] if sel else []

    def chart_threshold(self) -> float:
        """Return ``threshold``."""
        return float(self.threshold)

    def check(self, state: Any, data: StepData) -> Check | None:
        """Compute each tensor's share of zeros."""
        pct = {}
        for rec in data.role():
            if rec.value is None:
                continue
            arr = np.asarray(rec.value)
            if arr.size:
                pct[rec.name] = 100.0 * float(np.count_nonzero(arr == 0)) / arr.size
        if not pct:
            return None
        limit = self.chart_threshold()
        worst = max(pct, key=pct.__getitem__)
        bad = tuple(n for n, p in pct.items() if p >= limit)
        return Check(pct[worst], bool(bad), bad, f"{fmt(pct[worst])}% zeros in {worst} (threshold {fmt(limit)}%)")
