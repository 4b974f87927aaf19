"""The in-memory index a Trial keeps (steps, modes, where each tensor of a step lives) and the readers that fill it."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from trainspect.collections import Collection
from trainspect.modes import ModeKeys
from trainspect.shard import Shard

__all__ = ["Entry", "StepInfo", "TrialIndex"]


@dataclass(slots=True)
class Entry:
    """Where one tensor of one step of one worker is stored, and its saved reductions.

    A sharded tensor's entry is one worker's piece: ``shard`` says where it sits in the full tensor, ``partials``
    holds the piece's partial statistics (:data:`trainspect.shard.PARTIAL_KEYS`).
    """

    file: str | None
    offset: int
    length: int
    dtype: str | None
    shape: tuple[int, ...] | None
    reductions: dict[str, Any] | None
    codec: int = 0  # 0: trainspect raw record, 1: smdebug TFRecord event
    inline: Any = None  # a one-element value stored in the index entry itself
    shard: Shard | None = None
    partials: dict[str, float] | None = None

    @property
    def has_value(self) -> bool:
        """Whether the raw value was saved (in the data file or inline)."""
        return self.file is not None or self.inline is not None


@dataclass(slots=True)
class StepInfo:
    """One global step: its mode, mode step, wall time and the workers that wrote it."""

    mode: ModeKeys
    mode_step: int
    wall_time: float
    workers: set[str] = field(default_factory=set)


class TrialIndex:
    """Steps and tensor locations, filled incrementally by a source."""

    def __init__(self) -> None:
        self.steps: dict[int, StepInfo] = {}
        self.sorted_steps: list[int] = []
        self.tensors: dict[str, dict[int, dict[str, Entry]]] = {}
        self.by_mode: dict[ModeKeys, dict[int, int]] = {}
        self.workers: set[str] = set()

    def add_step(self, worker: str, global_step: int, mode: ModeKeys, mode_step: int, wall_time: float) -> None:
        """Record that ``worker`` wrote ``global_step``."""
        info = self.steps.get(global_step)
        if info is None:
            info = StepInfo(mode, mode_step, wall_time)
            self.steps[global_step] = info
            if not self.sorted_steps or global_step > self.sorted_steps[-1]:
                self.sorted_steps.append(global_step)
            else:
                bisect.insort(self.sorted_steps, global_step)
            self.by_mode.setdefault(mode, {})[mode_step] = global_step
        info.workers.add(worker)
        self.workers.add(worker)

    def add_tensor(self, name: str, global_step: int, worker: str, entry: Entry) -> None:
        """Record where a tensor of a step is."""
        per_name = self.tensors.get(name)
        if per_name is None:
            per_name = self.tensors[name] = {}
        per_step = per_name.get(global_step)
        if per_step is None:
            per_name[global_step] = {worker: entry}  # one dict per (tensor, step): no throw-away defaults
        else:
            per_step[worker] = entry


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
