"""UnchangedTensor: a tensor keeps the same value over ``num_steps`` saved steps."""

from __future__ import annotations

from collections import deque
from typing import ClassVar

import numpy as np

from trainspect.rules._common import COLLECTION_NAMES, TENSOR_REGEX, require_selection, user_select
from trainspect.rules.base import Param
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["UnchangedTensor"]


class UnchangedTensor(TensorRule):
    """Trigger when a tensor's last ``num_steps`` saved values (counting this step's) are all allclose.

    ``rtol``, ``atol`` and ``equal_nan`` go to ``numpy.allclose``. With fewer saved values the rule does
    not judge. Heuristic: parameters or activations that never change mean a layer is not learning
    (frozen by mistake, no gradient path, or a learning rate of zero). Only TRAIN (or GLOBAL) steps
    are compared, since nothing is expected to change during evaluation.

    Example:
        >>> UnchangedTensor(collection_names="weights", num_steps="4").params["num_steps"]
        4
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        COLLECTION_NAMES,
        TENSOR_REGEX,
        Param("num_steps", int, 3, "saved steps that must all be equal", min=2),
        Param("rtol", float, 1e-5, "relative tolerance of numpy.allclose", min=0),
        Param("atol", float, 1e-8, "absolute tolerance of numpy.allclose", min=0),
        Param("equal_nan", bool, False, "NaN equals NaN"),
    )
    collection_names: list[str] | None
    tensor_regex: list[str] | None
    num_steps: int
    rtol: float
    atol: float
    equal_nan: bool
    recommendation: ClassVar[str] = (
        "A tensor does not change: check that its parameters require grad, are passed to the optimizer, "
        "and that the learning rate is not zero."
    )
    series_label: ClassVar[str] = "unchanged tensors"

    def validate(self) -> None:
        """Require a selection."""
        require_selection(self.name, self.params)

    def selects(self) -> list[Select]:
        """Read ``collection_names`` ∪ ``tensor_regex``."""
        sel = user_select(self.params)
        return [sel] if sel else []

    def chart_threshold(self) -> float:
        """Any unchanged tensor triggers."""
        return 0.0

    def init_state(self) -> dict[str, deque[np.ndarray]]:
        """The last ``num_steps`` values of each tensor."""
        return {}

    def check(self, state: dict[str, deque[np.ndarray]], data: StepData) -> Check | None:
        """Compare each tensor's recent values with this step's."""
        from trainspect.rules._common import is_training

        if not is_training(data.mode):
            return None
        n = self.num_steps
        judged, same = 0, []
        for rec in data.role():
            if rec.value is None:
                continue
            hist = state.setdefault(rec.name, deque(maxlen=n))
            hist.append(np.array(rec.value, copy=True))
            if len(hist) < n:
                continue
            judged += 1
            if all(self._close(v, hist[-1]) for v in list(hist)[:-1]):
                same.append(rec.name)
        if not judged:
            return None
        detail = f"{len(same)} of {judged} tensor(s) unchanged over {n} saved steps" + (
            f", e.g. {same[0]}" if same else ""
        )
        return Check(float(len(same)), bool(same), tuple(same), detail + " (threshold: none may stay unchanged)")

    def _close(self, a: np.ndarray, b: np.ndarray) -> bool:
        if a.shape != b.shape:
            return False
        p = self.params
        if a.dtype.kind == "f" and a.dtype == b.dtype:
            # numpy.isclose's test for finite values, in the same dtype: an element failing it (NaN never does)
            # is not close, so the tensors are not allclose (nor equal); otherwise the exact tests below decide
            with np.errstate(invalid="ignore", over="ignore"):
                if (np.abs(a - b) > p["atol"] + p["rtol"] * np.abs(b)).any():
                    return False
        if np.array_equal(a, b):
            return True
        return bool(np.allclose(a, b, rtol=p["rtol"], atol=p["atol"], equal_nan=p["equal_nan"]))

    def insufficient(self, state: dict[str, deque[np.ndarray]]) -> str:
        """Fewer than ``num_steps`` saved values."""
        return f"needs num_steps={self.num_steps} saved training steps of a tensor"
