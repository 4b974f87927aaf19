"""The models registered with a PyTorch hook: what drives their steps, their parameters and submodules, and names.

* **Drivers.** A registered model's forward pass marks its steps. A container that is never called itself
  (``nn.ModuleDict``, ``nn.ModuleList``, any module without a ``forward``) is driven by its children's forward
  passes instead (recursively: a container's containers are looked through too).
* **Names, unique per registered model.** A parameter is ``<Model>_<path>`` (``Sequential_0.weight``), a module's
  inputs and outputs ``<path>_output_0`` (the model itself: ``<Model>_output_0``). A second registered model of an
  already registered class is ``<Model>2`` (then ``3`` …); a model any of whose submodule paths another registered
  model already uses has its module tensors named ``<Model>.<path>_output_0`` (dcgan's Generator and Discriminator
  both have ``main.1``). The first model keeps its names: a run of one model is named as before.
* **Weights.** Every floating-point parameter is a weight (collection ``weights``) whatever its name (gcn's
  ``kernel``, ViT's ``pos_embed``); a parameter named ``…bias…`` stays a bias.
* **Nesting.** A registered model called inside a registered model's forward pass (a model that calls itself, a
  container's child called by another) is part of the outer call, not a step of its own. No forward hook marks where
  a forward pass ends (that hook would cost every step more than the rest of the step's recording), so
  :meth:`ModelRegistry.inside_forward` looks at the call stack, and only when a forward pass would end the open step.
* **Replaced submodules.** :meth:`ModelRegistry.refresh` compares the identities of the models' modules and
  parameters with those it last resolved, and re-resolves parameters and submodules when they changed (a head
  replaced after ``register_module``, or ``fully_shard`` applied since).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from trainspect.hooks.torch_params import ParamView, clean_path, model_name, parameter_views, unwrap, warn_one_worker
from trainspect.modes import EVAL, GLOBAL, TRAIN, ModeKeys

__all__ = ["ModelRegistry", "infer_mode", "warn_unregistered"]

log = logging.getLogger(__name__)
_CALL_IMPL = nn.Module._call_impl.__code__
"""The code of ``Module.__call__``'s body: a frame running it is a module's call, its ``self`` the module."""
GRAPH_NODES = 100_000
"""Autograd nodes :meth:`ModelRegistry.trains` visits at most (a larger graph counts as the models')."""


def infer_mode(module: nn.Module, current: ModeKeys, in_step: bool) -> ModeKeys:
    """The mode of a registered model's forward pass when the script never set one.

    EVAL for a model in eval mode (``model.eval()``, an
    EMA copy) or a forward pass under ``torch.no_grad()`` / ``torch.inference_mode()`` (a test forward after the
    optimizer step, a validation loop): never a micro-batch of the next training step. A ``no_grad`` forward inside
    an open training step whose optimizer has not stepped yet (``in_step``: a teacher's or target network's
    forward) stays in it.
    """
    if not module.training:
        return EVAL
    if torch.is_grad_enabled():
        return TRAIN
    return current if in_step and current in (TRAIN, GLOBAL) else EVAL


def warn_unregistered() -> int:
    """Warn that a training step's backward pass was recorded by no registered model's step; return 2 (warned)."""
    log.warning(
        "trainspect: loss.backward() and optimizer.step() ran, but no registered model's forward pass was seen, so "
        "nothing of this training step is recorded: a model called as model.forward(x) (not model(x)) or never "
        "called itself is not found. Call it as model(x), or register the module that holds the trained "
        "parameters: hook.register_module(module)"
    )
    return 2


def _never_called(module: nn.Module) -> bool:
    """Whether the module has no forward pass of its own (``nn.ModuleDict``, ``nn.ModuleList``)."""
    return type(module).forward is nn.Module.forward


def _drivers(module: nn.Module) -> list[nn.Module]:
    """The modules whose forward passes drive a registered model's steps: itself, or a container's children."""
    if not _never_called(module):
        return [module]
    found: list[nn.Module] = []
    for child in module.children():
        found.extend(_drivers(child))
    return found


class ModelRegistry:
    """The registered models of one hook, and what is recorded of them.

    The lists and sets are changed in place (benchmarks clear ``top``, ``params`` and ``submodules`` to register
    anew).

    Args:
        collections: the hook's collections (floating parameters with other names join ``weights`` by name).
        warn: ``warn(name, why)``: a parameter that cannot be read is left out, with one warning.
    """

    def __init__(self, collections: Any, warn: Callable[[str, str], None]) -> None:
        self.models: list[nn.Module] = []  # as registered (wrappers included)
        self.top: set[int] = set()  # ids of the registered models (and their unwrapped selves) and drivers
        self.known: set[int] = set()  # ids of the registered models' submodules
        self.params: list[ParamView] = []
        self.submodules: list[tuple[str, nn.Module]] = []
        self._prefixes: list[str] = []  # per model in self.models: the prefix of its parameter names
        self._io_prefixes: list[str] = []  # per model: the prefix of its module tensors ("" or "<Model>.")
        self._key: tuple[int, ...] = ()
        self._collections = collections
        self._warn = warn
        self._warned_one_worker = False

    def add(self, module: nn.Module) -> list[nn.Module] | None:
        """Register a model; return the modules whose forward passes drive its steps (None: registered before)."""
        if id(module) in self.top:
            return None
        self.top.add(id(module))
        if all(m is not module for m in self.models):
            self.models.append(module)
            self._prefixes.append(self._new_prefix(model_name(unwrap(module))))
            self._io_prefixes.append("")
        index = next(i for i, m in enumerate(self.models) if m is module)
        inner = unwrap(module)
        self.top.add(id(inner))
        drivers = _drivers(inner)
        self.top.update(id(d) for d in drivers)
        if self._clashes(index, inner):
            self._io_prefixes[index] = f"{self._prefixes[index]}."
        self._add_submodules(index, inner)
        return [module] if drivers == [inner] else drivers

    def _new_prefix(self, name: str) -> str:
        taken, prefix, n = set(self._prefixes), name, 2
        while prefix in taken:
            prefix, n = f"{name}{n}", n + 1
        return prefix

    def _clashes(self, index: int, inner: nn.Module) -> bool:
        """Whether a submodule path of model ``index`` is the name of another model's module tensors."""
        if index == 0:
            return False
        taken = {name for name, sub in self.submodules}
        return any(clean_path(path) in taken for path, _ in inner.named_modules() if path)

    def _add_submodules(self, index: int, inner: nn.Module) -> None:
        seen = {id(sub) for _, sub in self.submodules}
        root, io = self._prefixes[index], self._io_prefixes[index]
        for path, sub in inner.named_modules():
            if id(sub) in seen:  # shared with a model registered before: recorded once, under its first name
                continue
            seen.add(id(sub))
            name = f"{io}{clean_path(path)}" if path else root
            object.__setattr__(sub, "_trainspect_name", name)
            self.submodules.append((name, sub))
            self.known.add(id(sub))

    def fingerprint(self) -> tuple[int, ...]:
        """Identities of the models' modules and parameters (cheap: no tensor is touched)."""
        return tuple(id(x) for m in self.models for sub in m.modules() for x in (sub, *sub._parameters.values()))

    def refresh(self, collector: Any = None) -> bool:
        """Resolve the models' parameters and submodules again if their objects changed; return whether they did.

        ``fully_shard`` (or any engine) applied after ``register_module`` replaces a model's parameter objects; a
        script may replace a layer (a new head). ``collector``: the hook's, told when parameters are sharded.
        """
        key = self.fingerprint()
        if key == self._key and (self.params or not key):
            return False
        if self._key and key != self._key and self.submodules:
            self._resolve_submodules()
        self._key = key
        views: list[ParamView] = []
        seen: set[int] = set()
        for model, prefix in zip(self.models, self._prefixes, strict=True):
            for view in parameter_views(model, self._warn, prefix):
                if id(view.param) not in seen or view.sharded:  # a parameter two models share: recorded once
                    seen.add(id(view.param))
                    views.append(view)
        self.params[:] = views
        self._join_weights(views)
        if collector is not None and any(view.sharded for view in views) and not collector.sharded:
            if not collector.opened:
                collector.sharded = True  # every rank records: a piece alone is no tensor
            elif not self._warned_one_worker and not collector.records_tensors:
                self._warned_one_worker = warn_one_worker(views)
        return True

    def _resolve_submodules(self) -> None:
        """A submodule was replaced: list every model's submodules (and their names) again."""
        self.submodules.clear()
        self.known.clear()
        for index, model in enumerate(self.models):
            self._add_submodules(index, unwrap(model))

    def _join_weights(self, views: list[ParamView]) -> None:
        """Floating parameters named neither ``…weight…`` nor ``…bias…`` join the ``weights`` collection by name."""
        for view in views:
            name = view.name
            if "weight" not in name and "bias" not in name and view.param.is_floating_point():
                weights = self._collections.get("weights")
                if name not in weights.tensor_names:
                    weights.add_tensor_name(name)

    def trains(self, loss: Any, limit: int = GRAPH_NODES) -> bool:
        """Whether ``loss``'s backward pass reaches a parameter of the registered models (not another model's loss).

        Walks the autograd graph from ``loss.grad_fn`` to its ``AccumulateGrad`` leaves; only for a backward pass
        outside any step (a model called as ``model.forward(x)``), never in the usual step. A graph larger than
        ``limit`` nodes counts as reaching them.
        """
        params = {id(view.param) for view in self.params}
        stack: list[Any] = [getattr(loss, "grad_fn", None)]
        seen: set[Any] = set()
        while stack:
            node = stack.pop()
            if node is None or node in seen:
                continue
            if len(seen) >= limit:
                return True
            seen.add(node)
            if id(getattr(node, "variable", None)) in params:
                return True
            stack.extend(nxt for nxt, _ in node.next_functions)
        return False

    def owner_of(self) -> dict[int, tuple[int, str, str]]:
        """Each recorded parameter's (order, model prefix, path in the model), by ``id`` of the parameter."""
        found: dict[int, tuple[int, str, str]] = {}
        prefixes = sorted(self._prefixes, key=len, reverse=True)
        for order, view in enumerate(self.params):
            prefix = next((p for p in prefixes if view.name.startswith(f"{p}_")), "")
            found.setdefault(id(view.param), (order, prefix, view.name[len(prefix) + 1 :]))
        return found

    def inside_forward(self, frame: Any) -> bool:
        """Whether the forward pass of a registered model (or driver) is running around a hook called at ``frame``.

        The call being hooked is one module call of a registered model on the stack; a second one is an outer forward
        pass that is still running (see the module: nesting).
        """
        top, calls = self.top, 0
        while frame is not None:
            if frame.f_code is _CALL_IMPL and id(frame.f_locals.get("self")) in top:
                calls += 1
                if calls > 1:
                    return True
            frame = frame.f_back
        return False

    def knows(self, module: nn.Module) -> bool:
        """Whether ``module`` is a registered model, a driver of one, or one of their submodules."""
        return id(module) in self.known or id(module) in self.top
