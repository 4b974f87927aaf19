"""Lightning (``lightning.pytorch``, ``pytorch_lightning``): a ``Callback`` that drives a hook's steps from its loops.

* **Training** (automatic optimization): a TRAIN step begins at the first batch of an optimizer step
  (``on_train_batch_start``) and ends at the batch after which the optimizer stepped (``trainer.global_step`` moved):
  ``accumulate_grad_batches`` micro-batches make one step. Lightning divides ``training_step``'s loss by
  ``accumulate_grad_batches`` before its backward pass; the hook's ``loss_divisor`` multiplies the recorded ``loss``
  back (the value ``training_step`` returned). With manual optimization (GANs) the optimizers' own steps mark the
  TRAIN steps, as without the callback (each optimizer's losses a series of its own).
* **Validation, test, prediction**: each batch is one EVAL (validation, test) or PREDICT step.

Every ``Trainer`` gets one through Lightning's ``callbacks_factory`` entry points (this package's
``pyproject.toml``): it binds, when the trainer sets up, to the hook that records the trainer's module (``autolog()``'s,
or a started hook that knows the module or a submodule of it), and does nothing when there is none. Pass
``TrainspectCallback(hook)`` yourself to bind a given hook; only the first callback bound to a hook drives it.
"""

from __future__ import annotations

import logging
from typing import Any

from trainspect.hooks.integrations import hook_for

__all__ = ["LightningDriver", "factory"]

log = logging.getLogger(__name__)


class LightningDriver:
    """The callback's state and logic, shared by the ``lightning`` and ``pytorch_lightning`` classes."""

    hook: Any = None
    _given: Any = None
    _bound = False
    _train_open = False
    _drive_train = True
    _at = -1

    def _bind(self, trainer: Any, pl_module: Any) -> Any:
        """The hook this callback drives (None: inert), looked for at setup and when a loop starts, not per batch."""
        if not self._bound:
            self._bound = True
            self.hook = self._find(trainer, pl_module)
        return self.hook

    def _find(self, trainer: Any, pl_module: Any) -> Any:
        hook = self._given if self._given is not None else hook_for(pl_module)
        if hook is None:
            return None
        for other in getattr(trainer, "callbacks", ()):
            if other is self:
                break
            if isinstance(other, LightningDriver) and other.hook is hook:
                return None  # another callback drives this hook
        self._drive_train = bool(getattr(pl_module, "automatic_optimization", True))
        return hook

    def _loop_start(self, trainer: Any, pl_module: Any) -> Any:
        """A loop begins: a hook made since the setup (none was found then) is looked for again."""
        if self.hook is None:
            self._bound = False
        return self._bind(trainer, pl_module)

    # --- Lightning's hooks -------------------------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """Find the hook that records ``pl_module``."""
        self._bind(trainer, pl_module)

    on_validation_start = on_test_start = on_predict_start = _loop_start

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        """End the open step; the next setup binds again (the hook may have closed)."""
        self._end_train()
        self._bound, self.hook = False, None

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        """Lightning divides the loss by ``accumulate_grad_batches`` before its backward pass: multiplied back."""
        hook = self._loop_start(trainer, pl_module)
        if hook is not None and self._drive_train:
            hook.loss_divisor = float(getattr(trainer, "accumulate_grad_batches", 1) or 1)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        """The last TRAIN step ends."""
        self._end_train()
        if self.hook is not None:
            self.hook.loss_divisor = 1.0

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        """The first micro-batch of an optimizer step begins a TRAIN step."""
        hook = self.hook
        if hook is None or not self._drive_train or self._train_open:
            return
        hook.begin_step("train")
        self._train_open, self._at = True, trainer.global_step

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """The TRAIN step ends once the optimizer stepped."""
        if self._train_open and trainer.global_step != self._at:
            self._end_train()

    def _end_train(self) -> None:
        if self._train_open and self.hook is not None:
            self.hook.end_step()
        self._train_open = False

    def _begin(self, trainer: Any, pl_module: Any, mode: str) -> None:
        hook = self.hook
        if hook is not None:
            self._train_open = False  # a validation inside an accumulation window ends its TRAIN step
            hook.begin_step(mode)

    def _end(self) -> None:
        if self.hook is not None:
            self.hook.end_step()

    def on_validation_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *rest: Any) -> None:
        """A validation batch is an EVAL step."""
        self._begin(trainer, pl_module, "eval")

    def on_validation_batch_end(self, trainer: Any, pl_module: Any, *rest: Any) -> None:
        """The EVAL step ends."""
        self._end()

    def on_test_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *rest: Any) -> None:
        """A test batch is an EVAL step."""
        self._begin(trainer, pl_module, "eval")

    def on_test_batch_end(self, trainer: Any, pl_module: Any, *rest: Any) -> None:
        """The EVAL step ends."""
        self._end()

    def on_predict_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int, *rest: Any) -> None:
        """A prediction batch is a PREDICT step."""
        self._begin(trainer, pl_module, "predict")

    def on_predict_batch_end(self, trainer: Any, pl_module: Any, *rest: Any) -> None:
        """The PREDICT step ends."""
        self._end()

    def __getstate__(self) -> dict[str, Any]:
        """Pickled (``ddp_spawn``, a checkpoint): the hook stays behind; the copy binds to its process's hook."""
        return {}


def factory(make: Any) -> list[Any]:
    """An entry point's callbacks: ``[make()]``, or none (one warning) should that fail: a Trainer never fails."""
    try:
        return [make()]
    except Exception as exc:
        log.warning("trainspect: no Lightning callback (%s: %s); steps are inferred", type(exc).__name__, exc)
        return []
