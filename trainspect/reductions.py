"""Reductions: the one list of names, the one key type, and the NumPy implementations.

A reduction is a name from :data:`NAMES` taken over the values or over their absolute values. Its key type is
:class:`Reduction`, a named tuple ``(name, absolute)`` that is written ``"abs_mean"`` in run directories, configs
and rule requirements (:attr:`Reduction.key`, :meth:`Reduction.parse`). The rules and the Trial compute reductions
with :func:`reduce` and :func:`reduce_rows`; the hooks compute the same ones on the device, with tables checked
against :data:`NAMES` by :func:`device_table`.

A sharded tensor's reductions are combined from its pieces' partial statistics (:data:`trainspect.shard.PARTIAL_KEYS`):
:func:`partials_of` is their reference definition, :func:`combine_partials` joins the pieces' and
:func:`reduce_from_partials` turns them into any reduction, equal to :func:`reduce` of the full array.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
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
    "partials_of",
    "combine_partials",
    "reduce_from_partials",
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


def partials_of(value: np.ndarray) -> dict[str, float]:
    """Return the partial statistics of one piece of a sharded tensor: the reference the hooks compute on the device.

    Every statistic is taken over the piece's elements as float64 (integers and booleans converted, as :func:`reduce`
    does; NaN and Inf propagate as NumPy's reductions propagate them):

    * ``count``: the number of elements, ``n``.
    * ``sum``: ``sum(x)``; ``sum_sq``: ``sum(x * x)``.
    * ``m2``: ``sum((x - mean) ** 2)`` with ``mean = sum(x) / n``: the squared deviations from the piece's own mean
      (``variance * n``).
    * ``min``, ``max``: of ``x``.
    * ``abs_sum``: ``sum(|x|)``; ``abs_m2``: ``sum((|x| - abs_mean) ** 2)`` with ``abs_mean = abs_sum / n``;
      ``abs_min``, ``abs_max``: of ``|x|``.
    * ``prod``: ``prod(x)``.

    An empty piece is ``{"count": 0.0}`` and nothing else.

    Raises:
        ValueError: a complex array (its partial statistics are not defined).

    Example:
        >>> p = partials_of(np.array([-1.0, 3.0]))
        >>> p["sum"], p["m2"], p["abs_min"], p["prod"]
        (2.0, 8.0, 1.0, -3.0)
    """
    arr = _prepared(value, False).reshape(-1)
    if arr.dtype.kind == "c":
        raise ValueError("partial statistics of a complex array are not defined")
    arr = arr.astype(np.float64, copy=False)
    if arr.size == 0:
        return {"count": 0.0}
    with np.errstate(all="ignore"):  # NaN and Inf propagate quietly
        return _statistics(arr)


def _statistics(arr: np.ndarray) -> dict[str, float]:
    mag = np.abs(arr)
    dev, abs_dev = arr - arr.mean(), mag - mag.mean()
    return {
        "count": float(arr.size),
        "sum": float(arr.sum()),
        "sum_sq": float(np.square(arr).sum()),
        "m2": float(np.square(dev).sum()),
        "min": float(arr.min()),
        "max": float(arr.max()),
        "abs_sum": float(mag.sum()),
        "abs_m2": float(np.square(abs_dev).sum()),
        "abs_min": float(mag.min()),
        "abs_max": float(mag.max()),
        "prod": float(arr.prod()),
    }


_COMBINE: dict[str, Callable[[np.ndarray], Any]] = {
    "sum": np.add.reduce,
    "sum_sq": np.add.reduce,
    "abs_sum": np.add.reduce,
    "min": np.minimum.reduce,
    "max": np.maximum.reduce,
    "abs_min": np.minimum.reduce,
    "abs_max": np.maximum.reduce,
    "prod": np.multiply.reduce,
}
"""How the statistics other than ``count`` and the ``m2`` ones combine (NaN propagates through all of them)."""
_M2 = {"m2": "sum", "abs_m2": "abs_sum"}
"""Each squared-deviation statistic and the sum its mean comes from."""


def combine_partials(pieces: Iterable[Mapping[str, float]]) -> dict[str, float]:
    """Return the partial statistics of the concatenation of pieces, from theirs (:func:`partials_of`).

    Sums add, extremes take the extreme, products multiply; ``m2`` and ``abs_m2`` combine as Chan, Golub and LeVeque's
    parallel variance ("Updating formulae and a pairwise algorithm for computing sample variances", 1979) for k
    pieces at once: ``M2 = sum(M2_i) + sum(n_i * (mean_i - mean) ** 2)``. Empty pieces are left out; a statistic
    missing from some non-empty piece is missing from the result.

    Example:
        >>> a, b = np.array([1.0, 2.0]), np.array([4.0])
        >>> combine_partials([partials_of(a), partials_of(b)])["m2"] == partials_of(np.array([1.0, 2.0, 4.0]))["m2"]
        True
    """
    full = [p for p in pieces if p.get("count", 0.0) > 0]
    out = {"count": float(sum(p["count"] for p in full))}
    if full:
        with np.errstate(all="ignore"):  # NaN and Inf propagate quietly
            _combine(full, out)
    return out


def _combine(full: list[Mapping[str, float]], out: dict[str, float]) -> None:
    for key, combine in _COMBINE.items():
        if all(key in p for p in full):
            out[key] = float(combine(np.array([p[key] for p in full], dtype=np.float64)))
    counts = np.array([p["count"] for p in full], dtype=np.float64)
    for key, total in _M2.items():
        if total in out and all(key in p for p in full):
            means = np.array([p[total] for p in full], dtype=np.float64) / counts
            spread = np.square(means - out[total] / out["count"])
            out[key] = float(np.add.reduce([p[key] for p in full]) + np.add.reduce(counts * spread))


_FROM_PARTIALS: dict[str, tuple[str, str, Callable[[float, float], float]]] = {
    # name: (statistic, statistic of the abs_ form, value from (statistic, count))
    "min": ("min", "abs_min", lambda v, n: v),
    "max": ("max", "abs_max", lambda v, n: v),
    "mean": ("sum", "abs_sum", lambda v, n: v / n),
    "variance": ("m2", "abs_m2", lambda v, n: v / n),
    "std": ("m2", "abs_m2", lambda v, n: math.sqrt(v / n)),
    "sum": ("sum", "abs_sum", lambda v, n: v),
    "prod": ("prod", "prod", lambda v, n: v),
    "l1": ("abs_sum", "abs_sum", lambda v, n: v),
    "l2": ("sum_sq", "sum_sq", lambda v, n: math.sqrt(v)),
}
"""Each reduction of :data:`NAMES` from the partial statistics (``abs_prod`` is ``|prod|``)."""


def reduce_from_partials(partials: Mapping[str, float], name: str, absolute: bool = False) -> float:
    """Return one reduction from partial statistics: :func:`reduce` of the array they describe (NaN when empty).

    ``std`` and ``variance`` are the population ones, as :func:`reduce` computes them.

    Args:
        partials: statistics of :func:`partials_of` or :func:`combine_partials`.
        name: one of :data:`NAMES`.
        absolute: reduce ``abs(value)`` instead.

    Raises:
        ValueError: an unknown reduction name.
        KeyError: a statistic the reduction needs is missing.

    Example:
        >>> p = combine_partials([partials_of(np.array([-3.0])), partials_of(np.array([4.0]))])
        >>> reduce_from_partials(p, "l2"), reduce_from_partials(p, "mean", absolute=True)
        (5.0, 3.5)
    """
    _impl(name)  # an unknown name raises the ValueError naming the allowed ones
    count = partials["count"]
    if count <= 0:
        return math.nan
    stat, abs_stat, compute = _FROM_PARTIALS[name]
    value = float(partials[abs_stat if absolute else stat])
    if absolute and name == "prod":
        value = abs(value)
    return float(compute(value, count))
