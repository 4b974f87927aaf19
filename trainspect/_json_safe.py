"""``json_safe``: the one function that makes a value JSON-safe (verdicts, the report's charts, the plugin's views)."""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from typing import Any, Literal

import numpy as np

__all__ = ["json_safe", "NONFINITE_STRINGS"]

NONFINITE_STRINGS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}
"""The spellings of non-finite floats under ``nonfinite="string"`` (JavaScript's), and the values they stand for."""

_FAST = 8
"""A list longer than this of plain finite ``float``/``int`` (a chart series) is copied without a look at each item."""


def json_safe(obj: Any, nonfinite: Literal["null", "string"] = "null") -> Any:
    """A copy of ``obj`` that ``json.dumps(..., allow_nan=False)`` writes, as the same values JSON can hold.

    - ``dict`` (any mapping): a new dict, keys made ``str``, values made safe; ``list`` and ``tuple``: a new list.
    - a non-finite float (NaN, Infinity, -Infinity; a Python or NumPy float): ``None`` with ``nonfinite="null"``
      (the report's charts, the TensorBoard plugin's views), or the strings ``"NaN"``, ``"Infinity"``,
      ``"-Infinity"`` with ``nonfinite="string"`` (verdict files: they read back as the floats, see
      :data:`NONFINITE_STRINGS`); finite floats are kept.
    - NumPy scalars: the Python ``bool``, ``int`` or ``float`` (then as above); NumPy arrays: lists.
    - an ``Enum``: its value, made safe.
    - ``bytes``: decoded as UTF-8, invalid bytes replaced by U+FFFD.
    - anything else (``str``, ``int``, ``bool``, ``None``, unknown objects) is returned as it is: for an unknown
      object ``json.dumps`` then raises ``TypeError`` unless the caller gives it a ``default=``.

    Example:
        >>> json_safe({1: [float("nan"), np.float32(0.5), np.int64(3)], "b": (b"ok", float("inf"))})
        {'1': [None, 0.5, 3], 'b': ['ok', None]}
        >>> json_safe([float("-inf"), np.float64("nan")], nonfinite="string")
        ['-Infinity', 'NaN']
    """
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else _nonfinite(obj, nonfinite)
    if isinstance(obj, Mapping):
        return {str(k): json_safe(v, nonfinite) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        if len(obj) > _FAST and _finite_numbers(obj):
            return list(obj)
        return [json_safe(v, nonfinite) for v in obj]
    return _scalar(obj, nonfinite)


def _scalar(obj: Any, nonfinite: Literal["null", "string"]) -> Any:
    """The cases of :func:`json_safe` below the containers: NumPy values, enums, bytes, everything else."""
    if isinstance(obj, np.generic):
        return json_safe(obj.item(), nonfinite)
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist(), nonfinite)
    if isinstance(obj, enum.Enum):
        return json_safe(obj.value, nonfinite)
    if isinstance(obj, (bytes, bytearray, memoryview)):
        return bytes(obj).decode("utf-8", errors="replace")
    return obj


def _nonfinite(value: float, nonfinite: Literal["null", "string"]) -> str | None:
    if nonfinite == "null":
        return None
    return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")


def _finite_numbers(values: list[Any] | tuple[Any, ...]) -> bool:
    """Whether every item is a plain ``float`` or ``int`` (no bool, no NumPy scalar) and finite."""
    if not all(type(v) is float or type(v) is int for v in values):
        return False
    try:
        return bool(np.isfinite(np.asarray(values, dtype=np.float64)).all())
    except OverflowError:  # an int too large for a float64: look at each item
        return False
