"""Dead gradients: exactly zero for some recorded steps after having been non-zero (private).

A gradient that has been exactly zero since its first record is structural (an unused or masked parameter, a
layer behind ReLUs dead from the start, a conv before a zero-initialised BatchNorm at step 0) and is no
finding of the gradient rules. One that was non-zero and then stays exactly zero is dead: no gradient reaches
that parameter any more, the typical end of a learning rate so high that it pushed every ReLU below zero.
The same history tells a stale gradient (recorded again with the very same value: not computed again, its
layer not trained at these steps) from a fresh one. VanishingGradient and WeightUpdateRatio share this
bookkeeping.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from trainspect.rules.base import Param

__all__ = ["DEAD_STEPS", "DEAD_STEPS_PARAM", "DeadGradients", "beside_healthy_weight", "listed", "weight_of"]

DEAD_STEPS = 3
"""Consecutive recorded steps a once non-zero gradient must stay exactly zero to count as dead (default).

One or two zero records can be a parameter left out of a step (a branch not taken, a layer dropped for one
batch, gradients zeroed without ``set_to_none``); three in a row, spaced by the save interval, are not."""

DEAD_STEPS_PARAM = Param(
    "dead_steps",
    int,
    DEAD_STEPS,
    "recorded steps a once non-zero gradient must stay exactly zero to count as dead",
    min=1,
)
"""The parameter of VanishingGradient and WeightUpdateRatio that says when a gradient is dead."""


@dataclass
class _History:
    first_nonzero: int | None = None
    last_nonzero: int | None = None
    last_value: float | None = None
    stale_since: int | None = None
    zero_since: int | None = None
    zeros: int = 0


def _note(hist: _History, step: int, value: float) -> None:
    if value != 0:
        if hist.first_nonzero is None:
            hist.first_nonzero = step
        if value != hist.last_value:
            hist.stale_since = None
        elif hist.stale_since is None:
            hist.stale_since = hist.last_nonzero
        hist.last_nonzero, hist.zero_since, hist.zeros = step, None, 0
    elif hist.last_nonzero is not None:
        hist.stale_since = None
        if hist.zero_since is None:
            hist.zero_since = step
        hist.zeros += 1
    hist.last_value = value


class DeadGradients:
    """Follow each gradient's mean |value| over its recorded steps and tell dead gradients from structural zeros.

    Args:
        records: consecutive recorded steps at exactly zero, after a non-zero one, that make a gradient dead.

    Example:
        >>> dead = DeadGradients(records=2)
        >>> for step, g in enumerate([0.5, 0.0, 0.0]):
        ...     dead.update(step, {"gradient/w": g, "gradient/unused": 0.0})
        >>> dead.dead("gradient/w"), dead.dead("gradient/unused")
        ((0, 1), None)
        >>> dead.describe("gradient/w")
        'exactly zero since step 1, non-zero until step 0'
        >>> dead.update(3, {"gradient/w": 0.25}); dead.update(4, {"gradient/w": 0.25}); dead.stale_since("gradient/w")
        3
    """

    def __init__(self, records: int = DEAD_STEPS) -> None:
        self.records = records
        self._seen: dict[str, _History] = {}

    def update(self, step: int, values: Mapping[str, float | None]) -> None:
        """Note the mean |gradient| of each gradient recorded at ``step`` (None and NaN/Inf are skipped)."""
        for name, value in values.items():
            if value is not None and math.isfinite(value):
                _note(self._seen.setdefault(name, _History()), step, value)

    def dead(self, name: str) -> tuple[int, int] | None:
        """Return (last non-zero step, first step of the zeros) for a dead gradient, else None."""
        hist = self._seen.get(name)
        if hist is None or hist.last_nonzero is None or hist.zero_since is None or hist.zeros < self.records:
            return None
        return hist.last_nonzero, hist.zero_since

    def stale_since(self, name: str) -> int | None:
        """The step since which a non-zero gradient has been recorded with the very same value (None: fresh).

        A gradient that was not computed again (its layer not trained at these steps, its ``.grad`` left as it
        was) repeats its last value exactly; a freshly computed one practically never does.
        """
        hist = self._seen.get(name)
        return None if hist is None else hist.stale_since

    def first_nonzero(self, name: str) -> int | None:
        """The first recorded step at which the gradient was non-zero (None: never so far)."""
        hist = self._seen.get(name)
        return None if hist is None else hist.first_nonzero

    def describe(self, name: str) -> str:
        """Say why an exactly-zero gradient is, or is not yet, dead."""
        hist = self._seen.get(name, _History())
        if hist.last_nonzero is None or hist.zero_since is None:
            return "exactly zero since its first record: no gradient flows (unused parameter, dead from the start)"
        since = f"exactly zero since step {hist.zero_since}, non-zero until step {hist.last_nonzero}"
        if hist.zeros < self.records:
            return f"{since}: {hist.zeros} of {self.records} recorded step(s) to count as dead"
        return since


def weight_of(name: str) -> str | None:
    """The weight of the same layer as a bias (``fc.bias`` -> ``fc.weight``; None for other names).

    Example:
        >>> weight_of("gradient/fc.bias"), weight_of("gradient/fc.weight")
        ('gradient/fc.weight', None)
    """
    for suffix in ("bias", "_bias"):
        if name.endswith(suffix):
            return name[: -len("bias")] + "weight"
    return None


def beside_healthy_weight(name: str, values: Mapping[str, float | None], limit: float) -> str | None:
    """The weight gradient of a bias whose gradient is at least ``limit`` (a bias before a normalisation), else None.

    Example:
        >>> beside_healthy_weight("gradient/fc.bias", {"gradient/fc.weight": 0.1}, 1e-7)
        'gradient/fc.weight'
    """
    sibling = weight_of(name)
    if sibling is None:
        return None
    value = values.get(sibling)
    return sibling if value is not None and value >= limit else None


def listed(items: Mapping[str, str], limit: int = 5) -> str:
    """``name (why)`` for the first ``limit`` items, joined by ``; ``, with a count of the rest."""
    out = "; ".join(f"{name} ({why})" for name, why in list(items.items())[:limit])
    rest = len(items) - limit
    return out + (f"; and {rest} more" if rest > 0 else "")
