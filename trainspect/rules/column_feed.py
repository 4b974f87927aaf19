"""The offline feed's columnar read (issue 30): steps and scalar series straight from a Trial's index columns.

A trainspect Trial keeps its index records as columns (:class:`~trainspect.store.index.TrialIndex`); a tensor whose
every entry is a one-element float (a loss, a metric) is then read as arrays, with no Python object per step, and
handed to the rules as :class:`~trainspect.rules.columns.Columns`. The records a rule fed step by step would read
are made on demand, the same as :meth:`~trainspect.rules.trial_feed.TrialFeed.fetch_chunk` makes them.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, overload

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.reductions import reduce
from trainspect.rules.columns import RoleColumn
from trainspect.step import ReductionKey, TensorRecord
from trainspect.store.index import TrialIndex
from trainspect.store.scalar_series import ScalarSeries

__all__ = ["StepTable", "ColumnPlan", "ColumnSeries", "index_of"]

_MODES = {int(m): m for m in ModeKeys}
Info = tuple[ModeKeys, int, float]


def index_of(trial: Any) -> TrialIndex | None:
    """The trial's index when it holds everything as columns (a trainspect Trial), else None."""
    index = getattr(trial, "_index", None)
    return index if isinstance(index, TrialIndex) and index.columnar else None


class StepTable(Sequence[Info]):
    """Steps with their mode, mode step and wall time, as arrays; item ``i`` is ``(mode, mode step, wall time)``."""

    def __init__(self, steps: np.ndarray, codes: np.ndarray, mode_steps: np.ndarray, walls: np.ndarray) -> None:
        self.steps, self.codes, self.mode_steps, self.walls = steps, codes, mode_steps, walls

    @classmethod
    def of(cls, steps: Sequence[int], infos: Sequence[Info]) -> StepTable:
        """From ``(mode, mode step, wall time)`` tuples."""
        n = len(infos)
        return cls(
            np.fromiter(steps, dtype=np.int64, count=n),
            np.fromiter((int(i[0]) for i in infos), dtype=np.int64, count=n),
            np.fromiter((i[1] for i in infos), dtype=np.int64, count=n),
            np.fromiter((i[2] for i in infos), dtype=np.float64, count=n),
        )

    def __len__(self) -> int:
        return int(self.steps.size)

    @overload
    def __getitem__(self, i: int) -> Info: ...
    @overload
    def __getitem__(self, i: slice) -> StepTable: ...
    def __getitem__(self, i: int | slice) -> Info | StepTable:
        if isinstance(i, slice):
            return StepTable(self.steps[i], self.codes[i], self.mode_steps[i], self.walls[i])
        return _MODES[int(self.codes[i])], int(self.mode_steps[i]), float(self.walls[i])

    def __iter__(self) -> Iterator[Info]:
        modes = [_MODES[c] for c in self.codes.tolist()]
        return iter(zip(modes, self.mode_steps.tolist(), self.walls.tolist(), strict=True))

    def modes(self) -> list[ModeKeys]:
        """The mode of each step."""
        return [_MODES[c] for c in self.codes.tolist()]

    def mode_name(self, step: int) -> str | None:
        """The name of a step's mode (None when the step is not in the table)."""
        at = int(np.searchsorted(self.steps, step))
        if at < len(self) and int(self.steps[at]) == step:
            return _MODES[int(self.codes[at])].name
        return None


class ColumnPlan:
    """How one tensor is read as columns over an evaluation: its series, restricted to the evaluated steps."""

    def __init__(self, name: str, series: ScalarSeries, reductions: set[ReductionKey], colls: frozenset[str]) -> None:
        self.name, self.series, self.reductions, self.colls = name, series, reductions, colls

    @classmethod
    def make(
        cls, index: TrialIndex, name: str, worker: str | None, need: Any, colls: frozenset[str], wanted: np.ndarray
    ) -> ColumnPlan | None:
        """The plan, when the tensor's raw value is needed and every entry of it is a one-element float."""
        if not need.raw:
            return None
        series = index.scalar_series(name, worker)
        return None if series is None else cls(name, series.within(wanted), set(need.reductions), colls)

    def step_bytes(self) -> int:
        """What :meth:`~trainspect.rules.trial_feed._Plan.step_bytes` says of a one-element value."""
        return 8 if len(self.series) else 0

    def chunk(self, chunk: list[int]) -> ColumnSeries:
        """The series over ``chunk`` (sorted global steps)."""
        if not chunk:
            return ColumnSeries(self, 0, 0)
        steps = self.series.steps
        lo, hi = int(np.searchsorted(steps, chunk[0], "left")), int(np.searchsorted(steps, chunk[-1], "right"))
        return ColumnSeries(self, lo, hi)


class ColumnSeries(Mapping[int, TensorRecord]):
    """One tensor's records over a chunk, as ``{step: record}`` (each made when read) and as one column."""

    def __init__(self, plan: ColumnPlan, lo: int, hi: int) -> None:
        self._plan, self._lo, self._hi = plan, lo, hi
        self._steps = plan.series.steps[lo:hi]
        self._made: dict[int, TensorRecord] = {}
        self._where: dict[int, int] | None = None

    def __len__(self) -> int:
        return int(self._steps.size)

    def __iter__(self) -> Iterator[int]:
        return iter(self._steps.tolist())

    def __getitem__(self, step: int) -> TensorRecord:
        made = self._made.get(step)
        if made is not None:
            return made
        if self._where is None:
            self._where = {s: i for i, s in enumerate(self._steps.tolist(), start=self._lo)}
        at = self._where.get(step)
        if at is None:
            raise KeyError(step)
        plan = self._plan
        value = plan.series.value(at)
        reduced = {key: reduce(value, *key) for key in plan.reductions}
        made = self._made[step] = TensorRecord(plan.name, value, reduced, plan.colls, tuple(value.shape))
        return made

    def role_column(self, chunk: list[int]) -> RoleColumn:
        """The column of ``chunk`` (:func:`~trainspect.rules.columns.scalar_column` of these records)."""
        n = len(chunk)
        values = np.full(n, math.nan)
        present = np.zeros(n, dtype=bool)
        if not self._steps.size:
            return RoleColumn("", values, present, "")
        at = np.searchsorted(np.asarray(chunk, dtype=np.int64), self._steps)
        values[at] = self._plan.series.values[self._lo : self._hi]
        present[at] = True
        return RoleColumn(self._plan.name, values, present, "f")
