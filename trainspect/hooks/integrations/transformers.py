"""Hugging Face ``Trainer``: a ``TrainerCallback`` that drives a trainspect hook's TRAIN steps.

* ``on_step_begin`` / ``on_step_end``: one TRAIN step per optimizer step, its micro-batches (gradient accumulation)
  inside it. Evaluation and prediction steps stay inferred from the model's forward passes (the Trainer calls no
  callback before an evaluation batch).
* The Trainer divides each micro-batch's loss before its backward pass by the micro-batches of the optimizer step
  (``current_gradient_accumulation_steps``), or normalises it by the tokens of all of them: the hook's
  ``loss_divisor`` is ``"micro_batches"``, so the recorded ``loss`` is the step's loss as the Trainer logs it.

``TrainspectCallback(hook)`` drives a given hook; without one it binds, when training begins, to the hook that records
the Trainer's model (``autolog()``'s, or a started hook that knows it). Hugging Face has no entry point for callbacks:
a ``Trainer`` built while a hook listens gets one because the loss tap wraps ``Trainer.__init__`` (:func:`targets`),
unless the script passed one.
"""

from __future__ import annotations

import functools
from typing import Any

from transformers import TrainerCallback

from trainspect.hooks.integrations import hook_for

__all__ = ["TrainspectCallback", "targets"]


class TrainspectCallback(TrainerCallback):  # type: ignore[misc]
    """A ``TrainerCallback`` that drives ``hook``'s TRAIN steps (None: the hook that records the Trainer's model).

    Example:
        >>> from trainspect.transformers import TrainspectCallback
        >>> callback = TrainspectCallback()  # Trainer(..., callbacks=[callback]); or nothing: it is added for you
    """

    def __init__(self, hook: Any = None) -> None:
        self._given = hook
        self.hook: Any = None
        self._open = False

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        """Bind to the hook (looked for once per ``train()``); the Trainer's loss division is multiplied back."""
        self.hook = hook = self._given if self._given is not None else hook_for(model)
        if hook is not None:
            hook.loss_divisor = "micro_batches"

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """An optimizer step's first micro-batch begins a TRAIN step."""
        hook = self.hook
        if hook is not None:
            hook.begin_step("train")
            self._open = True

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The optimizer stepped: the TRAIN step ends."""
        self._end()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        """The last step ends; the loss is recorded as computed again."""
        self._end()
        if self.hook is not None:
            self.hook.loss_divisor = 1.0

    def _end(self) -> None:
        if self._open and self.hook is not None:
            self.hook.end_step()
        self._open = False

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (a spawned process): the hook stays behind."""
        return {"_given": None, "hook": None, "_open": False}


def _wrap_init(original: Any) -> Any:
    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N807
        original(self, *args, **kwargs)
        handler = getattr(self, "callback_handler", None)
        if handler is not None and not any(isinstance(c, TrainspectCallback) for c in handler.callbacks):
            self.add_callback(TrainspectCallback())

    return __init__


def targets(tap: Any, module: Any) -> list[tuple[Any, str, Any]]:
    """The loss tap's patch of ``transformers.trainer``: ``Trainer.__init__`` adds the callback."""
    trainer = getattr(module, "Trainer", None)
    return [] if trainer is None else [(trainer, "__init__", _wrap_init)]
