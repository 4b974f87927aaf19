"""The step lifecycle of a hook, as one explicit state shared by the PyTorch and Keras hooks.

A hook is always in one of three phases::

               begin_step                       end_step
    ┌──────┐ ─────────────▶ ┌──────────────┐ ─────────────▶ ┌──────┐
    │ IDLE │                │     OPEN     │                │ IDLE │ ...
    └──────┘ ◀── close ──┐  │ saving: bool │ ── begin_step ─┐ (ends the open step, opens the next)
        │                │  └──────────────┘ ◀─────────────┘
        │ close          │          │ close (ends the open step first)
        ▼                │          ▼
    ┌────────┐ ◀─────────┴──────────┘
    │ CLOSED │  no step opens again; tensors saved now are dropped
    └────────┘

* IDLE: no step is open (before the first step, between steps, after a mode switch). ``save_tensor`` there joins
  the last finished step (``Collector.reopen_last_step``: IDLE → OPEN → IDLE).
* OPEN: tensors and losses join the step; ``saving`` says whether any collection saves at it (decided once, at
  ``begin_step``, by the ``SavePlanner``).
* CLOSED: after ``close()``.

Vocabulary: whoever *drives* the lifecycle calls ``begin`` / ``end`` of the hook's
:class:`~trainspect.hooks.step_driver.StepDriver` (the public ``hook.begin_step`` / ``hook.end_step``, a trainer
integration, Keras' callbacks, or the PyTorch hook's inference from module and optimizer events), which calls
:class:`~trainspect.hooks.collector.Collector` (→ ``SavePlanner``) and the framework's parts; whoever only *listens*
implements ``on_step_start`` / ``on_step_end`` (:class:`~trainspect.hooks.hook_extras.HookExtras` and its parts: live
rules, the profiler, MLflow).

PyTorch has no step callback: its hook infers the boundaries from module, autograd and optimizer events, and keeps
the sub-state of an OPEN training step in :class:`TrainingStep`::

    IDLE ──forward pre──▶ OPEN: forward, loss, backward ──optimizer.step() / GradScaler.step()──▶ IDLE
                            ▲                         │
                            └─ next forward before any optimizer step (gradient accumulation: the same step) ─┘

A forward pass begins a new step unless a training step with an optimizer is open and no optimizer has stepped in
it (gradient accumulation); in EVAL/PREDICT every forward pass is a step, ended by the next one. A registered model
called inside a registered model's forward pass (a model that calls itself) is part of it: no forward hook marks
where a forward pass ends (it would cost every step), so the call stack is looked at when such a call would end the
open step (``ModelRegistry.inside_forward``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any

__all__ = ["StepPhase", "StepState", "TrainingStep", "Captures"]


class StepPhase(enum.Enum):
    """The phase of a hook's step lifecycle (see the module's diagram)."""

    IDLE = "idle"
    OPEN = "open"
    CLOSED = "closed"


class StepState:
    """The phase of one hook's step lifecycle and whether the open step saves anything.

    Plain attributes, read on every framework event: ``open`` (a step is open) and ``saving`` (the open step saves
    something). Changed only through :meth:`begin`, :meth:`end` and :meth:`close`, which refuse transitions the
    diagram does not have.
    """

    __slots__ = ("open", "saving", "closed")

    def __init__(self) -> None:
        self.open = False
        self.saving = False
        self.closed = False

    @property
    def phase(self) -> StepPhase:
        """The current phase."""
        if self.closed:
            return StepPhase.CLOSED
        return StepPhase.OPEN if self.open else StepPhase.IDLE

    def begin(self, saving: bool) -> None:
        """IDLE → OPEN (the caller ends an open step first)."""
        if self.open or self.closed:
            raise RuntimeError(f"begin_step in phase {self.phase.name}: allowed only in IDLE")
        self.open, self.saving = True, saving

    def end(self) -> None:
        """OPEN → IDLE."""
        if not self.open:
            raise RuntimeError(f"end_step in phase {self.phase.name}: allowed only in OPEN")
        self.open = self.saving = False

    def close(self) -> None:
        """IDLE → CLOSED (the caller ends an open step first)."""
        if self.open:
            raise RuntimeError("close in phase OPEN: end the step first")
        self.closed = True

    def __repr__(self) -> str:
        return f"StepState({self.phase.name}, saving={self.saving})"


@dataclass(frozen=True)
class Captures:
    """What a saving PyTorch step records beside losses, for one set of saving collections (``generation``).

    Decided again only when the planner's set of saving collections changes.
    """

    generation: int
    params: tuple[tuple[str, Any], ...]
    """(name, parameter) of the weights saved at the step's beginning."""
    gradients: bool
    """Gradient hooks are attached for the step."""
    module_io: bool
    """Module input/output hooks are attached for the step."""
    optimizer: bool
    """Optimizer variables (learning rate, momentum) are saved at ``optimizer.step()``."""
    at_begin: bool = field(init=False)
    """Anything is staged or attached when a step begins (weights, gradient or module hooks)."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "at_begin", bool(self.params) or self.gradients or self.module_io)


NO_CAPTURES = Captures(-1, (), False, False, False)


class TrainingStep:
    """The sub-state of an OPEN PyTorch step (see the module's second diagram).

    Attributes:
        optimizer_seen: an optimizer step was seen in this process (steps may span several forward passes).
        optimizer_stepped: an optimizer stepped in the open step: the next forward pass begins a new step.
        accumulates: whether an optimizer updates the model (decided once, lazily; None: not yet).
        captures: what a saving step records (see :class:`Captures`).
    """

    __slots__ = ("optimizer_seen", "optimizer_stepped", "accumulates", "captures")

    def __init__(self) -> None:
        self.optimizer_seen = False
        self.optimizer_stepped = False
        self.accumulates: bool | None = None
        self.captures = NO_CAPTURES
