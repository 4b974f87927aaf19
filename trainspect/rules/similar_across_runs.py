"""SimilarAcrossRuns: a tensor differs between this run and another."""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from trainspect.exceptions import ConfigError
from trainspect.rules._common import COLLECTION_NAMES, TENSOR_REGEX, user_select
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["SimilarAcrossRuns"]


class SimilarAcrossRuns(TensorRule):
    """Trigger at a step where a tensor saved by both runs differs (``numpy.allclose`` fails).

    Compares the base trial with each of ``other_trials`` (run directories), step by step, over
    ``collection_names`` ∪ ``tensor_regex`` (default: every tensor). Useful to check that a refactoring or a
    new environment reproduces a run. Heuristic: a determinism (reproducibility) test, as in smdebug's rule
    and PyTorch's reproducibility notes; ``allclose`` with numpy's default tolerances. Offline only.

    Example:
        >>> SimilarAcrossRuns(other_trials="/tmp/run_b").compared_runs()
        ['/tmp/run_b']
    """

    live = False
    parameters: ClassVar[tuple[Param, ...]] = (
        Param("other_trials", list, None, "run directories to compare with (list or comma-separated)"),
        COLLECTION_NAMES,
        TENSOR_REGEX,
    )
    other_trials: list[str] | None
    collection_names: list[str] | None
    tensor_regex: list[str] | None
    recommendation: ClassVar[str] = (
        "The runs diverge: fix random seeds and data order, enable deterministic algorithms, and compare "
        "the first differing step's inputs."
    )
    series_label: ClassVar[str] = "differing tensors"

    def validate(self) -> None:
        """Require ``other_trials``."""
        if not self.other_trials:
            raise ConfigError(f"{self.name}: other_trials is required (the run directories to compare with)")

    def compared_runs(self) -> list[str]:
        """Return ``other_trials``."""
        return list(self.other_trials or [])

    def selects(self) -> list[Select]:
        """Read ``collection_names`` ∪ ``tensor_regex``, or every tensor."""
        sel = user_select(self.params)
        return [sel] if sel else [Select(all_tensors=True)]

    def chart_threshold(self) -> float:
        """Any differing tensor triggers."""
        return 0.0

    def check(self, state: Any, data: StepData) -> Check | None:
        """Compare each tensor with the other runs' values at this step."""
        compared, differ = 0, []  # counted per tensor: one that differs from any other run differs once
        for rec in data.role():
            if rec.value is None:
                continue
            theirs_all = [t.value for o in data.others if (t := o.get(rec.name)) is not None and t.value is not None]
            if not theirs_all:
                continue
            compared += 1
            a = np.asarray(rec.value)
            if any(a.shape != np.shape(b) or not np.allclose(a, b, equal_nan=True) for b in theirs_all):
                differ.append(rec.name)
        if not compared:
            return None
        detail = f"{len(differ)} of {compared} compared tensor(s) differ" + (f", first {differ[0]}" if differ else "")
        return Check(float(len(differ)), bool(differ), tuple(differ), detail + " (threshold: none may differ)")

    def insufficient(self, state: Any) -> str:
        """No tensor was saved by both runs at the same step."""
        return "no tensor was saved by both runs at the same step"
