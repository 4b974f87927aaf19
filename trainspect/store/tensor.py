"""One saved tensor across steps, modes and workers (spec 5.6 ``Tensor``)."""

from __future__ import annotations

import logging
from typing import Protocol

import numpy as np

from trainspect.exceptions import TensorUnavailableForStep
from trainspect.modes import ModeKeys, parse_mode
from trainspect.reductions import Reduction, format_key, reduce
from trainspect.step import ReductionKey
from trainspect.store.framing import CorruptRecord
from trainspect.store.index import Entry, Source, TrialIndex

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


class Tensor:
    """A tensor of a :class:`~trainspect.store.trial.Trial`; get it with ``trial.tensor(name)``."""

    def __init__(self, name: str, trial: _Steps, index: TrialIndex, source: Source) -> None:
        self.name = name
        self._trial = trial
        self._index = index
        self._source = source
        self._warned_corrupt = False

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

    def _entry(self, step: int, mode: ModeKeys | str, worker: str | None) -> Entry:
        gs = self._global(step, mode)
        per_worker = self._by_step().get(gs)
        if per_worker is None:
            self._trial._maybe_refresh()
            per_worker = self._by_step().get(gs)
        if not per_worker:
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode))
        if worker is None:
            worker = sorted(per_worker)[0]
        if worker not in per_worker:
            raise TensorUnavailableForStep(self.name, step, f"{parse_mode(mode).name}, worker {worker}")
        return per_worker[worker]

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

        Raises:
            TensorUnavailableForStep: not saved at that step, only reductions were saved, or the record is corrupt.
        """
        return self._read(self._entry(step, mode, worker), step, mode)

    def values(self, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None) -> dict[int, np.ndarray]:
        """Return ``{step: value}`` for every step with a raw value (corrupt records are skipped)."""
        mode = parse_mode(mode)
        out: dict[int, np.ndarray] = {}
        by_step = self._by_step()
        for step in self.steps(mode):
            per_worker = by_step.get(step if mode is ModeKeys.GLOBAL else self._global(step, mode))
            if not per_worker:
                continue
            entry = per_worker.get(worker) if worker is not None else per_worker[min(per_worker)]
            if entry is None or not entry.has_value:
                continue  # only reductions (or another worker) at this step: nothing to raise per step
            try:
                out[step] = self._read(entry, step, mode)
            except TensorUnavailableForStep:
                continue
        return out

    def reduction_value(
        self,
        step: int,
        reduction_name: str,
        mode: ModeKeys | str = ModeKeys.GLOBAL,
        worker: str | None = None,
        abs: bool = False,  # noqa: A002 - smdebug's keyword
    ) -> float:
        """Return a reduction: the saved one, or computed from the raw value.

        Raises:
            TensorUnavailableForStep: neither the reduction nor the raw value was saved.
        """
        entry = self._entry(step, mode, worker)
        name, absolute = _reduction(reduction_name, abs)
        key = format_key(name, absolute)
        if entry.reductions and key in entry.reductions:
            return float(entry.reductions[key])
        return reduce(self._read(entry, step, mode), name, absolute)

    def reduction_values(
        self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None
    ) -> dict[ReductionKey, float]:
        """Return the saved reductions of a step as ``{Reduction(name, abs): value}`` (keys equal ``(name, abs)``)."""
        entry = self._entry(step, mode, worker)
        return {_reduction(key): float(value) for key, value in (entry.reductions or {}).items()}

    def shape(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL, worker: str | None = None) -> tuple[int, ...]:
        """Return the shape at a step (saved with the raw value, or with ``save_shape``).

        Raises:
            TensorUnavailableForStep: no shape was saved.
        """
        entry = self._entry(step, mode, worker)
        if entry.shape is None:
            raise TensorUnavailableForStep(self.name, step, parse_mode(mode))
        return entry.shape

    def shapes(self, mode: ModeKeys | str = ModeKeys.GLOBAL) -> dict[int, tuple[int, ...]]:
        """Return ``{step: shape}``."""
        return {s: self.shape(s, mode) for s in self.steps(mode)}

    def prev_steps(self, step: int, n: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> list[int]:
        """Return up to ``n`` saved steps before ``step``, oldest first."""
        earlier = [s for s in self.steps(mode) if s < step]
        return earlier[-n:] if n > 0 else []

    def has_reductions_only(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> bool:
        """Return whether only reductions (no raw value) were saved at a step."""
        return not self._entry(step, mode, None).has_value

    def __repr__(self) -> str:
        return f"Tensor({self.name!r})"
