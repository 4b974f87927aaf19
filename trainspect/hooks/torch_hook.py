"""The PyTorch hook: translates module, autograd and optimizer events into the step driver's and collector's calls.

When steps begin and end is the step driver's (:mod:`trainspect.hooks.step_driver`: the public ``begin_step`` /
``end_step``, or inferred from this hook's forward and optimizer events); what a PyTorch step records at its
boundaries is :mod:`trainspect.hooks.torch_step_parts`. A step's tensors travel through
:class:`~trainspect.hooks.torch_staging.StepStaging`, its losses through
:class:`~trainspect.hooks.torch_staging.StepLosses`, its gradient and module hooks through
:class:`~trainspect.hooks.torch_captures.StepHooks`; every callback goes through the one guard (:mod:`._guard`).
"""

from __future__ import annotations

import os
import sys
from typing import Any

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from trainspect.hook_settings import signature
from trainspect.hooks._guard import guarded
from trainspect.hooks.hook_api import HookAPI
from trainspect.hooks.step_driver import TRAINING_MODES, StepDriver
from trainspect.hooks.step_state import NO_CAPTURES
from trainspect.hooks.torch_amp import record_amp_skip
from trainspect.hooks.torch_backward import BackwardTap, optimizer_holds, watch_loss_module
from trainspect.hooks.torch_callbacks import Callback, ForwardTap, own_hook_dicts, tap_forward, tappable
from trainspect.hooks.torch_captures import StepHooks, stage_optimizer_variables
from trainspect.hooks.torch_loss_series import OptimizerLosses
from trainspect.hooks.torch_models import ModelRegistry, infer_mode, warn_unregistered
from trainspect.hooks.torch_nan_origin import NanOrigin, nan_wanted
from trainspect.hooks.torch_params import ParamView
from trainspect.hooks.torch_staging import StepLosses, StepStaging, first_closure_losses
from trainspect.hooks.torch_step_parts import BACKWARD_LOSS, TorchStepParts
from trainspect.modes import TRAIN, ModeKeys

__all__ = ["Hook"]

REDECIDE = 16
"""How many times a run decides again whether an optimizer updates the model (each a heap scan)."""


