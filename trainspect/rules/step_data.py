"""What a tensor rule sees at one step (:class:`StepData`) and what it says about it (:class:`Check`).

The same small values serve offline evaluation (the engine builds them from a trial, one tensor series
at a time) and live evaluation (the live runner builds them from the hook's :class:`~trainspect.step.StepRecord`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.reductions import Reduction
from trainspect.reductions import reduce as reduce_array
from trainspect.reductions import reduce_rows as reduce_rows
from trainspect.step import TensorRecord

__all__ = ["Check", "StepData", "parse_reduction", "reduce_array", "reduce_rows", "tensor_reduction", "as_float"]

_EMPTY: Mapping[str, tuple[TensorRecord, ...]] = {}
_new = object.__new__
_NUMERIC = frozenset("fiub")


@dataclass(frozen=True)
class Check:
    """A rule's judgement of one step.

    Args:
        value: the watched value at this step (charted in the verdict's series); None when there is none.
        triggered: whether the step meets the rule's trigger condition.
        tensors: the tensors that made it trigger (or, without a trigger, the ones examined, optional).
        detail: one sentence with the observed value and the threshold, e.g.
            ``"abs_mean of gradient/fc1.weight is 3e-09 < threshold 1e-07"``.
    """

    value: float | None
    triggered: bool
    tensors: tuple[str, ...] = ()
    detail: str = ""


@dataclass(frozen=True)
class StepData:
    """The inputs of one rule at one step: the tensors it selected, grouped by role.

    Args:
        step: the global step.
        mode: the step's mode.
        mode_step: the step's number within its mode.
        wall_time: when the step was recorded (epoch seconds; NaN when unknown).
        worker: the worker that recorded it.
        roles: the rule's selected tensors at this step, by role (most rules have one role, ``"main"``).
        others: for rules comparing runs, the same tensors in each other trial at this step (by name).

    Example:
        >>> from trainspect.step import TensorRecord
        >>> d = StepData(3, ModeKeys.TRAIN, 3, 0.0, "worker_0", {"main": (TensorRecord("loss", np.float32(1.0)),)})
        >>> [t.name for t in d.role()]
        ['loss']
    """

    step: int
    mode: ModeKeys
    mode_step: int
    wall_time: float
    worker: str = "worker_0"
    roles: Mapping[str, tuple[TensorRecord, ...]] = field(default_factory=lambda: _EMPTY)
    others: tuple[Mapping[str, TensorRecord], ...] = ()

    @classmethod
    def make(
        cls,
        step: int,
        mode: ModeKeys,
        mode_step: int,
        wall_time: float,
        worker: str,
        roles: Mapping[str, tuple[TensorRecord, ...]],
        others: tuple[Mapping[str, TensorRecord], ...] = (),
    ) -> StepData:
        """The same StepData as the constructor gives, built without the frozen dataclass's per-field checks.

        The offline feed builds one per rule and step; this halves what that costs.
        """
        data = _new(cls)
        data.__dict__.update(
            step=step, mode=mode, mode_step=mode_step, wall_time=wall_time, worker=worker, roles=roles, others=others
        )
        return data

    def role(self, name: str = "main") -> tuple[TensorRecord, ...]:
        """Return the tensors selected for ``name`` at this step (empty when none)."""
        return self.roles.get(name, ())

    @property
    def empty(self) -> bool:
        """Whether no selected tensor is present at this step."""
        return not any(self.roles.values())


def parse_reduction(spec: str) -> Reduction:
    """Return :meth:`Reduction.parse <trainspect.reductions.Reduction.parse>` of ``spec`` (``"abs_mean"``).

    Raises:
        ValueError: the name is no known reduction; the message lists them.
    """
    return Reduction.parse(spec)


def tensor_reduction(record: TensorRecord, name: str, abs: bool = False) -> float | None:  # noqa: A002
    """Return a reduction of a tensor: the saved one, else computed from the raw value, else None.

    ``reduce_array`` and ``reduce_rows``, also importable from here, are :func:`trainspect.reductions.reduce` and
    :func:`trainspect.reductions.reduce_rows`.
    """
    saved = record.reductions.get((name, abs))
    if saved is not None:
        return float(saved)
    if record.value is None:
        return None
    return reduce_array(record.value, name, abs)


def as_float(record: TensorRecord) -> float | None:
    """Return a scalar tensor's value (a loss, a metric): the mean of its raw value or its saved mean."""
    value = record.value
    if type(value) is np.ndarray and value.size == 1 and value.dtype.kind in _NUMERIC:
        return float(value.reshape(-1)[0])  # the common case (a loss): what the float64 conversion below gives
    if value is not None:
        arr = np.asarray(value, dtype=np.float64)
        return float(arr.reshape(-1)[0]) if arr.size == 1 else float(np.mean(arr)) if arr.size else None
    return tensor_reduction(record, "mean")
