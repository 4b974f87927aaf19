"""One saved tensor across steps, modes and workers (spec 5.6 ``Tensor``).

A sharded tensor (each rank recorded its piece, with a :class:`~trainspect.shard.Shard`) reads as the full tensor,
assembled from the pieces (its reductions combined from their partial statistics); ``worker=`` reads one piece.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from typing import Protocol

import numpy as np

from trainspect.exceptions import TensorUnavailableForStep
from trainspect.modes import ModeKeys, parse_mode
from trainspect.reductions import NAMES, Reduction, format_key, reduce, reduce_from_partials
from trainspect.shard import Shard
from trainspect.step import ReductionKey
from trainspect.store.framing import CorruptRecord
from trainspect.store.index import Entry, Source, TrialIndex
from trainspect.store.pieces import Pieces, assemble, full_partials, reference_shard, select_pieces

__all__ = ["Tensor"]

log = logging.getLogger(__name__)


class _Steps(Protocol):
    """What a Tensor uses of its :class:`~trainspect.store.trial.Trial` (typed here: the Trial imports Tensor)."""

    def steps(self, mode: ModeKeys | str = ..., show_incomplete_steps: bool = ...) -> list[int]: ...
    def global_step(self, mode: ModeKeys | str, mode_step: int) -> int: ...
    def _maybe_refresh(self) -> None: ...
    def _note(self, message: str) -> None: ...


def _reduction(text: str, absolute: bool = False) -> ReductionKey:
    """A written reduction name as a :class:`Reduction` (smdebug's ``"l2_norm"`` too), an unknown one as it is."""
    try:
        red = Reduction.parse(text)
    except ValueError:
        is_abs = text.startswith("abs_")
        return (text[4:] if is_abs else text, is_abs or absolute)
    return Reduction(red.name, red.absolute or absolute)


def _sharded(per_worker: dict[str, Entry], first: Entry) -> bool:
    """Whether a step's entries are pieces of a sharded tensor (one test for an unsharded single worker's step)."""
    return first.shard is not None or (len(per_worker) > 1 and any(e.shard is not None for e in per_worker.values()))


def _columnar(entry: Entry, per_worker: dict[str, Entry], worker: str | None) -> bool:
    """Whether a step's value is one kept in the index that reads as a row of a column (not a sharded piece)."""
    if entry.inline is None or entry.dtype is None or entry.shape is None:
        return False
    return worker is not None or (entry.shard is None and len(per_worker) == 1)


def _from_partials(partials: dict[str, float]) -> dict[ReductionKey, float]:
    """Every reduction (plain and ``abs_``) the partial statistics give."""
    out: dict[ReductionKey, float] = {}
    for name in NAMES:
        for absolute in (False, True):
            try:
                out[Reduction(name, absolute)] = reduce_from_partials(partials, name, absolute)
            except KeyError:
                continue  # a statistic it needs was not saved
    return out


class Tensor:
    """A tensor of a :class:`~trainspect.store.trial.Trial`; get it with ``trial.tensor(name)``."""

    def __init__(self, name: str, trial: _Steps, index: TrialIndex, source: Source) -> None:
        self.name = name
        self._trial = trial
        self._index = index
        self._source = source
        self._warned_corrupt = False
        self._warned_pieces = False

    def _by_step(self) -> dict[int, dict[str, Entry]]:
        return self._index.tensors.get(self.name, {})

    def _global(self, step: int, mode: ModeKeys | str) -> int:
        mode = parse_mode(mode)
        return step if mode is ModeKeys.GLOBAL else self._trial.global_step(mode, step)

    def steps(self, mode: ModeKeys | str = ModeKeys.GLOBAL, show_incomplete_steps: bool = False) -> list[int]:
        """Return the steps (global, or mode steps of ``mode``) at which this tensor was saved."""
        self._trial._maybe_refresh()
        mode = parse_mode(mode)
        saved = self._by_step()
        out = []
        for gs in self._trial.steps(ModeKeys.GLOBAL, show_incomplete_steps):
            if gs in saved:
                info = self._index.steps[gs]
                if mode is ModeKeys.GLOBAL:
                    out.append(gs)
                elif info.mode is mode:
                    out.append(info.mode_step)
        return out

    def workers(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> list[str]:
        """Return the workers that saved this tensor at a step."""
        return sorted(self._by_step().get(self._global(step, mode), {}))

    def _per_worker(self, step: int, mode: ModeKeys | str) -> dict[str, Entry]:
        gs = self._global(step, mode)
        per_worker = self._by_step().get(gs)
        if per_worker is None:
            self._trial._maybe_refresh()
            per_worker = self._by_step().get(gs)
        if not per_worker:
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode))
        return per_worker

    def _pick(self, per_worker: dict[str, Entry], step: int, mode: ModeKeys | str, worker: str | None) -> Entry:
        if worker is None:
            return per_worker[min(per_worker)]
        if worker not in per_worker:
            raise TensorUnavailableForStep(self.name, step, f"{parse_mode(mode).name}, worker {worker}")
        return per_worker[worker]

    def _entry(self, step: int, mode: ModeKeys | str, worker: str | None) -> Entry:
        return self._pick(self._per_worker(step, mode), step, mode, worker)

    def _pieces(self, per_worker: dict[str, Entry], step: int, mode: ModeKeys | str) -> Pieces:
        """The pieces that make the full tensor of a step.

        Raises:
            TensorUnavailableForStep: they do not (the message names the workers present and absent).
        """
        pieces = select_pieces(per_worker, self._index.workers)
        assert pieces is not None  # called for sharded steps only
        if not pieces.complete:
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode), detail=pieces.problem())
        return pieces

    def _full(self, pieces: Pieces, step: int, mode: ModeKeys | str, reduction: bool = False) -> np.ndarray:
        """The full tensor assembled from its pieces' raw values."""
        bare = [w for w, e in pieces.chosen if not e.has_value]
        if bare:
            need = "every piece's partial statistics or raw value" if reduction else "every piece's raw value"
            raise TensorUnavailableForStep(
                self.name,
                step,
                parse_mode(mode),
                has_reductions=not reduction and self._has_reductions(pieces),
                detail=f"it is sharded and the full tensor needs {need}: the pieces of {', '.join(bare)} have no raw "
                "value; worker= reads one piece",
            )
        return assemble(pieces, [self._read(e, step, mode) for _, e in pieces.chosen])

    @staticmethod
    def _has_reductions(pieces: Pieces) -> bool:
        return all(e.partials is not None for _, e in pieces.chosen)

    def _read(self, entry: Entry, step: int, mode: ModeKeys | str) -> np.ndarray:
        if not entry.has_value:
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode), has_reductions=bool(entry.reductions))
        try:
            return self._source.read(entry)
        except (CorruptRecord, OSError) as exc:
            self._source.corrupt_records += 1
            if not self._warned_corrupt:
                self._warned_corrupt = True
                self._trial._note(f"skipped a corrupt or unreadable record of {self.name}: {exc}")
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode)) from None

    def value(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None) -> np.ndarray:
        """Return the saved value at a step (global step, or a mode step with ``mode``).

        A sharded tensor's value is the full tensor, assembled from every worker's piece (DTensor's
        ``full_tensor()``); ``worker=`` returns that worker's piece as it was stored.

        Raises:
            TensorUnavailableForStep: not saved at that step, only reductions were saved, the record is corrupt, or
                the pieces of a sharded tensor do not make the full tensor (the message names the workers).
        """
        per_worker = self._per_worker(step, mode)
        entry = self._pick(per_worker, step, mode, worker)
        if worker is None and _sharded(per_worker, entry):
            return self._full(self._pieces(per_worker, step, mode), step, mode)
        return self._read(entry, step, mode)

    def values(self, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None) -> dict[int, np.ndarray]:
        """Return ``{step: value}`` for every step with a raw value (corrupt records are skipped).

        A sharded tensor's steps are assembled (steps whose pieces do not make the full tensor are skipped, named once
        in the Trial's problems); ``worker=`` returns that worker's pieces.
        """
        mode = parse_mode(mode)
        out: dict[int, np.ndarray] = {}
        by_step = self._by_step()
        for step in self.steps(mode):
            per_worker = by_step.get(step if mode is ModeKeys.GLOBAL else self._global(step, mode))
            if not per_worker:
                continue
            entry = per_worker.get(worker) if worker is not None else per_worker[min(per_worker)]
            if entry is None:
                continue
            if worker is None and (entry.shard is not None or len(per_worker) > 1) and _sharded(per_worker, entry):
                self._assembled_into(out, per_worker, step, mode)
                continue
            if not entry.has_value:
                continue  # only reductions (or another worker) at this step: nothing to raise per step
            try:
                out[step] = self._read(entry, step, mode)
            except TensorUnavailableForStep:
                continue
        return out

    def values_at(self, steps: Iterable[int], worker: str | None = None) -> dict[int, np.ndarray]:
        """Return ``{step: value}`` for the given global steps, as :meth:`values` gives them (in the order given).

        The one-element values kept in the index (losses, metrics) are read as one column per dtype and shape, and
        each step's value is a view of it: reading a chunk of steps costs one array, not one per step.
        """
        out: dict[int, np.ndarray] = {}
        by_step = self._by_step()
        columns: dict[tuple[str, tuple[int, ...]], list[tuple[int, Entry]]] = {}
        order = []
        for step in steps:
            per_worker = by_step.get(step)
            if not per_worker:
                continue
            entry = per_worker.get(worker) if worker is not None else per_worker[min(per_worker)]
            if entry is None:
                continue
            order.append(step)
            if _columnar(entry, per_worker, worker):
                columns.setdefault((str(entry.dtype), tuple(entry.shape or ())), []).append((step, entry))
            else:
                self._value_into(out, per_worker, entry, step, worker)
        for (dtype, shape), group in columns.items():
            self._column_into(out, group, dtype, shape)
        return {step: out[step] for step in order if step in out}

    def _value_into(
        self, out: dict[int, np.ndarray], per_worker: dict[str, Entry], entry: Entry, step: int, worker: str | None
    ) -> None:
        """One step of :meth:`values` (global steps): its value into ``out``, or nothing."""
        if worker is None and (entry.shard is not None or len(per_worker) > 1) and _sharded(per_worker, entry):
            self._assembled_into(out, per_worker, step, ModeKeys.GLOBAL)
        elif entry.has_value:
            try:
                out[step] = self._read(entry, step, ModeKeys.GLOBAL)
            except TensorUnavailableForStep:
                pass

    def _column_into(
        self, out: dict[int, np.ndarray], group: list[tuple[int, Entry]], dtype: str, shape: tuple[int, ...]
    ) -> None:
        """Inline values of one dtype and shape, read as one column (each step's value a view of its row)."""
        try:
            column = np.array([e.inline for _, e in group], dtype=np.dtype(dtype)).reshape((len(group), *shape))
        except (TypeError, ValueError, OverflowError):
            for step, entry in group:  # one odd value: read step by step, as values() does
                self._value_into(out, {"": entry}, entry, step, "")
            return
        for i, (step, _) in enumerate(group):
            out[step] = column[i, ...]

    def _assembled_into(
        self, out: dict[int, np.ndarray], per_worker: dict[str, Entry], step: int, mode: ModeKeys
    ) -> None:
        """Put a sharded step's full value into ``out``, or skip the step (naming the first such step once)."""
        try:
            out[step] = self._full(self._pieces(per_worker, step, mode), step, mode)
        except TensorUnavailableForStep as exc:
            if not self._warned_pieces and exc.detail:
                self._warned_pieces = True
                self._trial._note(f"values() skipped steps of {self.name} that cannot be assembled, first {exc}")

    def reduction_value(
        self,
        step: int,
        reduction_name: str,
        mode: ModeKeys | str = ModeKeys.GLOBAL,
        worker: str | None = None,
        abs: bool = False,  # noqa: A002 - smdebug's keyword
    ) -> float:
        """Return a reduction: the saved one, or computed from the raw value.

        A sharded tensor's is the full tensor's, combined from every piece's partial statistics (else reduced from
        the assembled value); with ``worker=``, the piece's own (saved, else from its partial statistics, else from
        its raw value).

        Raises:
            TensorUnavailableForStep: neither the reduction nor the raw value was saved, or the pieces of a sharded
                tensor do not make the full tensor.
        """
        per_worker = self._per_worker(step, mode)
        entry = self._pick(per_worker, step, mode, worker)
        name, absolute = _reduction(reduction_name, abs)
        if worker is None and _sharded(per_worker, entry):
            return self._full_reduction(self._pieces(per_worker, step, mode), name, absolute, step, mode)
        key = format_key(name, absolute)
        if entry.reductions and key in entry.reductions:
            return float(entry.reductions[key])
        if entry.partials is not None:
            try:
                return reduce_from_partials(entry.partials, name, absolute)
            except KeyError:
                pass  # a statistic it needs was not saved: from the raw value
        return reduce(self._read(entry, step, mode), name, absolute)

    def _full_reduction(self, pieces: Pieces, name: str, absolute: bool, step: int, mode: ModeKeys | str) -> float:
        partials = full_partials(pieces)
        if partials is not None:
            try:
                return reduce_from_partials(partials, name, absolute)
            except KeyError:
                pass
        return reduce(self._full(pieces, step, mode, reduction=True), name, absolute)

    def reduction_values(
        self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None
    ) -> dict[ReductionKey, float]:
        """Return the saved reductions of a step as ``{Reduction(name, abs): value}`` (keys equal ``(name, abs)``).

        A sharded tensor's are the full tensor's: every reduction its pieces' partial statistics give, else the
        pieces' saved ones reduced from the assembled value. With ``worker=``, the piece's saved reductions and
        those its partial statistics give.

        Raises:
            TensorUnavailableForStep: not saved at that step, or the pieces of a sharded tensor do not make the full
                tensor.
        """
        per_worker = self._per_worker(step, mode)
        entry = self._pick(per_worker, step, mode, worker)
        if worker is None and _sharded(per_worker, entry):
            return self._full_reductions(self._pieces(per_worker, step, mode), step, mode)
        saved = {_reduction(key): float(value) for key, value in (entry.reductions or {}).items()}
        if entry.partials is not None:
            saved = {**_from_partials(entry.partials), **saved}
        return saved

    def _full_reductions(self, pieces: Pieces, step: int, mode: ModeKeys | str) -> dict[ReductionKey, float]:
        partials = full_partials(pieces)
        if partials is not None:
            return _from_partials(partials)
        keys = {_reduction(key) for _, e in pieces.chosen for key in (e.reductions or {})}
        if not keys or not all(e.has_value for _, e in pieces.chosen):
            return {}
        value = self._full(pieces, step, mode)
        return {key: reduce(value, *key) for key in sorted(keys)}

    def shape(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None) -> tuple[int, ...]:
        """Return the shape at a step (saved with the raw value, or with ``save_shape``).

        A sharded tensor's is the full tensor's; with ``worker=``, the piece's.

        Raises:
            TensorUnavailableForStep: no shape was saved.
        """
        per_worker = self._per_worker(step, mode)
        entry = self._pick(per_worker, step, mode, worker)
        if worker is None and _sharded(per_worker, entry):
            ref = reference_shard(per_worker)
            assert ref is not None
            return ref.global_shape
        if entry.shape is None:
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode))
        return entry.shape

    def shapes(self, mode: ModeKeys | str = ModeKeys.GLOBAL) -> dict[int, tuple[int, ...]]:
        """Return ``{step: shape}``."""
        return {s: self.shape(s, mode) for s in self.steps(mode)}

    def shard(self, step: int, worker: str | None = None, mode: ModeKeys | str = ModeKeys.GLOBAL) -> Shard | None:
        """Return where a worker's piece sits in the full tensor (None: not a piece of a sharded tensor).

        ``worker=None`` is the first worker that saved the step.

        Raises:
            TensorUnavailableForStep: the worker did not save the tensor at that step.
        """
        return self._entry(step, mode, worker).shard

    def is_sharded(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> bool:
        """Return whether the tensor was saved as pieces of a sharded tensor at a step.

        Raises:
            TensorUnavailableForStep: not saved at that step.
        """
        per_worker = self._per_worker(step, mode)
        return any(e.shard is not None for e in per_worker.values())

    def prev_steps(self, step: int, n: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> list[int]:
        """Return up to ``n`` saved steps before ``step``, oldest first."""
        earlier = [s for s in self.steps(mode) if s < step]
        return earlier[-n:] if n > 0 else []

    def has_reductions_only(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> bool:
        """Return whether only reductions (no raw value) were saved at a step."""
        return not self._entry(step, mode, None).has_value

    def __repr__(self) -> str:
        return f"Tensor({self.name!r})"
