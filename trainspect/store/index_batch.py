"""The index records of one read, as columns (issue 30): steps and one-element float entries as arrays, not objects.

A source hands the :class:`~trainspect.store.index.TrialIndex` one :class:`IndexBatch` per index file read: one row
per record (global step, mode, mode step, wall time) and one per tensor entry (its record, its name). Entries that
hold one floating-point value in the index itself (losses, metrics: the common case) are kept as numbers; any other
entry (raw values in a data file, saved reductions, shards) is kept as its :class:`~trainspect.store.index.Entry`.
The index builds its per-step objects from the batches only when something asks for them; the offline rules read
scalar series straight from the columns (:meth:`~trainspect.store.index.TrialIndex.scalar_series`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from trainspect.store.index_entry import Entry, is_float_dtype

if TYPE_CHECKING:
    from trainspect.store.quick_scan import Layout

__all__ = ["IndexBatch", "BatchBuilder", "is_float_dtype"]


@dataclass
class IndexBatch:
    """The records of one worker read at once, as columns.

    Attributes:
        worker: the worker that wrote them.
        steps, modes, mode_steps, walls: one row per record (int64, int64 mode codes, int64, float64).
        entry_rec: the record (row) of each tensor entry, in file order (int64).
        entry_name: the name of each entry (an index into ``names``).
        values: the value of each one-element float entry (NaN for the others; float64, as parsed).
        entry_dtype, entry_shape: each entry's dtype and shape (indices into ``dtypes`` and ``shapes``).
        entry_obj: -1 for a one-element float entry, else the index of its :class:`Entry` in ``objects``.
    """

    worker: str
    steps: np.ndarray
    modes: np.ndarray
    mode_steps: np.ndarray
    walls: np.ndarray
    entry_rec: np.ndarray
    entry_name: np.ndarray
    values: np.ndarray
    entry_dtype: np.ndarray
    entry_shape: np.ndarray
    entry_obj: np.ndarray
    names: list[str]
    dtypes: list[str]
    shapes: list[tuple[int, ...]]
    objects: list[Entry]
    name_ids: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.steps.size)

    def object_names(self) -> set[str]:
        """The names that have at least one entry that is not a one-element float."""
        return {self.names[i] for i in np.unique(self.entry_name[self.entry_obj >= 0]).tolist()}

    def entries(self) -> list[tuple[str, int, Entry]]:
        """Every entry as ``(name, global step, Entry)``, in file order (the Entry objects are made here)."""
        names, dtypes, shapes, objects = self.names, self.dtypes, self.shapes, self.objects
        steps = self.steps[self.entry_rec].tolist()
        out = []
        for name, step, value, dtype, shape, obj in zip(
            self.entry_name.tolist(),
            steps,
            self.values.tolist(),
            self.entry_dtype.tolist(),
            self.entry_shape.tolist(),
            self.entry_obj.tolist(),
            strict=True,
        ):
            entry = objects[obj] if obj >= 0 else Entry(None, 0, 0, dtypes[dtype], shapes[shape], None, inline=value)
            out.append((names[name], step, entry))
        return out

    def rows(self) -> list[tuple[int, int, int, float]]:
        """Every record as ``(global step, mode code, mode step, wall time)``, in file order."""
        return list(
            zip(self.steps.tolist(), self.modes.tolist(), self.mode_steps.tolist(), self.walls.tolist(), strict=True)
        )


class BatchBuilder:
    """Collects the records of one worker's read, then :meth:`build` makes the :class:`IndexBatch`."""

    def __init__(self, worker: str) -> None:
        self.worker = worker
        self._rows: list[tuple[int, int, int, float]] = []
        self._rec: list[int] = []
        self._name: list[int] = []
        self._value: list[float] = []
        self._dtype: list[int] = []
        self._shape: list[int] = []
        self._obj: list[int] = []
        self._objects: list[Entry] = []
        self._names: dict[str, int] = {}
        self._dtypes: dict[str, int] = {}
        self._shapes: dict[tuple[int, ...], int] = {}
        self._parts: list[tuple[np.ndarray, ...]] = []  # records added before, as the columns of IndexBatch

    def record(self, step: int, mode: int, mode_step: int, wall: float) -> None:
        """Start a record (its entries follow)."""
        self._rows.append((step, mode, mode_step, wall))

    def _id(self, table: dict[Any, int], key: Any) -> int:
        found = table.get(key)
        if found is None:
            found = table[key] = len(table)
        return found

    def scalar(self, name: str, value: float, dtype: str, shape: tuple[int, ...]) -> None:
        """A one-element float entry of the current record."""
        self._rec.append(len(self._rows) - 1)
        self._name.append(self._id(self._names, name))
        self._value.append(value)
        self._dtype.append(self._id(self._dtypes, dtype))
        self._shape.append(self._id(self._shapes, shape))
        self._obj.append(-1)

    def entry(self, name: str, entry: Entry) -> None:
        """Any other entry of the current record."""
        self._rec.append(len(self._rows) - 1)
        self._name.append(self._id(self._names, name))
        self._value.append(float("nan"))
        self._dtype.append(0)
        self._shape.append(0)
        self._obj.append(len(self._objects))
        self._objects.append(entry)

    def layout(self, lay: Layout, lo: int, hi: int) -> None:
        """Records ``lo:hi`` of a bulk parse (:func:`~trainspect.store.quick_scan.parse_layout`), all parsed there."""
        self._flush()
        a, b = int(lay.entry_start[lo]), int(lay.entry_start[hi])
        rec = np.repeat(np.arange(hi - lo), np.diff(lay.entry_start[lo : hi + 1]))
        ids = [
            self._remap(table, keys, col[a:b])
            for table, keys, col in (
                (self._names, lay.names, lay.name),
                (self._dtypes, lay.dtypes, lay.dtype),
                (self._shapes, lay.shapes, lay.shape),
            )
        ]
        self._parts.append(
            (
                lay.steps[lo:hi],
                lay.modes[lo:hi],
                lay.mode_steps[lo:hi],
                lay.walls[lo:hi],
                rec,
                ids[0],
                lay.values[a:b],
                ids[1],
                ids[2],
                np.full(b - a, -1, dtype=np.int64),
            )
        )

    def _remap(self, table: dict[Any, int], keys: list[Any], codes: np.ndarray) -> np.ndarray:
        """``codes`` (indices into ``keys``) as indices into ``table``, new keys added in the order first used."""
        if not codes.size:
            return codes
        used, first = np.unique(codes, return_index=True)
        remap = np.zeros(len(keys), dtype=np.int64)
        for code in used[np.argsort(first, kind="stable")].tolist():
            remap[code] = self._id(table, keys[code])
        return remap[codes]

    def _flush(self) -> None:
        """Turn the records added one by one so far into a part."""
        if not self._rows:
            return
        n, ints = len(self._rows), np.int64
        steps, modes, mode_steps, walls = zip(*self._rows, strict=True)
        self._parts.append(
            (
                np.fromiter(steps, dtype=ints, count=n),
                np.fromiter(modes, dtype=ints, count=n),
                np.fromiter(mode_steps, dtype=ints, count=n),
                np.fromiter(walls, dtype=np.float64, count=n),
                np.array(self._rec, dtype=ints),
                np.array(self._name, dtype=ints),
                np.array(self._value, dtype=np.float64),
                np.array(self._dtype, dtype=ints),
                np.array(self._shape, dtype=ints),
                np.array(self._obj, dtype=ints),
            )
        )
        self._rows, self._rec, self._name, self._value, self._dtype, self._shape, self._obj = [], [], [], [], [], [], []

    def build(self) -> IndexBatch | None:
        """The batch (None when no record was added)."""
        self._flush()
        parts = self._parts
        if not parts:
            return None
        if len(parts) == 1:
            cols = list(parts[0])
        else:
            offsets = np.cumsum([0] + [part[0].size for part in parts[:-1]])
            cols = [np.concatenate([part[i] for part in parts]) for i in range(10)]
            cols[4] = np.concatenate([part[4] + off for part, off in zip(parts, offsets.tolist(), strict=True)])
        steps, modes, mode_steps, walls, rec, name, value, dtype, shape, obj = cols
        return IndexBatch(
            self.worker,
            steps,
            modes,
            mode_steps,
            walls,
            rec,
            name,
            value,
            dtype,
            shape,
            obj,
            list(self._names),
            list(self._dtypes) or [""],
            list(self._shapes) or [()],
            self._objects,
            dict(self._names),
        )
