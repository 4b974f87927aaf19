"""The step driver: one hook's step boundaries, whatever the framework, and the public step API behind them.

Whoever *drives* the steps calls :meth:`StepDriver.begin` and :meth:`StepDriver.end`; the driver ends the open step
before a new one begins, checks a pending StopTraining, opens the collector's step, tells the listeners
(:class:`~trainspect.hooks.hook_extras.HookExtras`: live rules, profiler, MLflow) and calls the framework adapter's
:class:`StepParts` for the framework's own work at each boundary (PyTorch: weights staged, step hooks attached, losses
and copies handed over; Keras: the model's taps)::

    begin(mode) ─▶ parts.step_beginning() ─▶ end() ─▶ collector.set_mode(mode) ─▶ extras.check_stop()
                ─▶ collector.begin_step() ─▶ extras.on_step_start() ─▶ parts.step_began(saving, mode)
    end()       ─▶ parts.step_ending(final) ─▶ collector.end_step(scalars) ─▶ extras.on_step_end(record)

Two sources drive it:

* **Explicitly**, through the public step API: ``hook.begin_step(mode)`` / ``hook.end_step()``, which the trainer
  integrations call (:mod:`trainspect.hooks.integrations`: Lightning's ``Callback``, Hugging Face's
  ``TrainerCallback``), as do Keras' callbacks and a custom loop. A mode whose steps were driven explicitly once is
  *driven* (:attr:`StepDriver.driven`): framework events no longer begin or end its steps; they still capture
  tensors, losses and times inside the open step. (Hugging Face's ``Trainer`` drives its TRAIN steps; its evaluation
  steps, which no callback announces, stay inferred.)
* **Inferred** from the framework's events (a PyTorch loop with no integration): a registered model's forward pass
  begins a step unless a training step is open and no optimizer has stepped in it (gradient accumulation: the micro-
  batches of one optimizer step are one step); in EVAL and PREDICT every forward pass is a step; an optimizer's step
  ends a training step. See :meth:`forward_began` and :meth:`optimizer_stepped`, and the sub-state
  :class:`~trainspect.hooks.step_state.TrainingStep`.

The lifecycle itself (IDLE → OPEN → IDLE, CLOSED) is :class:`~trainspect.hooks.step_state.StepState`, changed only by
the collector through its methods.
"""

from __future__ import annotations

from typing import Any, Protocol

from trainspect.hooks.collector import Collector
from trainspect.hooks.step_state import TrainingStep
from trainspect.modes import ModeKeys
from trainspect.step import Scalar, StepRecord

__all__ = ["StepDriver", "StepParts", "TRAINING_MODES"]

TRAINING_MODES = (ModeKeys.TRAIN, ModeKeys.GLOBAL)
"""Modes whose steps end at the optimizer's step (when inferred)."""


class StepParts(Protocol):
    """What a framework adapter does at the step boundaries the driver decides (see the module diagram)."""

    def step_beginning(self) -> None:
        """A step is about to begin (the open one, if any, has not ended yet): open what the framework needs."""

    def step_began(self, saving: bool, mode: ModeKeys) -> None:
        """The step is open; ``saving``: some collection saves at it."""

    def step_ending(self, final: bool) -> tuple[list[Scalar] | None, bool]:
        """The open step ends: hand its tensors to the collector; return its raw scalars for ``Collector.end_step``.

        ``final``: the hook is closing (nothing may be left in flight).
        """

    def no_step_to_end(self, final: bool) -> None:
        """An end with no step open (between steps): release what a step left behind."""

    def accumulates(self) -> bool:
        """Whether an optimizer updates the model (asked by :meth:`StepDriver.forward_began` only when it matters)."""

    def nested(self) -> bool:
        """Whether the forward pass that began runs inside a registered model's (asked when it would end a step)."""

    @property
    def idle(self) -> bool:
        """Nothing to do at the next step's boundaries while it saves what the last saving step saved.

        Nothing to open, join or release, nor to begin while ``collector.planner.generation`` stays the same: the
        steady step (see :meth:`StepDriver.begin`).
        """


