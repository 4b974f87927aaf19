"""What a saving PyTorch step records beside losses, and the per-step hooks that record it.

A module or tensor with a hook takes PyTorch's slower call path, so gradient and module input/output hooks are
attached only for the steps that save them (:class:`StepHooks`), and what a saving step records is decided again
only when the planner's set of saving collections changes (:func:`decide_captures`).
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import nn

from trainspect.hooks._guard import guarded
from trainspect.hooks.collector import Collector
from trainspect.hooks.step_state import Captures
from trainspect.hooks.torch_callbacks import Callback, own_hook_dicts
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


def decide_captures(collector: Collector, params: list[tuple[str, nn.Parameter]]) -> Captures:
    """What a saving step records for the planner's current set of saving collections."""
    return Captures(
        generation=collector.planner.generation,
        params=tuple((n, p) for n, p in params if wanted(collector, n)),
        gradients=any(wanted(collector, f"gradient/{n}") for n, _ in params),
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
    """Gradient and module input/output hooks of one step; :meth:`detach` removes them when the step ends."""

    def __init__(self, hook: Owner) -> None:
        self._hook = hook
        self.handles: list[Any] = []

    def attach(self, captures: Captures, params: list[tuple[str, nn.Parameter]], modules: list[Any]) -> None:
        """Hook the gradients and module inputs/outputs ``captures`` asks for."""
        if captures.gradients:
            for name, param in params:
                if param.requires_grad:
                    hook = self._grad_hook(f"gradient/{name}")
                    self.handles.append(param.register_post_accumulate_grad_hook(Callback(hook)))
        if captures.module_io:
            for path, sub in modules:
                own_hook_dicts(sub)
                self.handles.append(sub.register_forward_hook(Callback(self._io_hook(path))))

    def detach(self) -> None:
        """Remove this step's hooks."""
        handles, self.handles = self.handles, []
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

    def _grad_hook(self, name: str) -> Any:
        owner = self._hook

        @guarded()
        def hook(hook_self: Owner, param: torch.Tensor) -> None:
            if param.grad is not None:
                plan = owner.collector.plan(name)
                if plan.raw or plan.reductions:
                    owner.staging.stage_gradient(name, param.grad, plan)

        return lambda param: hook(owner, param)