class Hook(TorchStepParts, HookAPI):
    """Records losses, weights, gradients, module inputs/outputs and optimizer variables of a PyTorch model.

    Steps begin at the registered model's forward pass and a training step ends at ``optimizer.step()``, unless the
    loop (or a trainer integration) drives them with ``begin_step`` / ``end_step``. A weight at
    step N is the value used in step N's forward pass, a gradient at step N the one computed in its backward pass:
    by default the one the optimizer applies, read when ``optimizer.step()`` runs (after DDP's all-reduce, FSDP's
    reduce-scatter, DeepSpeed's reduction: the same on every rank; unscaled under ``GradScaler``). Sharded parameters
    (FSDP2/DTensor, tensor parallel, classic FSDP, DeepSpeed ZeRO-3) are recorded as each rank's piece (see
    docs/distributed.md). Its settings are the rows of :data:`trainspect.hook_settings.SETTINGS`
    (docs/configuration.md): ``save_config``, ``include_collections``, ``rules``, ``profiler_config``, ``mlflow_run``,
    ``local_gradients`` (record each rank's own gradient as its backward pass leaves it, before any reduction) …; a
    setting no hook takes, or a bad value, raises ``ConfigError`` naming it.

    Example:
        >>> import tempfile, torch, trainspect as ts
        >>> model, out = torch.nn.Linear(2, 1), tempfile.mkdtemp()
        >>> with ts.torch.Hook(out) as hook:
        ...     hook.register_module(model)
        ...     loss = model(torch.ones(1, 2)).sum()
        ...     hook.save_scalar("my_loss", loss.item())
        >>> ts.create_trial(out).tensor_names()
        ['scalar/my_loss']
    """

    # its instance attributes as slots, read by the step's callbacks without a dict lookup (see the collector's); the
    # names its bases give a class-level default (``disabled``, ``_mode_explicit``) stay in its ``__dict__``
    __slots__ = (
        "_driver",
        "_state",
        "_step",
        "_losses",
        "_loss_names",
        "_timer_recorder",
        "_nan",
        "_step_hooks",
        "_series",
        "staging",
        "collector",
        "_extras",
        "_registry",
        "loss_divisor",
        "_given",
        "settings",
        "local_gradients",
        "_pending",
        "_handles",
        "_top",
        "_submodules",
        "_params",
        "_unregistered",
        "_globals_installed",
        "_refs_decided",
        "_redecided",
    )

    _ends_with_its_thread = True  # the first step runs in the training thread (see HookAPI._run_opened)
    _nothing_recorded_why = (
        "no registered module was called and no backward pass ran with one registered (register the model that "
        "trains: hook.register_module(model))"
    )

    def __init__(self, out_dir: str | os.PathLike[str], **settings: Any) -> None:
        self._setup("pytorch", {"out_dir": out_dir, **settings})
        self._handles: list[Any] = []
        self._driver = StepDriver(self.collector, self._extras, self)
        self._state = self.collector.state  # IDLE / OPEN / CLOSED, and whether the open step saves
        self._step = self._driver.training  # forward depth, optimizer seen/stepped, what a saving step captures
        self.staging = StepStaging(self.collector)
        self._registry = registry = ModelRegistry(self.collector.collections, self.staging.skips.warn)
        self._top, self._submodules = registry.top, registry.submodules  # (changed in place; benchmarks clear them)
        self._params: list[ParamView] = registry.params
        self._series = OptimizerLosses()  # one loss series per optimizer when steps alternate optimizers
        self._unregistered = 0  # 1: a backward pass no registered model's step recorded; 2: warned about it
        self._losses = StepLosses(self.collector.planner)
        self._step_hooks = StepHooks(self, local_gradients=self.local_gradients)
        self._loss_names: set[str] = set()
        self._globals_installed = self._mode_explicit = False
        self._timer_recorder: Any = None
        self._refs_decided = self._redecided = 0  # see accumulates
        self.loss_divisor: float | str = 1.0
        """The loss ``.backward()`` is called on is the script's divided by this (a trainer's gradient accumulation):
        the recorded ``loss`` is multiplied back. ``"micro_batches"``: by the number of micro-batches of its step
        (Hugging Face's ``Trainer``). Set by the trainer integrations (:mod:`trainspect.hooks.integrations`)."""
        self._nan = NanOrigin(self, self._extras.note_origin, active=nan_wanted(self._extras.rules))

    __init__.__signature__ = signature("pytorch")  # type: ignore[attr-defined]  # one keyword per setting

    # --- lifecycle -----------------------------------------------------------------------------------------
    @guarded()
    def start(self) -> None:
        """Start writing (called by ``register_module`` and ``__enter__``)."""
        self._extras.attach(self.collector)
        self._close_at_exit_once()
        recorder = self._extras.framework_recorder
        if recorder is not None and self._timer_recorder is None:
            from trainspect.hooks.cuda_memory import install_cuda_memory
            from trainspect.hooks.torch_profiling import install_dataloader_timer

            install_dataloader_timer(recorder)
            install_cuda_memory(recorder)  # the job's CUDA memory per step (allocator counters, no sync)
            self._timer_recorder = recorder
        self.collector.start()  # the run opens at the first step
        if not self._globals_installed:
            self._globals_installed = True
            self._handles.append(register_optimizer_step_pre_hook(self._on_optimizer_pre))
            self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_post))
            self._handles.append(BackwardTap(self))

    def _start_worker_parts(self) -> None:
        if self._extras.framework_recorder is not None:
            from trainspect.hooks.torch_profiling import TorchProfilingWindow

            self._extras.set_window(
                TorchProfilingWindow(self.out_dir, self.collector.worker, self._extras.profiler_config)
            )

    def _close_steps(self) -> list[Any]:
        return [self._save_pending, lambda: self._driver.end(final=True), self._nan.close, self._remove_handles]

    @guarded(True)
    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until everything recorded so far is on disk (the last step's loss read from its device too)."""
        if self.staging.late is not None:
            self.staging.complete_late()
        return super().flush(timeout)

    def _remove_handles(self) -> None:
        while self._handles:
            self._handles.pop().remove()
        if self._timer_recorder is not None:
            from trainspect.hooks.torch_profiling import uninstall_dataloader_timer

            uninstall_dataloader_timer(self._timer_recorder)
            self._timer_recorder = None

    # --- registration --------------------------------------------------------------------------------------
    @guarded()
    def register_module(self, module: nn.Module, *, module_hooks: bool = True) -> None:
        """Hook a model: its forward pass marks the steps; its parameters and submodules are recorded.

        ``module_hooks=False``: the caller reports the model's forward passes itself, calling ``_on_top_forward_pre``
        and ``_on_top_forward`` around each (``autolog``'s global module hooks do: one hook per model, not three).
        """
        BackwardTap.refresh()
        drivers = self._registry.add(module)  # the module, or a container's children (see torch_models)
        timed = self._extras.profiler_config is not None  # the profiler times each forward pass: its end is hooked
        for i, driver in enumerate(drivers if module_hooks and drivers else ()):
            pre = Callback(self._on_top_forward_pre if i == 0 else self._on_follower_forward_pre)
            own_hook_dicts(driver)
            if tappable(driver):  # PyTorch's fast path of Module.__call__ kept (see ForwardTap)
                self._handles.append(tap_forward(driver, pre, ForwardTap))
            else:
                self._handles.append(driver.register_forward_pre_hook(pre))
            if timed:
                self._handles.append(driver.register_forward_hook(Callback(self._on_top_forward), always_call=True))
        if drivers is not None:
            self._refresh_params()
            self._handles.append(self._nan.attach(self._registry))
            self._step.captures = NO_CAPTURES  # decided again, with this model's parameters
            if self._state.open and self._state.saving:  # a driven step began before its model was known
                self._capture(self.collector)
        self.start()  # after the parameters are known: a sharded model is recorded by every rank from the start

    def _refresh_params(self) -> bool:
        """List the registered models' parameters (and submodules) again if they changed; return whether they did."""
        return self._registry.refresh(self.collector)

    register_hook = register_module

    def knows(self, module: nn.Module) -> bool:
        """Whether ``module`` is a registered model or one of its submodules."""
        return self._registry.knows(module)

    @guarded()
    def register_loss(self, loss_module: nn.Module) -> None:
        """Record a loss module's output every step (collection ``losses``)."""
        self.start()
        name = f"{type(loss_module).__name__}_output_0"
        # PyTorch's own loss classes: the loss tap hands their output over, no module hook is needed
        handle: Any = watch_loss_module(loss_module, Callback(self._on_loss_output, name))
        if handle is None:
            own_hook_dicts(loss_module)
            handle = loss_module.register_forward_hook(Callback(self._on_loss_module, name))
        self._handles.append(handle)

    # --- torch callbacks: translated into the driver's events ----------------------------------------------
    @guarded(inline=True)
    def _on_top_forward_pre(self, module: nn.Module, args: Any) -> None:
        if self._mode_explicit:
            mode = None
        elif module.training and torch.is_grad_enabled():
            mode = TRAIN  # infer_mode's first answer, asked at every training step: without its call
        else:
            mode = infer_mode(module, self.collector.mode, self._state.open and not self._step.optimizer_stepped)
        if self._timer_recorder is None:
            self._driver.forward_began(mode)
            return
        nested = self.nested()  # the profiler asks anyway: the call stack is read once, not again by the driver
        self._driver.forward_began(mode, nested)
        if not nested:
            self._extras.on_forward_start()

    def nested(self) -> bool:
        """Whether the forward pass that began runs inside a registered model's (``StepParts.nested``).

        The call stack is read (see ``ModelRegistry.inside_forward``).
        """
        return self._registry.inside_forward(sys._getframe(1))

    def _on_follower_forward_pre(self, module: nn.Module, args: Any) -> None:
        """A container's later child (``decoder`` after ``encoder``): it joins the open step of its mode."""
        step, collector = self._step, self.collector
        if (
            self.disabled
            or not self._state.open
            or step.optimizer_stepped
            or not (self._mode_explicit or infer_mode(module, collector.mode, True) is collector.mode)
        ):
            self._on_top_forward_pre(module, args)
        elif self._timer_recorder is not None and not self.nested():
            self._extras.on_forward_start()

    @guarded(inline=True)
    def _on_top_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        """A registered model's forward pass ended (hooked only when the profiler times it; ``autolog`` tells too)."""
        if self._timer_recorder is not None and not self.nested():
            self._extras.on_forward_end()

    def accumulates(self) -> bool:
        """Whether an optimizer updates the model (``StepParts.accumulates``), decided when first asked.

        Asked at the first forward pass that could accumulate. A "no" is decided again when the model's first
        parameter gains a reference (an optimizer built after the first steps holds one in its ``param_groups``), at
        most :data:`REDECIDE` times: the open step began before that optimizer and ends here; the micro-batches of its
        first step are then one step.
        """
        step = self._step
        if step.accumulates is None:
            self._decide_accumulates()
        elif not step.accumulates and self._redecided < REDECIDE and self._param_refs() != self._refs_decided:
            self._redecided += 1
            self._decide_accumulates()
            return False
        return bool(step.accumulates)

    def _param_refs(self) -> int:
        params = self._registry.params
        return sys.getrefcount(params[0].param) if params else 0

    def _decide_accumulates(self) -> None:
        self._refresh_params()
        self._step.accumulates = optimizer_holds([view.param for view in self._registry.params])
        self._refs_decided = self._param_refs()

    def _on_loss_module(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        """A registered loss module's forward hook: its output is recorded (:meth:`_on_loss_output`)."""
        self._on_loss_output(name, output)

    @guarded(inline=True)
    def _on_loss_output(self, name: str, output: Any) -> None:
        """A registered loss module's output, recorded at the open step.

        Called by its forward hook, or by the loss tap (see :func:`~trainspect.hooks.torch_backward.watch_loss_module`).
        """
        if self._state.open and name in self._loss_names and isinstance(output, torch.Tensor):
            self._losses.add(name, output)  # record_loss's steady state
        else:
            self.record_loss(name, output)

    @guarded()
    def record_loss(self, name: str, value: Any) -> None:
        """Record a loss value computed outside a registered loss module (used by zero-script-change)."""
        if not isinstance(value, torch.Tensor):
            return
        if not self._state.open:
            if self.collector.mode in self._driver.driven:  # driven steps: a loss between them joins the next one
                self._losses.hold(name, value)
                return
            self._driver.begin()
            if not self._state.open:
                return  # closed
        if name not in self._loss_names:
            self._note_loss(name)
        self._losses.add(name, value)

    def _note_loss(self, name: str) -> None:
        if name not in self._loss_names:
            self._loss_names.add(name)
            self.collector.collections.get("losses").add_tensor_name(name)

    def _on_backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` was called: record ``loss`` (collection ``losses``) at the open step.

        A backward pass outside any step (the model called as ``model.forward(x)``, or a container's submodule
        outside the registered ones) opens one: its loss, weights and gradients are recorded (not its module tensors).
        """
        if not self._state.open and not self.disabled and ModeKeys.TRAIN not in self._driver.driven:
            self._open_at_backward(loss)
        divisor = self.loss_divisor
        if divisor != 1.0 and type(divisor) is float:
            loss = loss.detach() * divisor
        if self._state.open and BACKWARD_LOSS in self._loss_names and not self.disabled:
            self._losses.add(BACKWARD_LOSS, loss)  # _on_functional_loss's steady state, one call less per step
        else:
            self._on_functional_loss(BACKWARD_LOSS, loss)

    @guarded()
    def _open_at_backward(self, loss: torch.Tensor) -> None:
        if not self._registry.models:
            self._unregistered = self._unregistered or 1  # warned about at the optimizer step
            return
        if not self._registry.trains(loss):
            return  # another model's backward pass (a second hook's, an unregistered one's)
        if not self._mode_explicit and self.collector.mode is not ModeKeys.TRAIN:
            self.collector.set_mode(ModeKeys.TRAIN)  # a backward pass trains
        self._driver.begin()

    @guarded()
    def _on_functional_loss(self, name: str, value: Any) -> None:
        """A functional loss (``F.mse_loss`` …) was computed outside a loss module: record it as that module's.

        Only inside a step (one a forward pass of the model opened); one that requires a gradient, computed before the
        step's first forward pass (Lightning's discriminator loss on real data), joins the next step if it begins
        before the next optimizer step. (Also the backward loss's way in, from :meth:`_on_backward`.)
        """
        if not self._state.open:
            if isinstance(value, torch.Tensor) and value.requires_grad and self._registry.models:
                self._losses.hold(name, value)  # the next step's, if one begins before the next optimizer step
            return
        if name not in self._loss_names or not isinstance(value, torch.Tensor):
            self.record_loss(name, value)
            return
        self._losses.add(name, value)  # record_loss's steady state: a loss is taken at every step

    @guarded()
    def _on_scaler_step(self, scaler: Any, optimizer: Any) -> None:
        """``GradScaler.step()`` returned: a step the scaler skipped (inf/NaN gradients) ends here too (recorded)."""
        if self._state.open and self.collector.mode in TRAINING_MODES:
            record_amp_skip(self, self._nan, scaler, optimizer, self._params, self._losses.values)
            self._step_hooks.read_gradients()  # a step the scaler skipped: its (unscaled, inf/NaN) gradients
            self._driver.optimizer_stepped()

    @guarded(inline=True)
    def _on_optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> Any:
        self._step.optimizer_seen = True
        if self._nan.active:
            self._nan.check_gradients(self._params, self._losses.values)
        if self._timer_recorder is not None:  # the profiler times the backward pass and the optimizer
            self._extras.on_optimizer_start()
        return first_closure_losses(self._losses, args, kwargs) if len(args) > 1 or kwargs else None

    @guarded(inline=True)
    def _on_optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        losses, state = self._losses, self._state
        losses.frozen = False
        if losses.held:
            losses.held.clear()
        if not self._extras.quiet:
            self._extras.on_optimizer_end()
        if state.open:
            if state.saving and self._step.captures.optimizer:
                stage_optimizer_variables(self.collector, self.staging, optimizer)
            if self._step_hooks.handles:  # a step that opened inside optimizer.step() (its closure's forward pass)
                self._step_hooks.read_gradients()
            series = self._series
            if (series.owners or not series.decided) and self.collector.mode in TRAINING_MODES:
                series.name_step(losses, optimizer, self._registry, self.collector.collections)
        elif self._unregistered == 1:
            self._unregistered = warn_unregistered()
        self._driver.optimizer_stepped()
