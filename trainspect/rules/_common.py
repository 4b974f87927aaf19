"""Helpers shared by the built-in tensor rules (private)."""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass
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


LITERAL = Param(
    "literal",
    bool,
    False,
    "True: smdebug's literal rule (single points, no noise test), see docs/rules.md; False: trainspect's",
)
"""The parameter every rule whose default differs from smdebug's literal rule takes to restore it."""

Z_RISE = 3.0
"""Standard errors by which a window must exceed another to count as a real rise (guards against false alarms)."""

Z_PROGRESS = 2.0
"""Standard errors by which a window must lie below another to count as real progress."""


def noise_sigma(values: list[float] | np.ndarray) -> float:
    """Estimate the step-to-step noise of a series: the robust spread of successive differences over sqrt(2).

    Trends barely affect it (differences remove them), and a few spikes do not inflate it (median, not mean).
    A short list is handled in plain Python (the same number; the loss rules call this once per window).

    Example:
        >>> round(noise_sigma([1.0, 1.2, 1.0, 1.2, 1.0]), 2)
        0.21
    """
    if isinstance(values, list) and len(values) <= SHORT:
        finite = [float(v) for v in values if math.isfinite(v)]
        if len(finite) < 3:
            return float(np.std(finite)) if finite else 0.0
        steps = [abs(b - a) for a, b in zip(finite, finite[1:], strict=False)]
        return float(1.4826 * median_of(steps) / math.sqrt(2.0))
    arr = np.asarray(values, dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size < 3:
        return float(np.std(arr)) if arr.size else 0.0
    diffs = np.abs(np.diff(arr))
    return float(1.4826 * np.median(diffs) / math.sqrt(2.0))


SHORT = 256
"""Lists up to this long get their median in plain Python (faster than a NumPy call, the same value)."""


def finite_noise_sigma(values: list[float]) -> float:
    """:func:`noise_sigma` of values known to be finite (the loss windows hold only finite ones), a little faster.

    Example:
        >>> finite_noise_sigma([1.0, 1.2, 1.0, 1.2, 1.0]) == noise_sigma([1.0, 1.2, 1.0, 1.2, 1.0])
        True
    """
    n = len(values) - 1
    if n < 2 or n >= SHORT:
        return noise_sigma(values)
    ordered = sorted(map(abs, map(operator.sub, values[1:], values[:-1])))
    mid = n // 2
    med = float(ordered[mid]) if n % 2 else (float(ordered[mid - 1]) + float(ordered[mid])) / 2.0
    return float(1.4826 * med / math.sqrt(2.0))


def median_of(values: list[float]) -> float:
    """``numpy.median`` of finite numbers, computed in plain Python for short lists (the same value).

    Example:
        >>> median_of([3.0, 1.0, 2.0]), median_of([4.0, 1.0, 2.0, 3.0])
        (2.0, 2.5)
    """
    n = len(values)
    if not n or n > SHORT:
        return float(np.median(values))
    ordered = sorted(values)
    mid = n // 2
    return float(ordered[mid]) if n % 2 else (float(ordered[mid - 1]) + float(ordered[mid])) / 2.0


@dataclass
class Window:
    """Summary of a run of loss values: mean, count, spread and the global steps it covers."""

    mean: float
    count: int
    sigma: float
    first_step: int
    last_step: int

    @property
    def se(self) -> float:
        """Standard error of the mean."""
        return self.sigma / math.sqrt(max(self.count, 1))

    def steps(self) -> str:
        """The global steps covered, for messages."""
        return f"{self.first_step}" if self.first_step == self.last_step else f"{self.first_step}-{self.last_step}"


def window_of(values: list[float], steps: list[int], sigma: float | None = None) -> Window:
    """Summarise values (with their global steps); ``sigma`` defaults to their own spread."""
    arr = np.asarray(values, dtype=np.float64)
    spread = sigma if sigma is not None else (float(np.std(arr, ddof=1)) if arr.size > 1 else 0.0)
    return Window(float(arr.mean()), int(arr.size), spread, int(steps[0]), int(steps[-1]))


def mode_name(mode: object) -> str:
    """The mode's name for messages (TRAIN, EVAL…)."""
    return str(getattr(mode, "name", mode))
