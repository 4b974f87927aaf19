"""WeightUpdateRatio: the size of a weight update relative to the weight is too large or too small."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from trainspect.rules._common import LITERAL, fmt, is_training
from trainspect.rules._dead_gradients import DEAD_STEPS_PARAM, DeadGradients, beside_healthy_weight, listed
from trainspect.rules.base import Param, Requirement
from trainspect.rules.step_data import Check, StepData, tensor_reduction
from trainspect.rules.tensor_rule import Select, TensorRule
from trainspect.step import TensorRecord

__all__ = ["WeightUpdateRatio"]


class WeightUpdateRatio(TensorRule):
    """Trigger when ``‖W_s − W_prev‖ / (‖W_prev‖ + epsilon)`` leaves [small_threshold, large_threshold].

    ``W_prev`` is the previous saved training step of the same weight; with ``num_steps`` set it must lie
    at most ``num_steps`` steps back, else the pair is skipped. Norms are L2 (Frobenius). Heuristic: the
    update-to-weight ratio should be around 1e-3 (Karpathy, CS231n "Babysitting the learning process";
    You et al., "Large batch training of convolutional networks" (LARS), 2017). Only TRAIN (or GLOBAL)
    steps are compared, since weights do not change in evaluation. Frozen weights give a ratio of 0 and
    trigger; leave them out of the ``weights`` collection.

    trainspect's default differs from smdebug's in four ways, each named in the details:

    * a ratio below ``small_threshold`` is not counted when the weight's own gradient was recorded at that
      step and is below ``VANISHING`` (1e-7) in mean absolute value: such a weight does not move because no
      gradient reaches it (units dead from the start, vanishing gradients: DeadRelu's and VanishingGradient's
      findings), not because of its update; nor when its gradient was exactly zero at the first step of the
      pair and only began to flow since (a layer behind a zero-initialised BatchNorm gamma). A gradient that
      was non-zero and has stayed exactly zero for ``dead_steps`` recorded steps is dead: the weight stopped
      updating (a learning rate that killed the network), and that counts;
    * a weight whose first recorded value is exactly zero (a zero-initialised BatchNorm gamma, residual
      branch or LoRA matrix) has no scale of its own to compare an update with: its update is divided by the
      larger of its previous and current norm, so growing from zero is no large ratio;
    * when gradients are recorded, a weight that never had one recorded and either moves or is named like a
      trained weight under another prefix (``ModelEma_module.head.weight`` beside ``Net_head.weight``) is
      updated outside the optimizer (an EMA, SWA or teacher copy): its small ratios are not counted. A frozen
      weight (no gradient, never moves, no trained twin) still counts;
    * empty weights (shape (0,), such as a DeepSpeed ZeRO-3 partition not held by this rank) are skipped,
      also with ``literal=True``: they have no values to compare.

    ``literal=True`` counts every other ratio, as smdebug does.

    Example:
        >>> WeightUpdateRatio(large_threshold="5").params["large_threshold"]
        5.0
    """

    parameters: ClassVar[tuple[Param, ...]] = (
        Param("num_steps", int, None, "largest distance to the previous saved step (None: any)", min=1),
        Param("large_threshold", float, 10.0, "largest acceptable ratio", min=0),
        Param("small_threshold", float, 1e-8, "smallest acceptable ratio", min=0),
        Param("epsilon", float, 1e-9, "added to the denominator", min=0),
        DEAD_STEPS_PARAM,
        LITERAL,
    )
    num_steps: int | None
    large_threshold: float
    small_threshold: float
    epsilon: float
    dead_steps: int
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

    def init_state(self) -> _State:
        """The previous saved value of each weight with its L2 norm, and what is known of its gradient."""
        return _State(dead=DeadGradients(self.dead_steps))

    def check(self, state: _State, data: StepData) -> Check | None:
        """Compare each weight with its previous saved value."""
        if not is_training(data.mode):
            return None
        grads = {r.name: tensor_reduction(r, "mean", abs=True) for r in data.role("grad")}
        for gname in grads.keys() - state.grads_seen:
            state.grads_seen.add(gname)
            wname = gname.removeprefix("gradient/")
            state.trained_paths.update(_paths(wname))
            if state.pending.pop(wname, None) is not None:  # not trained yet, not frozen: trained from now on
                state.noted.pop(wname, None)
        state.dead.update(data.step, grads)
        state.fresh = any(g and state.dead.stale_since(n) is None for n, g in grads.items())
        ratios: dict[str, float] = {}
        for rec in data.role():
            ratio = self._ratio(state, rec, data.step)
            if ratio is not None and math.isfinite(ratio):
                ratios[rec.name] = ratio
        if not ratios:
            return None
        if self.literal:
            return _judge(self, ratios, set(), {}, {})
        skip, dead = _sort_small(state, grads, ratios, self.small_threshold)
        return _judge(self, ratios, skip, dead, state.noted)

    def _ratio(self, state: _State, rec: TensorRecord, step: int) -> float | None:
        """The update ratio of one weight against its previous saved value (None without a pair to compare)."""
        if rec.value is None or np.size(rec.value) == 0:
            return None
        cur = np.asarray(rec.value, dtype=np.float64)
        norm = _l2(cur)
        prev = state.prev.get(rec.name)
        state.prev[rec.name] = (step, cur, norm)
        if prev is None:
            if norm == 0 and not self.literal:
                state.zero_init.add(rec.name)
                state.noted[rec.name] = "zero-initialised: its update is divided by its larger norm of the pair"
            return None
        if prev[1].shape != cur.shape or not self._close_enough(prev[0], step):
            return None
        state.pair_from[rec.name] = prev[0]
        scale = max(prev[2], norm) if rec.name in state.zero_init else prev[2]
        ratio = float(_l2(cur - prev[1]) / (scale + self.epsilon))
        if state.grads_seen and f"gradient/{rec.name}" not in state.grads_seen:
            if ratio > 0:
                state.no_own_grad[rec.name] = "moved without a gradient of its own: an EMA or averaged copy"
                state.pending.pop(rec.name, None)
            elif rec.name not in state.no_own_grad and _copy_of_trained(rec.name, state.trained_paths):
                state.no_own_grad[rec.name] = (
                    "a copy of a trained weight (EMA, SWA, teacher), without a gradient of its own"
                )
        return ratio

    def finish(self, state: _State, last: StepData | None) -> Check | None:
        """Name the weights that never had a gradient recorded nor moved while the others trained: frozen."""
        if self.literal or not state.pending:
            return None
        frozen = tuple(state.pending)
        span = "; ".join(f"{n} (steps {a}-{b})" for n, (a, b) in list(state.pending.items())[:5])
        more = f" and {len(frozen) - 5} more" if len(frozen) > 5 else ""
        detail = (
            f"{len(frozen)} weight(s) never moved (ratio 0 < threshold {fmt(self.small_threshold)}) and never had a "
            f"gradient recorded while the others were trained: frozen? {span}{more}"
        )
        return Check(0.0, True, frozen, detail)

    def _close_enough(self, prev_step: int, step: int) -> bool:
        n = self.num_steps
        return n is None or step - prev_step <= n

    def insufficient(self, state: Any) -> str:
        """Needs weights at two close training steps."""
        return "needs the weights saved at two training steps (within num_steps when set)"


VANISHING = 1e-7
"""Mean |gradient| below which a weight that does not move is starved of gradient, not badly updated."""


@dataclass
class _State:
    prev: dict[str, tuple[int, np.ndarray, float]] = field(default_factory=dict)
    zero_init: set[str] = field(default_factory=set)
    grads_seen: set[str] = field(default_factory=set)
    trained_paths: set[str] = field(default_factory=set)
    no_own_grad: dict[str, str] = field(default_factory=dict)
    pair_from: dict[str, int] = field(default_factory=dict)
    noted: dict[str, str] = field(default_factory=dict)
    pending: dict[str, tuple[int, int]] = field(default_factory=dict)
    fresh: bool = False
    dead: DeadGradients = field(default_factory=DeadGradients)


def _sort_small(
    state: _State, grads: dict[str, float | None], ratios: dict[str, float], small: float
) -> tuple[set[str], dict[str, str]]:
    """The tiny ratios not counted (their reasons go to ``state.noted``), and the dead weights (counted, why)."""
    skip: set[str] = set()
    dead: dict[str, str] = {}
    for name, ratio in ratios.items():
        if ratio >= small:
            continue
        counts, why = _small_ratio(state, name, grads)
        if not counts:
            skip.add(name)
            state.noted[name] = why or ""
        elif why:
            dead[name] = why
    return skip, dead


def _small_ratio(state: _State, name: str, grads: dict[str, float | None]) -> tuple[bool, str | None]:
    """Whether a weight's tiny ratio counts, and why (None: a plain tiny ratio, counted)."""
    gname = f"gradient/{name}"
    g = grads.get(gname)
    if name in state.no_own_grad:
        return False, state.no_own_grad[name]
    if state.grads_seen and gname not in state.grads_seen:
        first, _ = state.pending.get(name, (state.pair_from[name], 0))
        state.pending[name] = (first, state.prev[name][0])
        return False, "no gradient recorded yet and not moved: frozen if it stays so (judged at the end)"
    if _began_to_flow(state, gname, state.pair_from[name]):
        return False, f"its gradient began to flow only at step {state.dead.first_nonzero(gname)}"
    if g is None:
        if gname in state.grads_seen:
            return False, "no gradient recorded at this step: not trained now"
        return True, None
    stale = state.dead.stale_since(gname)
    if stale is not None and state.fresh:
        return False, f"its gradient has not been computed again since step {stale}: not trained now"
    if g >= VANISHING:
        return True, None
    if g == 0 and state.dead.dead(gname) and beside_healthy_weight(gname, grads, VANISHING) is None:
        return True, state.dead.describe(gname)
    return False, f"no gradient reaches it: |gradient| {fmt(g)}"


