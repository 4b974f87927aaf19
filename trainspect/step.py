"""Framework-neutral records of one saved step, passed from hooks to the writer and to live rules."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from trainspect.modes import ModeKeys

__all__ = ["ReductionKey", "TensorRecord", "StepRecord"]

ReductionKey = tuple[str, bool]
"""A reduction's name (``"mean"``, ``"l2"``, …) and whether it is taken over absolute values."""


@dataclass(frozen=True)
class TensorRecord:
    """One tensor at one step: its raw value (when saved) and/or its reductions."""

    name: str
    value: np.ndarray | None = None
    reductions: dict[ReductionKey, float] = field(default_factory=dict)
    collections: frozenset[str] = frozenset()
    shape: tuple[int, ...] | None = None


@dataclass(frozen=True)
class StepRecord:
    """Everything one worker saved at one step."""

    mode: ModeKeys
    mode_step: int
    global_step: int
    wall_time: float
    worker: str
    tensors: dict[str, TensorRecord] = field(default_factory=dict)
