"""Framework-neutral records of one saved step, passed from hooks to the writer and to live rules."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.shard import Shard

__all__ = [
    "ReductionKey",
    "StepKey",
    "TensorRecord",
    "StepRecord",
    "Scalar",
    "ScalarStep",
    "collection_atoms",
    "scalar_record",
]

ReductionKey = tuple[str, bool]
"""A reduction: a :class:`~trainspect.reductions.Reduction`, or the equal ``(name, absolute)`` tuple."""
StepKey = tuple[ModeKeys, int, int, float]
"""A step's (mode, mode step, global step, wall time)."""


@dataclass(frozen=True)
class TensorRecord:
    """One tensor at one step: its raw value (when saved) and/or its reductions.

    A sharded tensor's record holds this rank's piece: ``shard`` says where it sits in the full tensor, ``partials``
    (keys :data:`trainspect.shard.PARTIAL_KEYS`) let the full tensor's reductions be combined across the pieces.
    """

    name: str
    value: np.ndarray | None = None
    reductions: dict[ReductionKey, float] = field(default_factory=dict)
    collections: frozenset[str] = frozenset()
    shape: tuple[int, ...] | None = None
    shard: Shard | None = None
    partials: dict[str, float] | None = None


@dataclass(frozen=True)
class StepRecord:
    """Everything one worker saved at one step."""

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    worker: str
    tensors: dict[str, TensorRecord] = field(default_factory=dict)


Scalar = tuple[str, "float | int | bool | complex", np.dtype, "frozenset[str] | tuple[str, ...]"]
"""A scalar tensor not yet made a ``TensorRecord``: (name, Python value, NumPy dtype, collections).

Where one is made at every step (a loss), its collections are :func:`collection_atoms`: a tuple of atoms is what
Python's garbage collector stops tracking (see ``RunWriter.submit_scalars``).
"""


@functools.lru_cache(maxsize=256)
def collection_atoms(collections: frozenset[str]) -> tuple[str, ...]:
    """``collections`` as a sorted tuple, the same object at every call (a :data:`Scalar`'s, made at every step)."""
    return tuple(sorted(collections))


def scalar_record(scalar: Scalar) -> TensorRecord:
    """Return a scalar's ``TensorRecord`` (a 0-d array of its dtype)."""
    name, value, dtype, collections = scalar
    return TensorRecord(name, np.array(value, dtype), {}, frozenset(collections), ())


class ScalarStep(NamedTuple):
    """A step that saved only scalars, handed to the writer thread as Python values.

    A step that saves only its loss is most steps of a run: building the NumPy values and records on the writer
    thread keeps that work off the training thread (a tuple, as it is made at every such step). :meth:`record`
    makes the ``StepRecord`` the writer writes.
    """

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    worker: str
    scalars: Sequence[Scalar]

    def record(self) -> StepRecord:
        """Return the equivalent ``StepRecord`` (0-d arrays of the scalars' dtypes)."""
        tensors = {scalar[0]: scalar_record(scalar) for scalar in self.scalars}
        return StepRecord(self.mode, self.mode_step, self.global_step, self.wall_time, self.worker, tensors)
