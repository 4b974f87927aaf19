"""Reductions: the one list of names, the one key type, and the NumPy implementations.

A reduction is a name from :data:`NAMES` taken over the values or over their absolute values. Its key type is
:class:`Reduction`, a named tuple ``(name, absolute)`` that is written ``"abs_mean"`` in run directories, configs
and rule requirements (:attr:`Reduction.key`, :meth:`Reduction.parse`). The rules and the Trial compute reductions
with :func:`reduce` and :func:`reduce_rows`; the hooks compute the same ones on the device, with tables checked
against :data:`NAMES` by :func:`device_table`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple, TypeVar

import numpy as np

__all__ = [
    "NAMES",
    "PLAIN",
    "NORMS",
    "ALL_REDUCTIONS",
    "Reduction",
    "parse",
    "format_key",
    "reduce",
    "reduce_rows",
    "device_table",
]

PLAIN = ("min", "max", "mean", "std", "variance", "sum", "prod")
"""The statistics (``ReductionConfig.reductions``)."""
NORMS = ("l1", "l2")
"""The norms (``ReductionConfig.norms``)."""
NAMES = PLAIN + NORMS
"""Every reduction name, in the order they are listed to users."""
ALL_REDUCTIONS = NAMES
"""Older name of :data:`NAMES`."""

_ABS = "abs_"
_NORM = "_norm"


class _Key(NamedTuple):
    name: str
    absolute: bool = False


class Reduction(_Key):
    """One reduction: a name of :data:`NAMES` and whether it is taken over absolute values.

    A named tuple, so it equals and hashes as the ``(name, absolute)`` tuple; :attr:`key` is how it is written.

    Args:
        name: one of :data:`NAMES`.
        absolute: reduce ``abs(value)`` instead.

    Raises:
        ValueError: an unknown name; the message lists the known ones.

    Example:
        >>> r = Reduction.parse("abs_l2_norm")
        >>> r.key, r == ("l2", True), Reduction("mean").key
        ('abs_l2', True, 'mean')
    """

    __slots__ = ()

    def __new__(cls, name: str, absolute: bool = False) -> Reduction:  # noqa: D102
        if name not in NAMES:
            raise ValueError(f"reduction {name!r} is unknown; allowed: {', '.join(NAMES)} and their abs_ forms")
        return super().__new__(cls, name, bool(absolute))

    @property
    def key(self) -> str:
        """The written form: ``"abs_mean"``, ``"l2"``."""
        return format_key(self.name, self.absolute)

    @classmethod
    def parse(cls, text: str) -> Reduction:
        """Read ``"abs_mean"``, ``"l2"``, and smdebug's ``"l2_norm"``/``"abs_l1_norm"`` (any case, spaces ignored).

        Raises:
            ValueError: not a reduction; the message lists the allowed names.
        """
        low = text.strip().lower()
        absolute = low.startswith(_ABS)
        name = low[len(_ABS) :] if absolute else low
        name = name[: -len(_NORM)] if name.endswith(_NORM) else name
        if name not in NAMES:
            raise ValueError(f"reduction {text!r} is unknown; allowed: {', '.join(NAMES)} and their abs_ forms")
        return cls(name, absolute)

    def __str__(self) -> str:
        return self.key


def format_key(name: str, absolute: bool) -> str:
    """Return the written form of a reduction known to be valid (``"abs_mean"``): the writers' fast path."""
    return _ABS + name if absolute else name


def parse(text: str) -> Reduction:
    """Return :meth:`Reduction.parse` of ``text``."""
    return Reduction.parse(text)


_Impl = Callable[[np.ndarray, "int | None"], Any]

_NUMPY: dict[str, _Impl] = {
    "min": lambda a, axis: a.min(axis=axis),
    "max": lambda a, axis: a.max(axis=axis),
    "mean": lambda a, axis: a.mean(axis=axis, dtype=np.float64),
    "std": lambda a, axis: np.sqrt(a.var(axis=axis, dtype=np.float64)),
    "variance": lambda a, axis: a.var(axis=axis, dtype=np.float64),
    "sum": lambda a, axis: a.sum(axis=axis, dtype=np.float64),
    "prod": lambda a, axis: a.prod(axis=axis, dtype=np.float64),
    "l1": lambda a, axis: np.abs(a).sum(axis=axis, dtype=np.float64),
    "l2": lambda a, axis: np.sqrt(np.square(a, dtype=np.float64).sum(axis=axis)),
}
"""The NumPy implementations, by name; accumulation is in float64 (NaN and Inf propagate)."""

_T = TypeVar("_T")


def device_table(ops: Mapping[str, _T]) -> dict[str, _T]:
    """Return a framework's table of reduction implementations once it is checked to cover exactly :data:`NAMES`.

    Raises:
        ValueError: a name of :data:`NAMES` is missing, or an unknown name is present.
    """
    missing, extra = set(NAMES) - set(ops), set(ops) - set(NAMES)
    if missing or extra:
        raise ValueError(f"reduction table: missing {sorted(missing)}, unknown {sorted(extra)}")
    return {name: ops[name] for name in NAMES}


def _prepared(value: np.ndarray, absolute: bool) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "fc":
        arr = arr.astype(np.float64)
    return np.abs(arr) if absolute else arr


def _impl(name: str) -> _Impl:
    impl = _NUMPY.get(name)
    if impl is None:
        Reduction(name)  # raises the ValueError naming the allowed ones
    return _NUMPY[name]


def reduce(value: np.ndarray, name: str, absolute: bool = False) -> float:
    """Return one reduction of an array, accumulated in float64 (NaN of an empty array).

    Args:
        value: the array.
        name: one of :data:`NAMES`.
        absolute: reduce ``abs(value)`` instead.

    Raises:
        ValueError: an unknown reduction name.

    Example:
        >>> reduce(np.array([-3.0, 4.0]), "l2"), reduce(np.array([-3.0, 4.0]), "mean", absolute=True)
        (5.0, 3.5)
    """
    impl = _impl(name)
    arr = _prepared(value, absolute)
    if arr.size == 0:
        return math.nan
    return float(impl(arr, None))


def reduce_rows(rows: np.ndarray, name: str, absolute: bool = False) -> np.ndarray:
    """Return one reduction of each row of a 2-D array (one row per step), equal to :func:`reduce` per row.

    Real and integer rows only (complex values go through :func:`reduce`); the result is float64.

    Raises:
        ValueError: an unknown reduction name.

    Example:
        >>> reduce_rows(np.array([[1.0, -3.0], [2.0, 2.0]], dtype=np.float32), "mean", absolute=True).tolist()
        [2.0, 2.0]
    """
    impl = _impl(name)
    arr = _prepared(rows, absolute)
    if arr.shape[1] == 0:
        return np.full(arr.shape[0], math.nan)
    return np.asarray(impl(arr, 1), dtype=np.float64)
