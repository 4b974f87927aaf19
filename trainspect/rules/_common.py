"""Helpers shared by the built-in tensor rules (private)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from trainspect.exceptions import ConfigError
from trainspect.rules.base import Param
from trainspect.rules.tensor_rule import Select

COLLECTION_NAMES = Param("collection_names", list, None, "collections to inspect (list or comma-separated)")
TENSOR_REGEX = Param("tensor_regex", list, None, "regexes of tensor names to inspect (list or comma-separated)")


def user_select(params: dict[str, Any], reductions: tuple[str, ...] = (), raw: bool = True) -> Select | None:
    """Build the selection from ``collection_names`` ∪ ``tensor_regex``; None when neither is given."""
    colls: tuple[str, ...] = tuple(params.get("collection_names") or ())
    regex: tuple[str, ...] = tuple(params.get("tensor_regex") or ())
    if not colls and not regex:
        return None
    return Select(collections=colls, regex=regex, reductions=reductions, raw=raw)


def require_selection(rule_name: str, params: dict[str, Any]) -> None:
    """Raise ConfigError unless ``collection_names`` or ``tensor_regex`` is given."""
    if not params.get("collection_names") and not params.get("tensor_regex"):
        raise ConfigError(f"{rule_name}: give collection_names or tensor_regex (at least one is required)")


def fmt(value: float | None) -> str:
    """Format a number for messages: 4 significant digits, NaN/Inf spelled out."""
    if value is None:
        return "n/a"
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return f"{value:.4g}"


def per_unit(value: np.ndarray) -> np.ndarray:
    """Reshape an activation to (batch, units): axis 0 is the batch, the rest are the units."""
    arr = np.asarray(value)
    if arr.ndim == 0:
        return arr.reshape(1, 1)
    if arr.ndim == 1:
        return arr.reshape(-1, 1)
    return arr.reshape(arr.shape[0], -1)


def is_training(mode: object) -> bool:
    """Whether a step of this mode updates weights (TRAIN, or GLOBAL when no mode was set)."""
    name = getattr(mode, "name", str(mode))
    return name in ("TRAIN", "GLOBAL")
