"""Whole columns of scalar steps for tensor rules: the offline feed's fast path (issue 30).

Feeding a rule step by step costs a few microseconds per rule and step in Python; a loss-only run of 100,000 steps
judged by the default rules spent nearly all its time there. When every role of a rule holds at most one tensor, a
scalar whose raw value was read, a chunk of steps is handed over as :class:`Columns` (arrays of steps, modes, wall
times and values) and a rule that implements :meth:`~trainspect.rules.tensor_rule.TensorRule.check_columns`
judges the whole chunk at once, returning its datapoints as :class:`Checks`. The verdict is the same as step by
step would give (``tests/rules/test_columns.py`` compares both on random runs); a rule without the method, or
that declines a chunk (returns None before changing its state), is fed step by step as before.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.rules.step_data import Check, StepData
from trainspect.step import TensorRecord

__all__ = ["RoleColumn", "Columns", "Checks", "ChecksBuilder", "scalar_column"]


@dataclass(frozen=True)
class RoleColumn:
    """One role's tensor over a chunk: its name, its values (float64) and where it was saved.

    ``kind`` is the numpy dtype kind of the raw values (``"f"`` for floating-point losses); ``values`` is NaN where
    the tensor is absent (``present`` tells absence from a NaN loss).
    """

    name: str
    values: np.ndarray
    present: np.ndarray
    kind: str


@dataclass
class Columns:
    """The steps of one chunk of one worker, with each role's column.

    Args:
        steps: global steps (int64).
        modes: the mode of each step.
        mode_steps: mode steps (int64).
        walls: wall times (float64, NaN when unknown).
        worker: the worker these steps are of.
        roles: role name -> its column (a role without any tensor in the chunk is absent).
        step_data: builds the :class:`StepData` of the step at an index (the same the step-by-step feed builds).
    """

    steps: np.ndarray
    modes: list[ModeKeys]
    mode_steps: np.ndarray
    walls: np.ndarray
    worker: str
    roles: dict[str, RoleColumn]
    step_data: Callable[[int], StepData]
    _codes: np.ndarray | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return int(self.steps.size)

    @property
    def codes(self) -> np.ndarray:
        """The modes as integers (``int(ModeKeys)``)."""
        if self._codes is None:
            self._codes = np.fromiter((int(m) for m in self.modes), dtype=np.int64, count=len(self.modes))
        return self._codes

    @property
    def seen(self) -> np.ndarray:
        """Where at least one role holds a tensor (the steps a rule that needs tensors is given)."""
        present = [col.present for col in self.roles.values()]
        if not present:
            return np.zeros(len(self), dtype=bool)
        return np.logical_or.reduce(present) if len(present) > 1 else present[0]

    def role(self, name: str = "main") -> RoleColumn | None:
        """The column of a role (None when the role holds no tensor in this chunk)."""
        return self.roles.get(name)

    def mode_runs(self, where: np.ndarray | None = None) -> Iterator[tuple[ModeKeys, np.ndarray]]:
        """Consecutive runs of one mode among the indices ``where`` (all when None): ``(mode, indices)``."""
        idx = np.flatnonzero(where) if where is not None else np.arange(len(self))
        if not idx.size:
            return
        codes = self.codes[idx]
        cuts = np.flatnonzero(np.diff(codes)) + 1
        for part in np.split(idx, cuts):
            yield self.modes[int(part[0])], part


Detail = Callable[[int], str]
Tensors = Callable[[int], tuple[str, ...]]


@dataclass
class Checks:
    """A rule's datapoints over a chunk, in step order: what :meth:`check` would have returned at each.

    Args:
        index: the index (into the chunk) of each datapoint's step, increasing.
        values: each datapoint's value (NaN is a value; see ``has_value``).
        has_value: whether each datapoint has a value (None: all have; a ``Check`` whose value is None has not).
        triggered: whether each datapoint triggered.
        detail: the detail text of the k-th datapoint (called only for the few that are shown).
        tensors: the tensors of the k-th datapoint (called only for the triggered ones).
    """

    index: np.ndarray
    values: np.ndarray
    triggered: np.ndarray
    detail: Detail
    tensors: Tensors
    has_value: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.index.size)


_NO_TENSORS: tuple[str, ...] = ()


class ChecksBuilder:
    """Collects single :class:`Check` results and vectorised blocks in step order into one :class:`Checks`."""

    def __init__(self) -> None:
        self._parts: list[Checks] = []
        self._singles: list[tuple[int, Check]] = []

    def single(self, i: int, check: Check | None) -> None:
        """Add the result of one step's :meth:`check` (None: no datapoint)."""
        if check is not None:
            self._singles.append((i, check))

    def block(self, checks: Checks) -> None:
        """Add a vectorised block (its indices follow those added before)."""
        self._flush()
        if len(checks):
            self._parts.append(checks)

    def _flush(self) -> None:
        singles, self._singles = self._singles, []
        if not singles:
            return
        checks = [c for _, c in singles]
        self._parts.append(
            Checks(
                np.fromiter((i for i, _ in singles), dtype=np.int64, count=len(singles)),
                np.array([math.nan if c.value is None else float(c.value) for c in checks], dtype=np.float64),
                np.array([bool(c.triggered) for c in checks], dtype=bool),
                lambda k: checks[k].detail,
                lambda k: tuple(checks[k].tensors),
                np.array([c.value is not None for c in checks], dtype=bool),
            )
        )

    def build(self) -> Checks:
        """The datapoints added, in order."""
        self._flush()
        parts = self._parts
        if len(parts) == 1:
            return parts[0]
        if not parts:
            empty = np.zeros(0)
            return Checks(empty.astype(np.int64), empty, empty.astype(bool), lambda _k: "", lambda _k: _NO_TENSORS)
        starts = np.cumsum([0] + [len(p) for p in parts])

        def locate(k: int) -> tuple[Checks, int]:
            j = int(np.searchsorted(starts, k, side="right")) - 1
            return parts[j], k - int(starts[j])

        def detail(k: int) -> str:
            part, at = locate(k)
            return part.detail(at)

        def tensors(k: int) -> tuple[str, ...]:
            part, at = locate(k)
            return part.tensors(at)

        has = [p.has_value if p.has_value is not None else np.ones(len(p), dtype=bool) for p in parts]
        return Checks(
            np.concatenate([p.index for p in parts]),
            np.concatenate([p.values for p in parts]),
            np.concatenate([p.triggered for p in parts]),
            detail,
            tensors,
            np.concatenate(has),
        )


