"""Framework adapters of the backward tap (:mod:`trainspect.hooks.torch_backward`): Lightning, Hugging Face Trainer.

Importing this module registers them with the tap (:func:`~trainspect.hooks.torch_backward.register_adapter`);
``trainspect.hooks.torch_hook`` imports it.

Both rescale the loss before its backward pass, and Lightning runs a loop with a mode of its own:

* Lightning's ``ClosureResult.from_training_step_output`` divides ``training_step``'s loss by
  ``accumulate_grad_batches``: the loss recorded is ``training_step``'s; Lightning's predict loop runs in PREDICT
  mode (:data:`STATE.mode`);
* the Hugging Face ``Trainer.training_step`` divides the loss by ``gradient_accumulation_steps`` (or normalises it
  by the tokens of all micro-batches): the value recorded is multiplied back by that count.

Their modules are patched when the tap is installed, or, while it is, when they are imported (a ``sys.meta_path``
finder wraps their loaders: ``autolog()`` starts before the script imports them).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import torch

from trainspect.hooks.import_watch import ImportWatcher
from trainspect.hooks.torch_backward import STATE, _install, register_adapter
from trainspect.modes import ModeKeys

__all__ = ["FINDER", "framework_targets"]


def _wrap_closure_result(original: Any) -> Any:
    func = original.__func__

    @functools.wraps(original)
    def from_training_step_output(cls: Any, training_step_output: Any, normalize: int = 1) -> Any:
        result = func(cls, training_step_output, normalize)
        if normalize == 1:  # the closure's loss is training_step's divided by 1: the same value
            return result
        closure = getattr(result, "closure_loss", None)
        loss = training_step_output
        if not isinstance(loss, torch.Tensor) and isinstance(loss, Mapping):  # (an ABC check: not at every step)
            loss = loss.get("loss")
        if loss is not closure and isinstance(loss, torch.Tensor) and isinstance(closure, torch.Tensor):
            STATE.derived[id(closure)] = (closure, loss, 1.0)
        return result

    return classmethod(from_training_step_output)


def _wrap_loop_mode(original: Any, mode: ModeKeys) -> Any:
    @functools.wraps(original)
    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        previous, STATE.mode = STATE.mode, mode
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.mode = previous

    return run


def _wrap_hf_training_step(original: Any) -> Any:
    @functools.wraps(original)
    def training_step(self: Any, *args: Any, **kwargs: Any) -> Any:
        previous = STATE.factor
        STATE.factor = float(getattr(self, "current_gradient_accumulation_steps", 1) or 1)
        try:
            return original(self, *args, **kwargs)
        finally:
            STATE.factor = previous

    return training_step


def framework_targets() -> list[tuple[Any, str, Callable[[Any], Any]]]:
    """(owner, attribute, wrapper factory) for the frameworks imported so far."""
    targets: list[tuple[Any, str, Callable[[Any], Any]]] = []
    for pkg in ("lightning.pytorch", "pytorch_lightning"):
        if pkg in sys.modules:
            automatic = sys.modules.get(f"{pkg}.loops.optimization.automatic")
            predict = sys.modules.get(f"{pkg}.loops.prediction_loop")
            if automatic is not None:
                targets.append((automatic.ClosureResult, "from_training_step_output", _wrap_closure_result))
            if predict is not None:
                targets.append((predict._PredictionLoop, "run", lambda f: _wrap_loop_mode(f, ModeKeys.PREDICT)))
    trainer = sys.modules.get("transformers.trainer")
    if trainer is not None and hasattr(trainer, "Trainer"):
        targets.append((trainer.Trainer, "training_step", _wrap_hf_training_step))
    return targets


_WATCHED = frozenset(
    {
        f"{pkg}.loops.{mod}"
        for pkg in ("lightning.pytorch", "pytorch_lightning")
        for mod in ("prediction_loop", "optimization.automatic")
    }
    | {"transformers.trainer"}
)
"""Modules whose import installs their patches (``autolog()`` starts before the script imports them)."""


def _framework_imported(module: ModuleType) -> None:
    if STATE.originals:
        _install()


FINDER = ImportWatcher(_WATCHED, _framework_imported)
"""The finder installed while the tap is."""

register_adapter(framework_targets, FINDER)
