"""The PyTorch hook: translates module, autograd and optimizer events into calls on the neutral collector."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

from trainspect.collections import Collection
from trainspect.config import ReductionConfig, SaveConfig
from trainspect.exceptions import TrainingStopped
from trainspect.hooks._guard import guarded
from trainspect.hooks.hook_api import HookAPI
from trainspect.hooks.save_plan import TensorPlan
from trainspect.hooks.torch_backward import STATE as _TAP
from trainspect.hooks.torch_backward import BackwardTap, micro_batches_name, optimizer_holds
from trainspect.hooks.torch_callbacks import Callback, own_hook_dicts
from trainspect.hooks.torch_tensors import HostScalar, Staged, combine, materialize, snapshot, stage
from trainspect.modes import ModeKeys, parse_mode

__all__ = ["Hook"]

_TRAINING = (ModeKeys.TRAIN, ModeKeys.GLOBAL)  # modes whose steps end at optimizer.step()
_LOSSES = ("losses",)
_MICRO_BATCHES = TensorPlan(True, (), False, frozenset())
BACKWARD_LOSS = "loss"
"""The name of the loss that ``.backward()`` was called on (collection ``losses``), as Keras names its loss."""


def _outputs(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, torch.Tensor)]
    return []


def _unwrap(module: nn.Module) -> nn.Module:
    """Return the user's model inside DistributedDataParallel / DataParallel wrappers (names stay the same)."""
    wrappers = (nn.parallel.DistributedDataParallel, nn.DataParallel)
    while isinstance(module, wrappers):
        module = module.module
    return module