def _began_to_flow(state: _State, gname: str, since: int) -> bool:
    """Whether the gradient was exactly zero or absent at the start of the compared pair and has flowed since."""
    first = state.dead.first_nonzero(gname)
    return first is not None and first > since


def _judge(
    rule: WeightUpdateRatio, ratios: dict[str, float], skip: set[str], dead: dict[str, str], noted: dict[str, str]
) -> Check:
    large, small = rule.large_threshold, rule.small_threshold
    bad = tuple(name for name, r in ratios.items() if r > large or (r < small and name not in skip))
    hi = max(ratios, key=ratios.__getitem__)
    lo = min(ratios, key=ratios.__getitem__)
    detail = (
        f"update ratio from {fmt(ratios[lo])} ({lo}) to {fmt(ratios[hi])} ({hi}) "
        f"(thresholds {fmt(small)} and {fmt(large)})"
    )
    if dead:
        detail += f"; {len(dead)} stopped updating after their gradient died: " + listed(dead)
    if noted:
        detail += "; not counted: " + listed(noted)
    return Check(ratios[hi], bool(bad), bad, detail)


def _paths(name: str) -> set[str]:
    """The parameter paths a weight's name may end with: what follows each ``_`` of its model prefix.

    A path must name a module (``head.weight``, ``block.0.weight``): a bare index (``0.weight`` of an
    ``nn.Sequential``) would match other layers of other models.

    Example:
        >>> sorted(_paths("my_Net_block.conv.weight")), _paths("Sequential_0.weight")
        (['Net_block.conv.weight', 'block.conv.weight'], set())
    """
    head = name.split(".", 1)[0]
    tails = (name[i + 1 :] for i, ch in enumerate(head) if ch == "_")
    return {t for t in tails if "." in t and any(c.isalpha() for c in t.rsplit(".", 1)[0])}


def _copy_of_trained(name: str, trained: set[str]) -> bool:
    """Whether ``name`` ends, after a ``.`` or ``_``, with the parameter path of a weight that has gradients.

    An EMA, SWA or teacher copy of a model names its weights like the model's, under its own prefix
    (``ModelEma_module.block.conv.weight`` beside ``Net_block.conv.weight``).

    Example:
        >>> _copy_of_trained("ModelEma_module.block.conv.weight", {"block.conv.weight"})
        True
        >>> _copy_of_trained("Net_stem.conv.weight", {"block.conv.weight"})
        False
    """
    return any(ch in "._" and name[i + 1 :] in trained for i, ch in enumerate(name))


def _l2(x: np.ndarray) -> float:
    """The L2 (Frobenius) norm, computed as ``numpy.linalg.norm`` does for real arrays, without its overhead."""
    flat = x.ravel(order="K")
    return math.sqrt(float(flat.dot(flat)))
