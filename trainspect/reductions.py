"""Reductions computed with NumPy at analysis time (the hooks compute the same ones on the device)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from trainspect.config import ALLOWED_NORMS, ALLOWED_REDUCTIONS

__all__ = ["reduce", "ALL_REDUCTIONS"]

ALL_REDUCTIONS = ALLOWED_REDUCTIONS + ALLOWED_NORMS


def reduce(value: np.ndarray, name: str, absolute: bool = False) -> float:
    """Return one reduction of an array, in float64.

    Args:
        value: the array.
        name: one of min, max, mean, std, variance, sum, prod, l1, l2.
        absolute: reduce ``abs(value)`` instead.

    Raises:
        ValueError: an unknown reduction name.

    Example:
        >>> reduce(np.array([-3.0, 4.0]), "l2"), reduce(np.array([-3.0, 4.0]), "mean", absolute=True)
        (5.0, 3.5)
    """
    arr = np.asarray(value)
    arr = arr.astype(np.float64) if arr.dtype.kind != "f" or arr.dtype.itemsize < 8 else arr
    if absolute:
        arr = np.abs(arr)
    ops: dict[str, Callable[[np.ndarray], Any]] = {
        "min": np.min,
        "max": np.max,
        "mean": np.mean,
        "std": np.std,
        "variance": np.var,
        "sum": np.sum,
        "prod": np.prod,
        "l1": lambda a: np.sum(np.abs(a)),
        "l2": lambda a: np.sqrt(np.sum(a * a)),
    }
    if name not in ops:
        raise ValueError(f"reduction {name!r} unknown; allowed: {', '.join(ops)}")
    if arr.size == 0:
        return float("nan")
    return float(ops[name](arr))
