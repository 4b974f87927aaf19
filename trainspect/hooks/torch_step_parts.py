"""The PyTorch hook's work at the step boundaries the step driver decides (:class:`~.step_driver.StepParts`).

A saving step stages the weights its forward pass will use and attaches its step hooks (gradients, module inputs and
outputs) when it begins; when it ends, its losses (one value per micro-batch) and staged copies go to the collector
(device copies read a step later when nothing reads the record now). Tensors saved by the user between the
framework's events join the open step, the last one, or the first (``HookAPI.save_tensor``). A mixin of
:class:`~trainspect.hooks.torch_hook.Hook`, which owns the attributes it uses.
"""

from __future__ import annotations

from typing import Any

import torch

from trainspect.hooks.collector import Collector
from trainspect.hooks.step_driver import StepDriver
from trainspect.hooks.step_state import Captures, TrainingStep
from trainspect.hooks.torch_captures import StepHooks, decide_captures
from trainspect.hooks.torch_nan_origin import NanOrigin
from trainspect.hooks.torch_params import ParamView
from trainspect.hooks.torch_staging import StepLosses, StepStaging
from trainspect.modes import ModeKeys

__all__ = ["TorchStepParts", "BACKWARD_LOSS"]

BACKWARD_LOSS = "loss"
"""The name of the loss that ``.backward()`` was called on (collection ``losses``), as Keras names its loss."""


@torch.compiler.disable
def _open_run(collector: Any) -> None:
    """Open the run at the first step (not traced when that step is a compiled model's first forward pass)."""
    collector.open(final=True)


class TorchStepParts:
    """The PyTorch hook's :class:`~trainspect.hooks.step_driver.StepParts` (see the module)."""

    collector: Collector
    staging: StepStaging
    loss_divisor: float | str
    _driver: StepDriver
    _step: TrainingStep
    _losses: StepLosses
    _step_hooks: StepHooks
    _nan: NanOrigin
    _params: list[ParamView]
    _submodules: Any
    _pending: list[tuple[str, Any, tuple[str, ...]]]
    _extras: Any

    def _refresh_params(self) -> bool:
        raise NotImplementedError

    def _note_loss(self, name: str) -> None:
        raise NotImplementedError

    # --- saving between the framework's events (HookAPI.save_tensor, save_scalar) -----------------------------
    def _as_value(self, value: Any) -> torch.Tensor:
        return value if isinstance(value, torch.Tensor) else torch.as_tensor(value)

    def _kept(self, value: torch.Tensor) -> torch.Tensor:
        return value.detach().clone()

    def _add_forced(self, name: str, value: torch.Tensor, colls: tuple[str, ...]) -> None:
        self.staging.stage(name, value, self.collector.planner.forced_plan(name, colls))

    def _added_late(self) -> None:
        self.staging.commit(defer=False)

    # --- the step boundaries ---------------------------------------------------------------------------------
    def step_beginning(self) -> None:
        """Open the run at the first step: a model sharded since it was registered is recorded by every rank."""
        if not self.collector.opened:
            self._refresh_params()
            _open_run(self.collector)

    def step_began(self, saving: bool, mode: ModeKeys) -> None:
        """Join what was saved before the step; stage the weights and attach the step hooks of a saving step."""
        if self._pending or self._losses.held:
            self._join_early()
        captures = self._step.captures
        if saving and (captures.at_begin or captures.generation != self.collector.planner.generation):
            self._capture(self.collector)

    def _capture(self, collector: Collector) -> None:
        """What the saving step records is decided (again, if the collections or the parameters changed) and begun."""
        step = self._step
        captures = step.captures
        changed = captures.generation != collector.planner.generation
        if (changed or captures.at_begin) and self._refresh_params() or changed:
            step.captures = captures = decide_captures(collector, self._params)
        if captures.at_begin:
            self._capture_at_begin(captures)

    def step_ending(self, final: bool) -> tuple[list[Any] | None, bool]:
        """Hand the step's losses and copies to the collector; device copies are read a step later (quiet runs)."""
        if self._step_hooks.handles:
            self._step_hooks.detach()
        staging, quiet, losses = self.staging, self._extras.quiet, self._losses
        if self.loss_divisor == "micro_batches":
            losses.times_micro_batches(BACKWARD_LOSS)
        if self._nan.active:
            self._nan.step_ended(losses.values)
        scalars, known = losses.flush(staging, quiet) if losses.values else (None, False)
        if staging.staged or staging.grads or staging.late is not None:
            staging.commit(defer=quiet and not final)
        return scalars, known

    @property
    def idle(self) -> bool:
        """Nothing to do at the next step's boundaries (:attr:`StepParts.idle`).

        The run is open, nothing saved or recorded before the step waits to join it, no step hooks are attached, and a
        saving step stages nothing when it begins (its captures are decided for the saving collections).
        """
        captures = self._step.captures
        return (
            self.collector.opened
            and not self._pending
            and not self._losses.held
            and not self._step_hooks.handles
            and not captures.at_begin
            and captures.generation == self.collector.planner.generation
        )

    def no_step_to_end(self, final: bool) -> None:
        """Between steps: the step hooks come off; at close, the last step's copies are read."""
        if self._step_hooks.handles:
            self._step_hooks.detach()
        if final and self.staging.late is not None:
            self.staging.complete_late()

    def _join_early(self) -> None:
        """Tensors saved and losses recorded before the step began join it."""
        pending, self._pending = self._pending, []
        for name, value, colls in pending:
            self._add_forced(name, value, colls)
        for name in self._losses.take_held():
            self._note_loss(name)

    def _capture_at_begin(self, captures: Captures) -> None:
        """Stage the weights the step saves (as its forward pass will use them) and attach its step hooks."""
        staging, collector = self.staging, self.collector
        staging.stage_reads([(name, view.weight, collector.plan(name)) for name, view in captures.params])
        if captures.gradients or captures.module_io:
            step = self._step  # no heap scan here: before the first optimizer step, gradients are also hooked
            known = step.optimizer_seen or bool(step.accumulates)
            self._step_hooks.attach(captures, self._params, self._submodules, optimizer_known=known)
