"""WeightUpdateRatio: the size of a weight update relative to the weight is too large or too small."""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import LITERAL, fmt, is_training
from trainspect.rules.base import Param, Requirement
from trainspect.rules.step_data import Check, StepData, tensor_reduction
from trainspect.rules.tensor_rule import Select, TensorRule

__all__ = ["WeightUpdateRatio"]


class WeightUpdateRatio(TensorRule):
    """Trigger when ``‖W_s − W_prev‖ / (‖W_prev‖ + epsilon)`` leaves [small_threshold, large_threshold].

    ``W_prev`` is the previous saved training step of the same weight; with ``num_steps`` set it must lie
    at most ``num_steps`` steps back, else the pair is skipped. Norms are L2 (Frobenius). Heuristic: the
    update-to-weight ratio should be around 1e-3 (Karpathy, CS231n "Babysitting the learning process";
    You et al., "Large batch training of convolutional networks" (LARS), 2017). Only TRAIN (or GLOBAL)
    steps are compared, since weights do not change in evaluation. Frozen weights give a ratio of 0 and
    trigger; leave them out of the ``weights`` collection.

    trainspect's default does not count a ratio below ``small_threshold`` when the weight's own gradient was
    recorded at that step and is below ``VANISHING`` (1e-7) in mean absolute value: such a weight does not move
    because no gradient reaches it (dead units, vanishing gradients: DeadRelu's and VanishingGradient's
    findings), not because of its update. ``literal=True`` counts every ratio, as smdebug does.

    Example:
        >>> WeightUpdateRatio(large_threshold="5").params["large_threshold"]
        5.0
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("num_steps", int, None, "largest distance to the previous saved step (None: any)", min=1),
        Param("large_threshold", float, 10.0, "largest acceptable ratio", min=0),
        Param("small_threshold", float, 1e-8, "smallest acceptable ratio", min=0),
        Param("epsilon", float, 1e-9, "added to the denominator", min=0),
        LITERAL,
    )
    num_steps: int | None
    large_threshold: float
    small_threshold: float
    epsilon: float
    literal: bool
    recommendation: ClassVar[str] = (
        "Updates are out of proportion to the weights: a ratio far above 1e-3 calls for a lower learning rate, "
        "one far below for a higher learning rate (or check that the optimizer steps at all)."
    )
    series_label: ClassVar[str] = "max update ratio"

    def selects(self) -> list[Select]:
        """Read the ``weights`` collection (raw values) and the gradients' ``abs_mean`` when recorded."""
        grads = Select("grad", collections=("gradients",), regex=("^gradient/",), reductions=("abs_mean",), raw=False)
        return [Select(collections=("weights",)), grads]

    def requirements(self) -> list[Requirement]:
        """Weights, raw, every ``num_steps`` steps when set."""
        return [Requirement("weights", save_interval=self.num_steps, raw=True)]

    def chart_threshold(self) -> float:
        """Return ``large_threshold``."""
        return float(self.large_threshold)

    def init_state(self) -> dict[str, tuple[int, np.ndarray, float]]:
        """The previous saved value of each weight, with its L2 norm."""
        return {}

    def check(self, state: dict[str, tuple[int, np.ndarray, float]], data: StepData) -> Check | None:
        """Compare each weight with its previous saved value."""
        if not is_training(data.mode):
            return None
        ratios: dict[str, float] = {}
        for rec in data.role():
            if rec.value is None:
                continue
            cur = np.asarray(rec.value, dtype=np.float64)
            norm = _l2(cur)
            prev = state.get(rec.name)
            state[rec.name] = (data.step, cur, norm)
            if prev is None or prev[1].shape != cur.shape or not self._close_enough(prev[0], data.step):
                continue
            ratio = float(_l2(cur - prev[1]) / (prev[2] + self.epsilon))
            if math.isfinite(ratio):
                ratios[rec.name] = ratio
        if not ratios:
            return None
        if self.literal:
            return self._judge(ratios, {})
        return self._judge(ratios, _starved(data, ratios, self.small_threshold))

    def _close_enough(self, prev_step: int, step: int) -> bool:
        n = self.num_steps
        return n is None or step - prev_step <= n

    def _judge(self, ratios: dict[str, float], starved: dict[str, float]) -> Check:
        large, small = self.large_threshold, self.small_threshold
        bad = tuple(name for name, r in ratios.items() if r > large or (r < small and name not in starved))
        hi = max(ratios, key=ratios.__getitem__)
        lo = min(ratios, key=ratios.__getitem__)
        detail = (
            f"update ratio from {fmt(ratios[lo])} ({lo}) to {fmt(ratios[hi])} ({hi}) "
            f"(thresholds {fmt(small)} and {fmt(large)})"
        )
        if starved:
            detail += "; not counted (no gradient reaches them): " + ", ".join(
                f"{n} (|gradient| {fmt(g)})" for n, g in list(starved.items())[:5]
            )
        return Check(ratios[hi], bool(bad), bad, detail)

    def insufficient(self, state: Any) -> str:
        """Needs weights at two close training steps."""
        return "needs the weights saved at two training steps (within num_steps when set)"


VANISHING = 1e-7
"""Mean |gradient| below which a weight that does not move is starved of gradient, not badly updated."""


def _starved(data: StepData, ratios: dict[str, float], small: float) -> dict[str, float]:
    """The weights with a tiny ratio whose recorded gradient at this step is tiny too (name -> mean |gradient|)."""
    tiny = [n for n, r in ratios.items() if r < small]
    if not tiny:
        return {}
    grads = {r.name: tensor_reduction(r, "mean", abs=True) for r in data.role("grad")}
    out = {}
    for name in tiny:
        g = grads.get(f"gradient/{name}")
        if g is not None and g < VANISHING:
            out[name] = g
    return out


def _l2(x: np.ndarray) -> float:
    """The L2 (Frobenius) norm, computed as ``numpy.linalg.norm`` does for real arrays, without its overhead."""
    flat = x.ravel(order="K")
    return math.sqrt(float(flat.dot(flat)))