class StepDriver:
    """The step boundaries of one hook (see the module).

    Args:
        collector: the hook's collector (its ``state`` is the lifecycle).
        extras: the hook's live rules, profiler and MLflow parts.
        parts: the framework adapter's work at each boundary.
    """

    __slots__ = ("collector", "extras", "parts", "state", "training", "driven")

    def __init__(self, collector: Collector, extras: Any, parts: StepParts) -> None:
        self.collector, self.extras, self.parts = collector, extras, parts
        self.state = collector.state
        self.training = TrainingStep()
        self.driven: set[ModeKeys] = set()
        """Modes whose steps are driven through the public step API: framework events no longer begin or end them."""

    def begin(self, mode: ModeKeys | None = None) -> bool:
        """End the open step, switch to ``mode`` (None: stay), begin the next step; return whether it saves."""
        collector, extras, parts = self.collector, self.extras, self.parts
        if not self.state.open and extras.quiet and (mode is None or mode is collector.mode) and parts.idle:
            # the steady step: no step to end, no listener to tell, nothing of the parts' to open or join, nor to
            # begin while the saving collections stay the same
            planner = collector.planner
            generation = planner.generation
            saving = collector.begin_step()
            self.training.optimizer_stepped = False
            if saving and planner.generation != generation:
                parts.step_began(saving, collector.mode)
            return saving
        parts.step_beginning()
        if self.state.open:
            self.end()
        else:
            parts.no_step_to_end(False)
        if mode is not None and mode is not collector.mode:
            collector.set_mode(mode)
        quiet = extras.quiet
        if not quiet:
            extras.check_stop(collector)
        saving = collector.begin_step()
        self.training.optimizer_stepped = False
        if not quiet:
            extras.on_step_start(collector)
        parts.step_began(saving, collector.mode)
        return saving

    def end(self, final: bool = False) -> StepRecord | None:
        """End the open step (its record goes to the writer and the listeners); return its record, if one was made."""
        if not self.state.open:
            self.parts.no_step_to_end(final)
            return None
        scalars, known = self.parts.step_ending(final)
        collector = self.collector
        record = collector.end_step(scalars, known)
        if not self.extras.quiet:
            self.extras.on_step_end(collector, record)
        return record

    def drive(self, mode: ModeKeys | None) -> None:
        """Steps of ``mode`` (None: the current mode) are driven through the public step API from now on."""
        self.driven.add(mode if mode is not None else self.collector.mode)

    def set_mode(self, mode: ModeKeys) -> None:
        """Switch mode: the open step ends (each mode counts its own steps)."""
        if mode is not self.collector.mode:
            self.end()
            self.collector.set_mode(mode)

    # --- inferred boundaries (no integration drives the steps) ----------------------------------------------
    def forward_began(self, mode: ModeKeys | None, nested: bool | None = None) -> None:
        """A registered model's forward pass began; ``mode``: the mode it implies (None: keep).

        It begins a step unless a training step is open in which no optimizer has stepped and an optimizer updates
        the model (``parts.accumulates()``, asked only then): the micro-batches of gradient accumulation are one step.
        A forward pass that would end the open step does not when it runs inside the open step's forward pass (a
        model that calls itself): ``nested``, or ``parts.nested()`` when None, asked only then.
        """
        collector, step = self.collector, self.training
        switch = mode is not None and mode is not collector.mode
        if (mode if switch else collector.mode) in self.driven:
            return
        if self.state.open:
            if (
                not switch
                and collector.mode in TRAINING_MODES
                and not step.optimizer_stepped
                and (step.optimizer_seen or self.parts.accumulates())
            ):
                return  # a further micro-batch of the open training step
            if self.parts.nested() if nested is None else nested:
                return
        if switch:
            self.end()
            collector.set_mode(mode)  # type: ignore[arg-type]  # switch: mode is not None
        self.begin()

    def optimizer_stepped(self) -> None:
        """An optimizer stepped (or ``GradScaler`` skipped its step): a training step ends here."""
        step = self.training
        step.optimizer_seen = step.optimizer_stepped = True
        mode = self.collector.mode
        if self.state.open and mode in TRAINING_MODES and mode not in self.driven:
            self.end()