class Hook(HookAPI):
    """Records losses, weights, gradients, module inputs/outputs and optimizer variables of a PyTorch model.

    Steps begin at the registered model's forward pass; a training step ends at ``optimizer.step()``. A weight at
    step N is the value used in step N's forward pass, a gradient at step N the one computed in its backward pass.
    Parameters are those of :class:`~trainspect.hooks.collector.Collector`, plus ``profiler_config`` and
    ``mlflow_run``.

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

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        export_tensorboard: bool = True,
        tensorboard_dir: str | None = None,
        dry_run: bool = False,
        reduction_config: ReductionConfig | None = None,
        save_config: SaveConfig | None = None,
        include_regex: Iterable[str] | str | None = None,
        include_collections: Iterable[str | Collection] | None = None,
        save_all: bool = False,
        include_workers: str = "one",
        rules: Iterable[Any] | str | None = None,
        profiler_config: Any = None,
        mlflow_run: Any = None,
    ) -> None:
        self._setup(
            "pytorch", out_dir, export_tensorboard=export_tensorboard, tensorboard_dir=tensorboard_dir,
            dry_run=dry_run, reduction_config=reduction_config, save_config=save_config, include_regex=include_regex,
            include_collections=include_collections, save_all=save_all, include_workers=include_workers, rules=rules,
            profiler_config=profiler_config, mlflow_run=mlflow_run,
        )  # fmt: skip
        self._handles: list[Any] = []
        self._top: set[int] = set()
        self._params: list[tuple[str, nn.Parameter]] = []
        self._submodules: list[tuple[str, nn.Module]] = []
        self._known: set[int] = set()  # ids of the registered models' submodules
        self._step_handles: list[Any] = []
        self._staged: list[Staged] = []
        self._grads: dict[str, Staged] = {}
        self._depth = 0
        self._loss_names: set[str] = set()
        self._step_losses: dict[str, list[HostScalar | torch.Tensor]] = {}
        self._last_snapshot: tuple[torch.Tensor, HostScalar | torch.Tensor] | None = None  # until the step ends
        self._pending: list[tuple[str, torch.Tensor, tuple[str, ...]]] = []
        self._accumulates: bool | None = None
        self._optimizer_seen = False
        self._optimizer_stepped = False
        self._saving = False
        self._globals_installed = False
        self._mode_explicit = False
        self._params_generation = -1
        self._params_now: list[tuple[str, nn.Parameter]] = []
        self._grads_now = self._grads_active = self._io_active = self._io_now = self._optimizer_now = False
        self._timer_recorder: Any = None

    # --- lifecycle -----------------------------------------------------------------------------------------
    @guarded()
    def start(self) -> None:
        """Start writing (called by ``register_module`` and ``__enter__``)."""
        self.collector.start()
        self._extras.start(self.collector)
        self._close_at_exit_once()
        recorder = self._extras.framework_recorder
        if recorder is not None and self._timer_recorder is None:
            from trainspect.hooks.torch_profiling import TorchProfilingWindow, install_dataloader_timer

            install_dataloader_timer(recorder)
            self._timer_recorder = recorder
            self._extras.set_window(
                TorchProfilingWindow(self.out_dir, self.collector.worker, self._extras.profiler_config)
            )
        if not self._globals_installed:
            self._globals_installed = True
            if recorder is not None:  # the pre-step hook only times the backward pass and the optimizer
                self._handles.append(register_optimizer_step_pre_hook(self._on_optimizer_pre))
            self._handles.append(register_optimizer_step_post_hook(self._on_optimizer_post))
            self._handles.append(BackwardTap(self))

    def _close_steps(self) -> list[Any]:
        return [self._end_step, self._remove_handles]

    def _remove_handles(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
        if self._timer_recorder is not None:
            from trainspect.hooks.torch_profiling import uninstall_dataloader_timer

            uninstall_dataloader_timer(self._timer_recorder)
            self._timer_recorder = None

    # --- registration --------------------------------------------------------------------------------------
    @guarded()
    def register_module(self, module: nn.Module) -> None:
        """Hook a model: its forward pass marks the steps; its parameters and submodules are recorded."""
        self.start()
        BackwardTap.refresh()
        if id(module) in self._top:
            return
        self._top.add(id(module))
        own_hook_dicts(module)
        self._handles.append(module.register_forward_pre_hook(Callback(self._on_top_forward_pre)))
        self._handles.append(module.register_forward_hook(Callback(self._on_top_forward)))
        module = _unwrap(module)
        self._top.add(id(module))
        prefix = type(module).__name__
        for pname, param in module.named_parameters():
            self._params.append((f"{prefix}_{pname}", param))
        for path, sub in module.named_modules():
            object.__setattr__(sub, "_trainspect_name", path or prefix)
            self._submodules.append((path or prefix, sub))
            self._known.add(id(sub))

    register_hook = register_module

    def knows(self, module: nn.Module) -> bool:
        """Whether ``module`` is a registered model or one of its submodules."""
        return id(module) in self._known or id(module) in self._top

    def _attach_step_hooks(self) -> None:
        """Hook gradients and module inputs/outputs for this step only.

        A module or tensor with a hook takes PyTorch's slower call path, so steps that save none of them run
        without these hooks.
        """
        if self._grads_active:
            for name, param in self._params:
                if param.requires_grad:
                    hook = self._grad_hook(f"gradient/{name}")
                    self._step_handles.append(param.register_post_accumulate_grad_hook(Callback(hook)))
        if self._io_active:
            for path, sub in self._submodules:
                own_hook_dicts(sub)
                self._step_handles.append(sub.register_forward_hook(Callback(self._io_hook(path))))

    def _detach_step_hooks(self) -> None:
        handles, self._step_handles = self._step_handles, []
        for handle in handles:
            handle.remove()

    @guarded()
    def register_loss(self, loss_module: nn.Module) -> None:
        """Record a loss module's output every step (collection ``losses``)."""
        self.start()
        name = f"{type(loss_module).__name__}_output_0"
        own_hook_dicts(loss_module)
        self._handles.append(loss_module.register_forward_hook(Callback(self._loss_hook(name))))

    # --- user API ------------------------------------------------------------------------------------------
    @guarded()
    def set_mode(self, mode: ModeKeys | str) -> None:
        """Switch between TRAIN, EVAL, PREDICT and GLOBAL; each mode counts its own steps.

        Until this is called, the mode follows the model: ``model.train()`` is TRAIN, ``model.eval()`` EVAL.
        """
        self._mode_explicit = True
        if parse_mode(mode) is not self.collector.mode:
            self._end_step()
        self.collector.set_mode(mode)

    @guarded()
    def save_scalar(self, name: str, value: float, sm_metric: bool = False, timestamp: float | None = None) -> None:
        """Save a scalar at the current step as ``scalar/<name>`` (collection ``scalars``).

        ``sm_metric`` (SageMaker Metrics) is accepted as smdebug takes it; the scalar is also an MLflow metric when
        the run logs to MLflow.
        """
        self._save_now(f"scalar/{name}", torch.as_tensor(float(value), dtype=torch.float64), ("scalars",))

    @guarded()
    def save_tensor(
        self, tensor_name: str, tensor_value: Any, collections_to_write: str | list[str] = "default"
    ) -> None:
        """Save any array-like at the current step into the given collections."""
        colls = [collections_to_write] if isinstance(collections_to_write, str) else list(collections_to_write)
        for cname in colls:
            self.collector.collections.get(cname).add_tensor_name(tensor_name)
            self.collector.planner.included.add(cname)
        value = tensor_value if isinstance(tensor_value, torch.Tensor) else torch.as_tensor(tensor_value)
        self._save_now(tensor_name, value, tuple(colls))

    def _save_now(self, name: str, value: torch.Tensor, colls: tuple[str, ...]) -> None:
        """Save at the open step; between steps, at the last step (before the first step: at the first)."""
        self.start()
        if self.collector.step_open:
            self._stage_forced(name, value, colls)
        elif self.collector.reopen_last_step():
            self._stage_forced(name, value, colls)
            staged, self._staged = self._staged, []
            for s, host, reds in materialize(staged):
                self.collector.add(s.name, s.plan, host, reds, s.shape)
            self.collector.finish_step()
        else:
            self._pending.append((name, value.detach().clone(), colls))

    def _stage_forced(self, name: str, value: torch.Tensor, colls: tuple[str, ...]) -> None:
        staged = stage(name, value, self.collector.planner.forced_plan(name, colls))
        if staged is not None:
            self._staged.append(staged)

    # --- step boundaries -----------------------------------------------------------------------------------
    def _begin_step(self) -> None:
        collector, extras = self.collector, self._extras
        if self._step_handles or collector.step_open:
            self._end_step()
        if not extras.quiet:
            extras.check_stop(collector)
        self._saving = collector.next_step()
        self._optimizer_stepped = False
        if self._pending:
            pending, self._pending = self._pending, []
            for name, value, colls in pending:
                self._stage_forced(name, value, colls)
        if not extras.quiet:
            extras.on_step_start(collector)
        self._grads_active = self._io_active = False
        if self._saving:
            if self._params_generation != collector.planner.generation:
                self._decide_saving()
            for name, param in self._params_now:
                self._stage(name, param)
            self._grads_active, self._io_active = self._grads_now, self._io_now
            if self._grads_active or self._io_active:
                self._attach_step_hooks()

    def _decide_saving(self) -> None:
        """What a saving step records (decided again only when the planner's set of saving collections changes)."""
        planner = self.collector.planner
        self._params_generation = planner.generation
        self._params_now = [(n, p) for n, p in self._params if self._wanted(n)]
        self._grads_now = any(self._wanted(f"gradient/{n}") for n, _ in self._params)
        self._optimizer_now = self._wanted("optimizer/lr_group_0") or self._wanted("optimizer/momentum_group_0")
        self._io_now = planner.takes_modules

    def _wanted(self, name: str) -> bool:
        plan = self.collector.plan(name)
        return plan.raw or bool(plan.reductions)

    def _end_step(self) -> None:
        if self._step_handles:
            self._detach_step_hooks()
        if not self.collector.step_open:
            return
        if self._step_losses:
            self._last_snapshot = None
            self._flush_losses()
        staged = self._staged
        if self._grads:
            staged += self._grads.values()
            self._grads = {}
        self._staged = []
        collector = self.collector
        for s, value, reds in materialize(staged):
            collector.add(s.name, s.plan, value, reds, s.shape)
        record = collector.finish_step()
        if not self._extras.quiet:
            self._extras.on_step_end(collector, record)

    def _flush_losses(self) -> None:
        """Add the step's losses: one value each, the mean of its micro-batches' (also saved as ``*_micro_batches``)."""
        losses, self._step_losses = self._step_losses, {}
        for name, values in losses.items():
            plan = self.collector.planner.plan(name, _LOSSES)
            value, micro = combine(values)
            if micro is not None and (plan.raw or plan.reductions):
                self._stage(micro_batches_name(name), micro, plan=_MICRO_BATCHES)
            if isinstance(value, tuple):
                if plan.raw and not plan.reductions and self._extras.quiet:
                    self.collector.add_scalar(name, plan, *value)  # the common case: no NumPy on this thread
                    continue
                value = torch.from_numpy(np.array(value[0], dtype=value[1]))
            self._stage(name, value, plan=plan)

    def _stage(self, name: str, tensor: Any, extra: Iterable[str] = (), plan: TensorPlan | None = None) -> None:
        if plan is None:
            plan = self.collector.plan(name, extra)
        if plan.raw or plan.reductions:
            staged = stage(name, tensor, plan)
            if staged is not None:
                self._staged.append(staged)

    # --- torch callbacks -----------------------------------------------------------------------------------
    # The four callbacks below run at every step: they inline the guard (``Guarded._internal_error``) instead of
    # taking ``@guarded``'s extra call, and call the collector's unguarded step methods.
    def _on_top_forward_pre(self, module: nn.Module, args: Any) -> None:
        if self.disabled:
            return
        try:
            self._depth += 1
            if self._depth > 1:
                return
            collector = self.collector
            if not self._mode_explicit:
                inferred = _TAP.mode or (ModeKeys.TRAIN if module.training else ModeKeys.EVAL)
                if inferred is not collector.mode:
                    self._end_step()
                    collector.set_mode(inferred)
            if (
                not collector.step_open
                or collector.mode not in _TRAINING
                or self._optimizer_stepped
                or not (self._optimizer_seen or self._optimizer_exists())
            ):
                self._begin_step()  # a training step with an optimizer spans every forward until optimizer.step()
            if not self._extras.quiet:
                self._extras.on_forward_start()
        except TrainingStopped:
            raise
        except Exception as exc:
            self._internal_error("_on_top_forward_pre", exc)

    def _on_top_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        if self.disabled:
            return
        try:
            self._depth = max(0, self._depth - 1)
            if self._depth == 0 and not self._extras.quiet:
                self._extras.on_forward_end()
        except Exception as exc:
            self._internal_error("_on_top_forward", exc)

    def _optimizer_exists(self) -> bool:
        """Whether an optimizer updates the model: decided once, at the first forward that could accumulate."""
        if self._accumulates is None:
            self._accumulates = optimizer_holds([p for _, p in self._params])
        return self._accumulates

    def _io_hook(self, path: str) -> Any:
        @guarded()
        def hook(hook_self: Hook, module: nn.Module, args: Any, output: Any) -> None:
            ins, outs = self.collector.planner.module_collections(path, type(module).__name__, module)
            for i, t in enumerate(_outputs(args)):  # by module (ins) or by name (include_regex)
                self._stage(f"{path}_input_{i}", t, ins)
            for i, t in enumerate(_outputs(output)):
                self._stage(f"{path}_output_{i}", t, outs)

        return lambda module, args, output: hook(self, module, args, output)

    def _grad_hook(self, name: str) -> Any:
        @guarded()
        def hook(hook_self: Hook, param: torch.Tensor) -> None:
            if param.grad is not None:
                plan = self.collector.plan(name)
                if plan.raw or plan.reductions:
                    staged = stage(name, param.grad, plan)
                    if staged is not None:
                        self._grads[name] = staged

        return lambda param: hook(self, param)

    def _loss_hook(self, name: str) -> Any:
        return lambda module, args, output: self.record_loss(name, output)

    def record_loss(self, name: str, value: Any) -> None:
        """Record a loss value computed outside a registered loss module (used by zero-script-change)."""
        if self.disabled or not isinstance(value, torch.Tensor):
            return
        try:
            if not self.collector.step_open:
                self._begin_step()
            if name not in self._loss_names:
                self._loss_names.add(name)
                self.collector.collections.get("losses").add_tensor_name(name)
            last = self._last_snapshot
            if last is not None and last[0] is value:
                value = last[1]  # the backward loss is the loss module's output: one host copy, not two
            else:
                snap = snapshot(value)  # the value now, whatever the script does to the tensor later
                self._last_snapshot, value = (value, snap), snap
            values = self._step_losses.get(name)
            if values is None:
                self._step_losses[name] = [value]
            else:
                values.append(value)  # gradient accumulation: one value per micro-batch
        except TrainingStopped:
            raise
        except Exception as exc:
            self._internal_error("record_loss", exc)

    def _on_backward(self, loss: torch.Tensor) -> None:
        """``loss.backward()`` was called: record ``loss`` (collection ``losses``) at the open step."""
        if not self.disabled and self.collector.step_open:
            self.record_loss(BACKWARD_LOSS, loss)

    def _on_functional_loss(self, name: str, value: Any) -> None:
        """A functional loss (``F.mse_loss`` …) was computed outside a loss module: record it as that module's.

        Only inside a step (one a forward pass of the model opened): a loss computed elsewhere opens none.
        """
        if not self.disabled and self.collector.step_open:
            self.record_loss(name, value)

    def _on_scaler_step(self) -> None:
        """``GradScaler.step()`` returned: a step the scaler skipped (inf/NaN gradients) ends here too."""
        if self.disabled:
            return
        try:
            if self.collector.step_open and self.collector.mode in _TRAINING:
                self._optimizer_seen = self._optimizer_stepped = True
                self._end_step()
        except TrainingStopped:
            raise
        except Exception as exc:
            self._internal_error("_on_scaler_step", exc)

    @guarded()
    def _on_optimizer_pre(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self._optimizer_seen = True
        self._extras.on_optimizer_start()

    def _on_optimizer_post(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        if self.disabled:
            return
        try:
            self._optimizer_seen = True
            if not self._extras.quiet:
                self._extras.on_optimizer_end()
            if not self.collector.step_open:
                return
            if self._saving and self._optimizer_now:
                self._stage_optimizer_variables(optimizer)
            self._optimizer_stepped = True
            if self.collector.mode in _TRAINING:
                self._end_step()
        except TrainingStopped:
            raise
        except Exception as exc:
            self._internal_error("_on_optimizer_post", exc)

    def _stage_optimizer_variables(self, optimizer: torch.optim.Optimizer) -> None:
        for i, group in enumerate(optimizer.param_groups):
            for key in ("lr", "momentum"):
                name = f"optimizer/{key}_group_{i}"
                if isinstance(group.get(key), (int, float)) and self._wanted(name):
                    self._stage(name, torch.tensor(float(group[key]), dtype=torch.float64))