def constant_tensors(names: Sequence[str]) -> Tensors:
    """A :attr:`Checks.tensors` that names the same tensors at every datapoint."""
    found = tuple(names)
    return lambda _k: found


def scalar_column(series: Mapping[int, TensorRecord], chunk: list[int]) -> RoleColumn | None:
    """One tensor's records over ``chunk`` as a column (None unless each is a raw scalar of one numeric kind).

    A series read as columns (:class:`~trainspect.rules.column_feed.ColumnSeries`) gives its column itself.
    """
    quick = getattr(series, "role_column", None)
    if quick is not None:
        return quick(chunk)  # type: ignore[no-any-return]
    n = len(chunk)
    values = np.full(n, np.nan)
    present = np.zeros(n, dtype=bool)
    name, kind = "", ""
    got = []
    for i, step in enumerate(chunk):
        rec = series.get(step)
        if rec is None:
            continue
        value = rec.value
        if type(value) is not np.ndarray or value.size != 1 or value.dtype.kind not in "fiub":
            return None
        if kind != value.dtype.kind:
            if kind:
                return None
            name, kind = rec.name, value.dtype.kind
        got.append((i, value))
    if got:
        at = np.fromiter((i for i, _ in got), dtype=np.int64, count=len(got))
        values[at] = np.concatenate([v.reshape(-1) for _, v in got]).astype(np.float64)
        present[at] = True
    return RoleColumn(name, values, present, kind)
