"""smdebug's PyTorch hook subclass points, for scripts that subclass ``smdebug.pytorch.Hook``.

smdebug records module outputs through a ``forward_hook(module, inputs, outputs)`` method on every submodule, names
modules through ``module_maps``, and records a tensor's gradient through the callable ``backward_hook(name)`` returns;
SageMaker examples (the iterative pruning one) override ``forward_hook`` and call ``_write_inputs``/``_write_outputs``.
trainspect records module tensors its own way, so ``forward_hook`` is attached only when a subclass overrides it.
What the subclass writes is saved on the steps the save configuration saves, like everything else.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from trainspect.collections import Collection
from trainspect.hooks._guard import guarded
from trainspect.hooks.job import active_hook
from trainspect.hooks.save_plan import KNOWN_COLLECTIONS
from trainspect.hooks.torch_callbacks import Callback, own_hook_dicts
from trainspect.hooks.torch_hook import Hook

__all__ = ["SmdebugHook"]


def _declared(item: Any) -> Any:
    """A collection named in ``include_collections``: a built-in's name, or a new empty collection of that name."""
    if isinstance(item, str) and item not in KNOWN_COLLECTIONS:
        return Collection(item)
    return item


class SmdebugHook(Hook):
    """trainspect's PyTorch hook with smdebug's subclass points (``smdebug.pytorch.Hook``).

    As smdebug does, ``include_collections`` may name a collection defined only later
    (``hook.get_collection("relu").include("relu*")`` after the hook is built): it starts empty; and losses are
    saved on the hook's save steps (trainspect's own hook, and this one under ``trainspect run``/``autolog()`` or
    with rules, saves them at every step; ``hook.get_collection("losses").save_config`` sets it too).
    """

    last_saved_step: int | None = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        included = kwargs.get("include_collections")
        if included is not None:
            kwargs["include_collections"] = [_declared(item) for item in included]
        super().__init__(*args, **kwargs)
        planner = self.collector.planner
        # under `trainspect run`/autolog or with rules, trainspect's rules and report want its own loss records
        self._smdebug_literal = active_hook() is not self and not kwargs.get("rules")
        if self._smdebug_literal and "losses" not in planner._user_configured:
            # smdebug saves losses on the hook's save steps; trainspect's own hook saves them at every step
            planner.manager.get("losses").save_config = None

    @property
    def step(self) -> int:
        """The current global step (smdebug's ``hook.step``)."""
        return self.collector.global_step

    @property
    def module_maps(self) -> dict[nn.Module, str]:
        """Every registered module and its name (the model itself under its class name)."""
        return self.__dict__.setdefault("_module_maps", {})

    @guarded()
    def register_module(self, module: nn.Module, *, module_hooks: bool = True) -> None:
        """Register a model as ``Hook.register_module`` does; attach ``forward_hook`` when a subclass defines it."""
        super().register_module(module, module_hooks=module_hooks)
        maps = self.module_maps
        overridden = type(self).forward_hook is not SmdebugHook.forward_hook
        for name, sub in module.named_modules():
            if sub in maps:
                continue
            maps[sub] = name or module._get_name()
            if overridden:
                own_hook_dicts(sub)
                self._handles.append(sub.register_forward_hook(Callback(self.forward_hook)))

    register_hook = register_module

    def forward_hook(self, module: nn.Module, inputs: Any, outputs: Any) -> None:
        """Called after every registered module's forward pass when a subclass overrides it."""

    def backward_hook(self, tname: str) -> Any:
        """A tensor hook that saves the gradient reaching a tensor as ``gradient/<tname>`` on saving steps."""

        def save_gradient(grad: torch.Tensor) -> None:
            if self._saves_now():
                self._save_now(f"gradient/{tname}", grad, ("gradients",))

        return save_gradient

    def _saves_now(self) -> bool:
        """Whether the hook's save configuration saves at the current step (what the subclass writes follows it)."""
        collector = self.collector
        if self.disabled or not collector.step_open:
            return False
        step = collector.mode_steps.get(collector.mode, 0)
        return bool(collector.planner.save_config.modes[collector.mode].should_save(step))

    def _on_backward(self, loss: torch.Tensor) -> None:
        """Record the backpropagated loss as ``loss``; as smdebug, not again when it is a recorded loss's tensor."""
        if self._smdebug_literal and self._losses.recorded(loss):
            return
        super()._on_backward(loss)

    def record_tensor_value(self, tensor_name: str, tensor_value: torch.Tensor) -> None:
        """Record a tensor computed outside any module, such as a functional loss (``F.mse_loss``).

        As in smdebug it is named ``<tensor_name>_output_0``; a name that says "loss" is recorded as a loss on every
        step (the ``losses`` collection), anything else as an output on the steps the save configuration saves.
        """
        if not isinstance(tensor_value, torch.Tensor):
            got = type(tensor_value).__name__
            raise TypeError(f"record_tensor_value: tensor_value must be a torch.Tensor, got {got}")
        if "loss" in tensor_name.lower():
            self.record_loss(f"{tensor_name}_output_0", tensor_value)
        else:
            self._write_outputs(tensor_name, tensor_value)

    def _write_inputs(self, name: str, inputs: Any) -> None:
        self._write_module_tensors(name, "input", inputs)

    def _write_outputs(self, name: str, outputs: Any) -> None:
        self._write_module_tensors(name, "output", outputs)

    def _write_module_tensors(self, name: str, kind: str, value: Any) -> None:
        if not self._saves_now():
            return
        values = value if isinstance(value, (list, tuple)) else [value]
        for i, tensor in enumerate(v for v in values if isinstance(v, torch.Tensor)):
            self._save_now(f"{name}_{kind}_{i}", tensor.detach(), (f"{kind}s",))
