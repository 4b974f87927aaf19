"""What a saving PyTorch step records beside losses, and the per-step hooks that record it.

A module or tensor with a hook takes PyTorch's slower call path, so gradient and module input/output hooks are
attached only for the steps that save them (:class:`StepHooks`), and what a saving step records is decided again
only when the planner's set of saving collections changes (:func:`decide_captures`).

Which gradient a saving step records: by default the one the optimizer applies, read when ``optimizer.step()``
runs (a global optimizer pre-step hook, installed only while such a step is open; an optimizer step given a closure,
which computes the gradient, is read after the closure returns; a step that opened inside ``optimizer.step()``, its
closure's forward pass, when ``step()`` returns): after DDP's all-reduce, FSDP's
reduce-scatter and DeepSpeed's reduction, so every rank records the synchronised gradient (with ``GradScaler``,
unscaled; a step the scaler skips is read when ``GradScaler.step`` returns). Until an optimizer is known (a loop
without one), post-accumulate-grad hooks record each parameter's gradient as backward leaves it. With
``local_gradients``, those hooks record each rank's own gradient before any reduction; sharded parameters (FSDP,
FSDP2, tensor parallel, ZeRO-3), whose per-rank gradient before the reduction is no piece of the full one, are read at
``optimizer.step()`` either way.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn
from torch.optim.optimizer import register_optimizer_step_pre_hook

from trainspect.hooks._guard import guarded
from trainspect.hooks.collector import Collector
from trainspect.hooks.step_state import Captures
from trainspect.hooks.torch_callbacks import Callback, own_hook_dicts
from trainspect.hooks.torch_params import ParamView
from trainspect.hooks.torch_staging import StepStaging

__all__ = ["StepHooks", "decide_captures", "stage_optimizer_variables", "wanted"]


class Owner(Protocol):
    """What the step's hooks use of the PyTorch hook (``trainspect.hooks.torch_hook.Hook``, which imports this)."""

    collector: Collector
    staging: StepStaging


def wanted(collector: Collector, name: str) -> bool:
    """Whether anything of tensor ``name`` is saved at the open step."""
    plan = collector.plan(name)
    return plan.raw or bool(plan.reductions)


def decide_captures(collector: Collector, views: list[ParamView]) -> Captures:
    """What a saving step records for the planner's current set of saving collections (``params``: name, view)."""
    return Captures(
        generation=collector.planner.generation,
        params=tuple((v.name, v) for v in views if wanted(collector, v.name)),
        gradients=any(wanted(collector, v.grad_name) for v in views),
        module_io=collector.planner.takes_modules,
        optimizer=wanted(collector, "optimizer/lr_group_0") or wanted(collector, "optimizer/momentum_group_0"),
    )


def stage_optimizer_variables(collector: Collector, staging: StepStaging, optimizer: torch.optim.Optimizer) -> None:
    """Stage each parameter group's learning rate and momentum that the open step saves."""
    for i, group in enumerate(optimizer.param_groups):
        for key in ("lr", "momentum"):
            name = f"optimizer/{key}_group_{i}"
            if isinstance(group.get(key), (int, float)) and wanted(collector, name):
                staging.stage(name, torch.tensor(float(group[key]), dtype=torch.float64), collector.plan(name))


def _outputs(value: Any) -> list[Any]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [v for v in value if isinstance(v, torch.Tensor)]
    if isinstance(value, dict):
        return [v for v in value.values() if isinstance(v, torch.Tensor)]
    return []


class StepHooks:
    """Gradient and module input/output hooks of one step; :meth:`detach` removes them when the step ends.

    Args:
        hook: the PyTorch hook.
        local_gradients: record each rank's own gradient, before any reduction (see the module's docstring).
    """

    def __init__(self, hook: Owner, local_gradients: bool = False) -> None:
        self._hook = hook
        self.local_gradients = local_gradients
        self.handles: list[Any] = []
        self._at_step: list[ParamView] = []  # gradients read when optimizer.step() runs (or GradScaler skips it)

    def attach(
        self, captures: Captures, views: list[ParamView], modules: list[Any], optimizer_known: bool = True
    ) -> None:
        """Hook the gradients and module inputs/outputs ``captures`` asks for.

        ``optimizer_known``: an optimizer is known to update the model (else gradients are also hooked as backward
        leaves them, and replaced by the optimizer's if one steps after all).
        """
        if captures.gradients:
            self._attach_gradients(views, optimizer_known)
        if captures.module_io:
            for path, sub in modules:
                own_hook_dicts(sub)
                self.handles.append(sub.register_forward_hook(Callback(self._io_hook(path))))

    def _attach_gradients(self, views: list[ParamView], optimizer_known: bool) -> None:
        local = self.local_gradients
        for view in views:
            if view.hookable and view.param.requires_grad and (not optimizer_known or (local and not view.sharded)):
                hook = self._grad_hook(view)
                self.handles.append(view.param.register_post_accumulate_grad_hook(Callback(hook)))
        self._at_step = [v for v in views if not local or v.sharded]
        if self._at_step:
            owner = self._hook
            at_step = guarded()(lambda hook_self, args, kwargs: self._at_optimizer_step(args, kwargs))
            self.handles.append(register_optimizer_step_pre_hook(lambda o, a, k: at_step(owner, a, k)))

    def _at_optimizer_step(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``optimizer.step()`` begins: read the gradients, or after its closure (which computes them) returns."""
        closure = kwargs.get("closure", args[1] if len(args) > 1 else None)  # args[0]: the optimizer
        if not callable(closure):
            self.read_gradients()
            return None
        owner, read = self._hook, guarded()(lambda hook_self: self.read_gradients())

        def then_read() -> Any:  # Lightning's automatic optimization and LBFGS compute the gradient in the closure
            result = closure()
            read(owner)
            return result

        if "closure" in kwargs:
            return args, {**kwargs, "closure": then_read}
        return (args[0], then_read, *args[2:]), kwargs

    def read_gradients(self) -> None:
        """Stage the gradients the optimizer applies (once per step; by default they replace those hooked before)."""
        views, self._at_step = self._at_step, []
        if not views:
            return
        owner = self._hook
        staging, collector = owner.staging, owner.collector
        if not self.local_gradients:
            staging.grads.clear()  # gradients hooked as backward left them: the optimizer's replace them
        plan = collector.plan
        staging.stage_reads([(v.grad_name, v.grad, plan(v.grad_name)) for v in views], gradient=True)

    def detach(self) -> None:
        """Remove this step's hooks."""
        handles, self.handles = self.handles, []
        self._at_step = []
        for handle in handles:
            handle.remove()

    def _io_hook(self, path: str) -> Any:
        owner = self._hook

        @guarded()
        def hook(hook_self: Owner, module: nn.Module, args: Any, output: Any) -> None:
            collector = owner.collector
            ins, outs = collector.planner.module_collections(path, type(module).__name__, module)
            for i, t in enumerate(_outputs(args)):  # by module (ins) or by name (include_regex)
                name = f"{path}_input_{i}"
                owner.staging.stage(name, t, collector.plan(name, ins))
            for i, t in enumerate(_outputs(output)):
                name = f"{path}_output_{i}"
                owner.staging.stage(name, t, collector.plan(name, outs))

        return lambda module, args, output: hook(owner, module, args, output)

    def _grad_hook(self, view: ParamView) -> Any:
        owner, name = self._hook, view.grad_name

        @guarded()
        def hook(hook_self: Owner, param: torch.Tensor) -> None:
            owner.staging.stage_read(name, view.grad, owner.collector.plan(name), gradient=True)

        return lambda param: hook(owner, param)
