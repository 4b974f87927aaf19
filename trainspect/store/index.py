"""The in-memory index a Trial keeps (steps, modes, where each tensor of a step lives) and the readers that fill it."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

import numpy as np

from trainspect.collections import Collection
from trainspect.modes import ModeKeys
from trainspect.store.index_entry import Entry

if TYPE_CHECKING:
    from trainspect.store.index_batch import IndexBatch
    from trainspect.store.scalar_series import ScalarSeries

__all__ = ["Entry", "StepInfo", "TrialIndex"]

_MODES = {int(m): m for m in ModeKeys}


@dataclass(slots=True)
class StepInfo:
    """One global step: its mode, mode step, wall time and the workers that wrote it."""

    mode: ModeKeys
    mode_step: int
    wall_time: float
    workers: set[str] = field(default_factory=set)


class TrialIndex:
    """Steps and tensor locations, filled incrementally by a source.

    A source adds steps and entries one by one (:meth:`add_step`, :meth:`add_tensor`) or a whole read at once as
    columns (:meth:`add_batch`). The per-step objects of a batch (``steps``, ``by_mode``, ``tensors``) are made the
    first time one of them is asked for; ``sorted_steps``, ``workers`` and the tensor names are kept up to date at
    once, and :meth:`step_columns` and :meth:`scalar_series` answer from the columns without making them.
    """

    def __init__(self) -> None:
        self._steps: dict[int, StepInfo] = {}
        self.sorted_steps: list[int] = []
        self._tensors: dict[str, dict[int, dict[str, Entry]]] = {}
        self._by_mode: dict[ModeKeys, dict[int, int]] = {}
        self.workers: set[str] = set()
        self._batches: list[IndexBatch] = []
        self._applied = 0  # batches whose objects were made
        self._names: dict[str, None] = {}
        self._object_names: set[str] = set()
        self._direct = False  # something was added one by one: the columns do not hold everything
        self._known: np.ndarray = np.zeros(0, dtype=np.int64)

    # --- the per-step objects (made from the batches when first asked for) -----------------------------
    @property
    def steps(self) -> dict[int, StepInfo]:
        """Global step -> its :class:`StepInfo`."""
        if self._applied < len(self._batches):
            self._materialize()
        return self._steps

    @property
    def tensors(self) -> dict[str, dict[int, dict[str, Entry]]]:
        """Tensor name -> global step -> worker -> :class:`Entry`."""
        if self._applied < len(self._batches):
            self._materialize()
        return self._tensors

    @property
    def by_mode(self) -> dict[ModeKeys, dict[int, int]]:
        """Mode -> mode step -> global step."""
        if self._applied < len(self._batches):
            self._materialize()
        return self._by_mode

    def _materialize(self) -> None:
        """Make the objects of the batches not made yet, as adding their records one by one would have."""
        while self._applied < len(self._batches):
            batch = self._batches[self._applied]
            self._applied += 1
            steps, by_mode, worker = self._steps, self._by_mode, batch.worker
            for gs, code, mode_step, wall in batch.rows():
                info = steps.get(gs)
                if info is None:
                    mode = _MODES[code]
                    info = steps[gs] = StepInfo(mode, mode_step, wall)
                    by_mode.setdefault(mode, {})[mode_step] = gs
                info.workers.add(worker)
            for name, gs, entry in batch.entries():
                self._put_tensor(name, gs, worker, entry)

    # --- adding -----------------------------------------------------------------------------------------
    def add_step(self, worker: str, global_step: int, mode: ModeKeys, mode_step: int, wall_time: float) -> None:
        """Record that ``worker`` wrote ``global_step``."""
        self._direct = True
        steps = self.steps
        info = steps.get(global_step)
        if info is None:
            info = StepInfo(mode, mode_step, wall_time)
            steps[global_step] = info
            if not self.sorted_steps or global_step > self.sorted_steps[-1]:
                self.sorted_steps.append(global_step)
            else:
                bisect.insort(self.sorted_steps, global_step)
            self._by_mode.setdefault(mode, {})[mode_step] = global_step
        info.workers.add(worker)
        self.workers.add(worker)

    def add_tensor(self, name: str, global_step: int, worker: str, entry: Entry) -> None:
        """Record where a tensor of a step is."""
        self._direct = True
        if self._applied < len(self._batches):
            self._materialize()
        self._names.setdefault(name, None)
        self._put_tensor(name, global_step, worker, entry)

    def _put_tensor(self, name: str, global_step: int, worker: str, entry: Entry) -> None:
        per_name = self._tensors.get(name)
        if per_name is None:
            per_name = self._tensors[name] = {}
        per_step = per_name.get(global_step)
        if per_step is None:
            per_name[global_step] = {worker: entry}  # one dict per (tensor, step): no throw-away defaults
        else:
            per_step[worker] = entry

    def add_batch(self, batch: IndexBatch) -> None:
        """Add the records of one read (their objects are made when first asked for)."""
        if not len(batch):
            return
        self._batches.append(batch)
        self.workers.add(batch.worker)
        for name in batch.names:
            self._names.setdefault(name, None)
        self._object_names |= batch.object_names()
        if len(self._known) != len(self.sorted_steps):
            self._known = np.asarray(self.sorted_steps, dtype=np.int64)
        new = np.unique(batch.steps)
        if self._known.size:
            new = new[~np.isin(new, self._known)]
        if not new.size:
            return
        if not self.sorted_steps or new[0] > self.sorted_steps[-1]:
            self.sorted_steps.extend(new.tolist())
        else:
            self.sorted_steps[:] = np.union1d(self._known, new).tolist()
        self._known = np.concatenate([self._known, new]) if self._known.size else new
        if self._known.size > 1 and not bool(np.all(self._known[1:] > self._known[:-1])):
            self._known = np.sort(self._known)

    # --- answered from the columns ----------------------------------------------------------------------
    def tensor_names(self) -> list[str]:
        """The names of the saved tensors (in the order first seen)."""
        return list(self._names)

    def has_tensor(self, name: str) -> bool:
        """Whether a tensor was saved."""
        return name in self._names

    @property
    def columnar(self) -> bool:
        """Whether everything was added as batches (then :meth:`step_columns` and :meth:`scalar_series` answer)."""
        return not self._direct

    def step_columns(self, steps: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """The mode codes, mode steps and wall times of saved global ``steps`` (None unless :attr:`columnar`)."""
        if self._direct:
            return None
        if not self._batches:
            empty = np.zeros(0, dtype=np.int64)
            return empty, empty.copy(), np.zeros(0)
        every = [b.steps for b in self._batches]
        all_steps = np.concatenate(every) if len(every) > 1 else every[0]
        unique, first = np.unique(all_steps, return_index=True)  # the first record of a step gives its info
        at = first[np.searchsorted(unique, steps)]
        cat = (lambda key: np.concatenate([getattr(b, key) for b in self._batches])) if len(every) > 1 else None
        only = self._batches[0]
        modes = cat("modes") if cat else only.modes
        mode_steps = cat("mode_steps") if cat else only.mode_steps
        walls = cat("walls") if cat else only.walls
        return modes[at], mode_steps[at], walls[at]

    def scalar_series(self, name: str, worker: str | None = None) -> ScalarSeries | None:
        """A tensor whose every entry is a one-element float, as columns (None when it is not, or not known).

        The steps (sorted) at which ``worker`` saved it (without a worker: the first worker by name that did, as
        :meth:`~trainspect.store.tensor.Tensor.values_at` picks), with the entry its latest record gives.
        """
        if self._direct or name in self._object_names or name not in self._names:
            return None
        return scalar_series(self._batches, name, worker)

    def worker_counts(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The sorted saved steps and how many workers wrote each (None unless :attr:`columnar`)."""
        if self._direct:
            return None
        if not self._batches:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        codes = {w: i for i, w in enumerate(sorted({b.worker for b in self._batches}))}
        k = max(1, len(codes))
        steps = np.concatenate([b.steps for b in self._batches])
        who = np.concatenate([np.full(len(b), codes[b.worker], dtype=np.int64) for b in self._batches])
        unique, counts = np.unique(np.unique(steps * k + who) // k, return_counts=True)
        return unique, counts


def scalar_series(batches: list[IndexBatch], name: str, worker: str | None) -> ScalarSeries | None:
    """See :meth:`TrialIndex.scalar_series` (imported late: the columns' module loads with the first batch)."""
    from trainspect.store.scalar_series import series_of

    return series_of(batches, name, worker)


class Source(Protocol):
    """What a Trial reads from, filling its index: a trainspect run directory or an smdebug trial directory.

    Also importable from :mod:`trainspect.store.trial`.
    """

    corrupt_records: int
    problems: list[str]

    def refresh(self, index: TrialIndex) -> int: ...
    def ended(self) -> bool: ...
    def read(self, entry: Entry) -> np.ndarray: ...
    def collections(self) -> dict[str, Collection]: ...
    def worker_names(self) -> list[str]: ...
    def close(self) -> None: ...
