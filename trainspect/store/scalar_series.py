"""One tensor's one-element float values over a run, read from the index's columns (issue 30).

What :meth:`~trainspect.store.tensor.Tensor.values_at` gives for such a tensor, without a Python object per step:
the steps at which a worker saved it, and each step's value as its dtype holds it (widened to float64).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from trainspect.store.index_batch import IndexBatch

__all__ = ["ScalarSeries", "series_of"]


@dataclass(frozen=True)
class ScalarSeries:
    """A tensor's values at its saved steps (sorted), each as its dtype holds it, widened to float64.

    ``raw`` holds the values as the index stored them; ``dtype`` and ``shape`` index ``dtypes`` and ``shapes``:
    the dtype and shape of each step's value.
    """

    name: str
    steps: np.ndarray
    values: np.ndarray
    raw: np.ndarray
    dtype: np.ndarray
    shape: np.ndarray
    dtypes: list[str]
    shapes: list[tuple[int, ...]]

    def __len__(self) -> int:
        return int(self.steps.size)

    def within(self, wanted: np.ndarray) -> ScalarSeries:
        """The steps among ``wanted`` (sorted global steps) only."""
        keep = np.isin(self.steps, wanted)
        if bool(keep.all()):
            return self
        return ScalarSeries(
            self.name,
            self.steps[keep],
            self.values[keep],
            self.raw[keep],
            self.dtype[keep],
            self.shape[keep],
            self.dtypes,
            self.shapes,
        )

    def value(self, i: int) -> np.ndarray:
        """The value of the ``i``-th step as the Trial reads it (an array of its dtype and shape)."""
        dtype, shape = np.dtype(self.dtypes[int(self.dtype[i])]), self.shapes[int(self.shape[i])]
        return np.array(float(self.raw[i]), dtype=dtype).reshape(shape)


def series_of(batches: list[IndexBatch], name: str, worker: str | None) -> ScalarSeries | None:
    """:meth:`~trainspect.store.index.TrialIndex.scalar_series` over ``batches`` (in the order they were read)."""
    parts = []
    ranks = {w: i for i, w in enumerate(sorted({b.worker for b in batches}))}
    dtypes: dict[str, int] = {}
    shapes: dict[tuple[int, ...], int] = {}
    for batch in batches:
        nid = batch.name_ids.get(name)
        if nid is None or (worker is not None and batch.worker != worker):
            continue
        sel = np.flatnonzero(batch.entry_name == nid)
        dmap = np.array([dtypes.setdefault(d, len(dtypes)) for d in batch.dtypes], dtype=np.int64)
        smap = np.array([shapes.setdefault(s, len(shapes)) for s in batch.shapes], dtype=np.int64)
        rank = np.full(sel.size, ranks[batch.worker], dtype=np.int64)
        parts.append(
            (
                batch.steps[batch.entry_rec[sel]],
                rank,
                batch.values[sel],
                dmap[batch.entry_dtype[sel]],
                smap[batch.entry_shape[sel]],
            )
        )
    if not parts:
        return None
    steps, rank, raw, dtype, shape = (np.concatenate(col) for col in zip(*parts, strict=True))
    order = np.arange(steps.size)
    # per step: the first worker by name, and of its entries the latest (a step written again replaces it)
    pick = np.lexsort((-order, rank, steps))
    first = np.ones(pick.size, dtype=bool)
    first[1:] = steps[pick][1:] != steps[pick][:-1]
    at = pick[first]
    names, shape_list = list(dtypes), list(shapes)
    values = raw[at].copy()
    dtype, shape = dtype[at], shape[at]
    for code, text in enumerate(names):
        where = dtype == code
        if text != "<f8" and bool(where.any()):
            values[where] = values[where].astype(np.dtype(text)).astype(np.float64)
    return ScalarSeries(name, steps[at], values, raw[at], dtype, shape, names, shape_list)
