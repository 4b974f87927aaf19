"""Tensors of a Trial as pandas DataFrames: long form (one row per tensor, step and worker) and a wide pivot.

:func:`tensor_frame` is what :meth:`trainspect.Trial.dataframe` returns. Values are the Trial's own (those of
``trial.tensor(name).value(step)`` and ``.reduction_value(step, r)``), read in bulk: the one-element values kept in
the index (losses, metrics) are read as one column per tensor (:meth:`Tensor.values_at`), saved reductions straight
from the index.

Example:
    >>> import tempfile, trainspect as ts
    >>> from trainspect.store.run_writer import RunWriter
    >>> from trainspect.store.layout import RunLayout
    >>> from trainspect.step import StepRecord, TensorRecord
    >>> run = tempfile.mkdtemp()
    >>> w = RunWriter(RunLayout(run), "worker_0", tensorboard=False)
    >>> w.start()
    >>> for s in range(3):
    ...     rec = {"loss": TensorRecord("loss", np.float32(s))}
    ...     _ = w.submit(StepRecord(ts.ModeKeys.TRAIN, s, s, 0.0, "worker_0", rec))
    >>> w.close(end_job=True)
    >>> df = tensor_frame(ts.create_trial(run))
    >>> df[["step", "mode", "name", "value"]].to_dict("list")
    {'step': [0, 1, 2], 'mode': ['TRAIN', 'TRAIN', 'TRAIN'], 'name': ['loss', 'loss', 'loss'], 'value': [0.0, 1.0, 2.0]}
    >>> wide(df).columns.tolist()
    ['step', 'mode', 'mode_step', 'worker', 'loss']
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter, itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

import numpy as np
import pandas as pd

from trainspect.exceptions import TensorUnavailableForStep
from trainspect.modes import ModeKeys, parse_mode
from trainspect.reductions import Reduction, format_key
from trainspect.store.frame_tools import NotRecorded, choose, empty_frame

if TYPE_CHECKING:
    from trainspect.collections import Collection
    from trainspect.store.index import Entry, TrialIndex
    from trainspect.store.tensor import Tensor

__all__ = ["KEY_COLUMNS", "TENSOR_COLUMNS", "NotRecorded", "tensor_frame", "wide"]

KEY_COLUMNS = ["step", "mode", "mode_step", "worker", "name"]
"""The columns that say which row is which (``step`` is the global step, ``mode`` the mode's name)."""
TENSOR_COLUMNS = [*KEY_COLUMNS, "value"]
"""The columns of :func:`tensor_frame` without ``reductions``."""
_KEY_DTYPES = {"step": "int64", "mode": "category", "mode_step": "int64", "worker": "category", "name": "category"}
_SEP = ":"
"""Between a tensor's name and a reduction in :func:`wide`'s column names (``"gradient/w:l2"``)."""


class Trial(Protocol):
    """What the frames use of a :class:`~trainspect.store.trial.Trial` (typed here: the Trial imports this module)."""

    _index: TrialIndex

    def steps(self, mode: ModeKeys | str = ..., show_incomplete_steps: bool = ...) -> list[int]: ...
    def workers(self) -> list[str]: ...
    def collections(self) -> dict[str, Collection]: ...
    def tensor(self, name: str) -> Tensor: ...
    def tensor_names(self, *, collection: Collection | None = ...) -> list[str]: ...


def tensor_frame(
    trial: Trial,
    names: str | Sequence[str] | None = None,
    collection: str | None = None,
    mode: ModeKeys | str | None = None,
    reductions: str | Sequence[str] | None = None,
    workers: str | Sequence[str] | None = None,
    wide: bool = False,
) -> pd.DataFrame:
    """The saved tensors as a long DataFrame, one row per (tensor, step, worker), sorted by name, worker, step.

    Args:
        trial: the Trial.
        names: tensor names or ``fnmatch`` patterns (``"gradient/*"``); default every tensor (of ``collection``).
        collection: only the tensors of this collection.
        mode: only the steps of this mode (``"TRAIN"``, ``ModeKeys.EVAL``); default every mode.
        reductions: reductions (``"mean"``, ``"l2"``, ``"abs_max"``) as columns instead of ``value``, as
            ``reduction_value`` gives them (saved, else computed from the raw value; NaN where neither exists).
        workers: ``None``: the Trial's value of each step (a sharded tensor assembled, ``worker`` the first worker
            that saved it); a worker name, a list of them or ``"all"``: each worker's own value, one row each.
        wide: return :func:`wide` of the frame.

    Returns:
        Columns :data:`KEY_COLUMNS` then ``value`` (float64 for floating scalars, int64 for integer ones, bool,
        else object holding each step's array) or one float64 column per reduction. Steps are the Trial's complete
        steps; steps with no raw value (reductions only) are left out of ``value`` frames.

    Raises:
        NotRecorded: a name, worker or collection the run did not record (the message lists the recorded ones).
        ValueError: an unknown reduction (the message lists the known ones).
    """
    reds = _reductions(reductions)
    chosen = _names(trial, names, collection)
    steps = _steps(trial, mode)
    who = _workers(trial, workers)
    parts = [_tensor_rows(trial.tensor(n), steps, reds, w) for n in chosen for w in who]
    frame = _concat([p for p in parts if p is not None], reds)
    return _pivot(frame) if wide else frame


def _reductions(reductions: str | Sequence[str] | None) -> dict[str, str] | None:
    """``{column: written key}`` of the asked reductions (``{"l2": "l2", "abs_max": "abs_max"}``)."""
    if reductions is None:
        return None
    asked = [reductions] if isinstance(reductions, str) else list(reductions)
    out = {}
    for text in asked:
        red = Reduction.parse(text)
        out[text] = format_key(red.name, red.absolute)
    return out


def _names(trial: Trial, names: str | Sequence[str] | None, collection: str | None) -> list[str]:
    recorded = trial.tensor_names()
    if collection is not None:
        if recorded or trial.collections():
            recorded = trial.tensor_names(collection=_collection(trial, collection))
        where = f"in collection {collection!r}"
    else:
        where = "in this run"
    return choose(names, recorded, "tensor", where)


def _collection(trial: Trial, name: str) -> Any:
    colls = trial.collections()
    if name not in colls:
        raise NotRecorded("collection", [name], colls)
    return colls[name]


class _Steps(NamedTuple):
    """The steps a frame covers, as arrays: global step, mode code (``ModeKeys`` value), mode step."""

    step: np.ndarray
    mode: np.ndarray
    mode_step: np.ndarray

    def take(self, rows: np.ndarray) -> _Steps:
        return _Steps(self.step[rows], self.mode[rows], self.mode_step[rows])


def _steps(trial: Trial, mode: ModeKeys | str | None) -> _Steps:
    """The complete global steps of ``mode`` (all modes: None)."""
    steps = trial.steps()
    infos = list(map(trial._index.steps.__getitem__, steps))  # the index of this package: one look-up per step
    n = len(infos)
    out = _Steps(
        np.array(steps, np.int64),
        np.fromiter(map(_MODE, infos), np.int64, n),
        np.fromiter(map(_MODE_STEP, infos), np.int64, n),
    )
    if mode is None:
        return out
    return out.take(np.flatnonzero(out.mode == int(parse_mode(mode))))


def _workers(trial: Trial, workers: str | Sequence[str] | None) -> list[str | None]:
    if workers is None:
        return [None]
    if workers == "all":
        return list(trial.workers())
    return list(choose(workers, trial.workers(), "worker"))


def _tensor_rows(tensor: Tensor, steps: _Steps, reds: dict[str, str] | None, worker: str | None) -> _Part | None:
    """One tensor's rows for one worker (None: all workers, the Trial's value), or None when it has none."""
    by_step = tensor._by_step()
    sole = _sole_worker(tensor)
    mine = steps.take(np.flatnonzero(np.isin(steps.step, np.fromiter(by_step, np.int64, len(by_step)))))
    per_worker = list(map(by_step.__getitem__, mine.step.tolist()))
    if worker is not None:
        keep = [i for i, pw in enumerate(per_worker) if worker in pw]
        if len(keep) < len(per_worker):
            mine, per_worker = mine.take(np.array(keep, np.int64)), [per_worker[i] for i in keep]
    if not per_worker:
        return None
    if reds is None:
        got = _values(tensor, mine, per_worker, worker, sole)
        if got is None:
            return None
        mine, per_worker, columns = got
    else:
        columns = {
            col: _reduction_column(tensor, per_worker, mine, key, col, worker, sole) for col, key in reds.items()
        }
    who = worker if worker is not None else sole
    labels = who if who is not None else list(map(min, per_worker))
    return _Part(tensor.name, mine, labels, columns)


def _sole_worker(tensor: Tensor) -> str | None:
    """The run's one worker (each step's entries are that worker's), or None when it has several."""
    workers = tensor._index.workers
    return next(iter(workers)) if len(workers) == 1 else None


class _Part(NamedTuple):
    """The rows of one tensor (and worker) before they join the frame."""

    name: str
    steps: _Steps
    workers: str | list[str]  # one name: every row's
    columns: dict[str, np.ndarray]

    @property
    def size(self) -> int:
        return len(self.steps.step)


_MODE = attrgetter("mode")
_MODE_STEP = attrgetter("mode_step")
_INLINE = attrgetter("inline")
_DTYPE = attrgetter("dtype")
_SHAPE = attrgetter("shape")
_SHARD = attrgetter("shard")
_REDUCTIONS = attrgetter("reductions")
_MODE_NAMES = {int(m): m.name for m in ModeKeys}


def _values(
    tensor: Tensor, steps: _Steps, per_worker: list[dict[str, Entry]], worker: str | None, sole: str | None
) -> tuple[_Steps, list[dict[str, Entry]], dict[str, np.ndarray]] | None:
    """The value column of the steps with a value (the steps and their entries cut to those).

    ``sole`` (the run's one worker) only speeds up reading the index; the values are those of ``worker``.
    """
    column = _inline_column(per_worker, worker if worker is not None else sole)
    if column is not None:
        return steps, per_worker, {"value": _typed(column)}
    values = tensor.values_at(steps.step.tolist(), worker=worker)
    rows = np.flatnonzero(np.fromiter((s in values for s in steps.step.tolist()), bool, len(steps.step)))
    if not len(rows):
        return None
    kept = steps.take(rows)
    return kept, [per_worker[i] for i in rows], {"value": _value_column([values[s] for s in kept.step.tolist()])}


def _inline_column(per_worker: list[dict[str, Entry]], worker: str | None) -> np.ndarray | None:
    """Every step's value when all are unsharded values of one dtype and shape kept in the index, else None.

    Read as :meth:`Tensor.values_at` reads them (one array of that dtype), so the values are the same.
    """
    if worker is None:
        entries = [e for pw in per_worker for e in pw.values()]
        if len(entries) != len(per_worker):
            return None  # several workers at some step: a sharded tensor, or the first worker's value
    else:
        entries = [pw[worker] for pw in per_worker]
    inline = list(map(_INLINE, entries))
    dtypes, shapes = set(map(_DTYPE, entries)), set(map(_SHAPE, entries))
    if len(dtypes) != 1 or len(shapes) != 1 or None in inline or set(map(_SHARD, entries)) != {None}:
        return None
    ((dtype,), (shape,)) = dtypes, shapes
    if dtype is None or shape is None:
        return None
    try:
        return np.array(inline, dtype=np.dtype(dtype)).reshape((len(inline), *shape))
    except (TypeError, ValueError, OverflowError):
        return None


def _typed(column: np.ndarray) -> np.ndarray:
    """A column of values (rows x shape) as :func:`_value_column` gives it."""
    if column[0].size != 1:
        return _value_column(list(column))
    return _flat_column(column.reshape(len(column)))


def _value_column(values: list[np.ndarray]) -> np.ndarray:
    """One-element values as one typed column (float64, int64, bool), others as an object column of arrays."""
    if not all(v.size == 1 for v in values):
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out
    return _flat_column(np.concatenate([v.reshape(1) for v in values]))


def _flat_column(flat: np.ndarray) -> np.ndarray:
    """One-element values, one per row, as float64, int64 or bool (others: object)."""
    kind = flat.dtype.kind
    if kind == "f":
        return flat.astype(np.float64)
    if kind in "iu":
        return flat.astype(np.int64)
    if kind == "b":
        return flat
    out = np.empty(len(flat), dtype=object)
    out[:] = list(flat)
    return out


def _saved_reductions(
    per_worker: list[dict[str, Entry]], key: str, worker: str | None, sole: str | None
) -> np.ndarray | None:
    """Every step's saved reduction (as ``float()`` reads it) when each step has one that is the tensor's, else None."""
    pick = worker if worker is not None else sole
    if pick is None:
        return None
    entries = list(map(itemgetter(pick), per_worker))
    if worker is None and set(map(_SHARD, entries)) != {None}:
        return None  # a sharded tensor's reduction is the full tensor's
    saved = [r.get(key) if r else None for r in map(_REDUCTIONS, entries)]
    return None if None in saved else np.array(saved, dtype=np.float64)


def _reduction_column(
    tensor: Tensor,
    per_worker: list[dict[str, Entry]],
    steps: _Steps,
    key: str,
    column: str,
    worker: str | None,
    sole: str | None = None,
) -> np.ndarray:
    """One reduction at every step: the saved one straight from the index, else ``reduction_value``'s."""
    fast = _saved_reductions(per_worker, key, worker, sole)
    if fast is not None:
        return fast
    out = np.empty(len(per_worker), dtype=np.float64)
    for i, pw in enumerate(per_worker):
        entry = pw[worker] if worker is not None else pw[min(pw)]
        red = entry.reductions
        if red and key in red and (worker is not None or (entry.shard is None and len(pw) == 1)):
            out[i] = float(red[key])
            continue
        try:
            out[i] = tensor.reduction_value(int(steps.step[i]), column, worker=worker)
        except TensorUnavailableForStep:
            out[i] = np.nan
    return out


def _concat(parts: list[_Part], reds: dict[str, str] | None) -> pd.DataFrame:
    """The parts as one frame, built once: ``mode``, ``worker`` and ``name`` as categories."""
    values = ["value"] if reds is None else list(reds)
    if not parts:
        return empty_frame({**_KEY_DTYPES, **{c: "float64" for c in values}})
    sizes = [p.size for p in parts]
    names = {name: i for i, name in enumerate(dict.fromkeys(p.name for p in parts))}
    modes = np.concatenate([p.steps.mode for p in parts])
    codes, found = np.unique(modes, return_inverse=True)
    frame = {
        "step": np.concatenate([p.steps.step for p in parts]),
        "mode": pd.Categorical.from_codes(found, [_MODE_NAMES.get(int(c), str(c)) for c in codes]),
        "mode_step": np.concatenate([p.steps.mode_step for p in parts]),
        "worker": _worker_column(parts, sizes),
        "name": pd.Categorical.from_codes(np.repeat([names[p.name] for p in parts], sizes), list(names)),
    }
    for col in values:
        frame[col] = np.concatenate([p.columns[col] for p in parts]) if len(parts) > 1 else parts[0].columns[col]
    return pd.DataFrame(frame)


def _worker_column(parts: list[_Part], sizes: list[int]) -> pd.Categorical:
    if all(isinstance(p.workers, str) for p in parts):
        names = {str(w): i for i, w in enumerate(dict.fromkeys(p.workers for p in parts))}
        return pd.Categorical.from_codes(np.repeat([names[str(p.workers)] for p in parts], sizes), list(names))
    return pd.Categorical(
        [w for p in parts for w in ([p.workers] * p.size if isinstance(p.workers, str) else p.workers)]
    )


def wide(frame: pd.DataFrame) -> pd.DataFrame:
    """A long frame of :func:`tensor_frame` pivoted: one row per (step, worker), one column per tensor.

    With reductions, one column per tensor and reduction, named ``"<tensor>:<reduction>"``. Rows are sorted by
    step then worker; a tensor not saved at a step is NaN (None for array values).

    Example:
        >>> long = pd.DataFrame({"step": [0, 0, 1], "mode": ["TRAIN"] * 3, "mode_step": [0, 0, 1],
        ...                      "worker": ["w"] * 3, "name": ["a", "b", "a"], "value": [1.0, 2.0, 3.0]})
        >>> wide(long)[["step", "a", "b"]].to_dict("list")
        {'step': [0, 1], 'a': [1.0, 3.0], 'b': [2.0, nan]}
    """
    return _pivot(frame)


def _pivot(frame: pd.DataFrame) -> pd.DataFrame:
    index = ["step", "mode", "mode_step", "worker"]
    values = [c for c in frame.columns if c not in KEY_COLUMNS]
    if frame.empty:
        return empty_frame({c: _KEY_DTYPES[c] for c in index})
    table = frame.pivot(index=index, columns="name", values=values)
    if values == ["value"]:
        table.columns = [str(name) for _v, name in table.columns]
    else:
        table = table.sort_index(axis=1, level=1, sort_remaining=False)
        table.columns = [f"{name}{_SEP}{red}" for red, name in table.columns]
    table = table.sort_index(level=["step", "worker"])
    out = table.reset_index()
    out.columns.name = None
    return out
