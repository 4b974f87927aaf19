"""accelerate: ``Accelerator.backward`` divides the loss by the gradient accumulation steps before its backward pass.

accelerate has no callbacks (its trackers only receive what the script logs), so the loss tap wraps
``Accelerator.backward`` (:func:`targets`): while it runs, the tap multiplies the loss of the backward pass back by
``gradient_accumulation_steps`` (DeepSpeed divides inside its own engine: left as it is). The steps themselves are
inferred: the wrapped optimizer steps only at the last micro-batch of each accumulation.
"""

from __future__ import annotations

import functools
from typing import Any

__all__ = ["targets"]


def _wrap_backward(original: Any, tap: Any) -> Any:
    @functools.wraps(original)
    def backward(self: Any, loss: Any, **kwargs: Any) -> Any:
        steps = getattr(self, "gradient_accumulation_steps", 1) or 1
        if steps == 1 or not tap.listeners or str(getattr(self, "distributed_type", "")).endswith("DEEPSPEED"):
            return original(self, loss, **kwargs)
        previous = tap.factor
        tap.factor = previous * steps
        try:
            return original(self, loss, **kwargs)
        finally:
            tap.factor = previous

    return backward


def targets(tap: Any, module: Any) -> list[tuple[Any, str, Any]]:
    """The loss tap's patch of ``accelerate.accelerator``: ``Accelerator.backward``."""
    accelerator = getattr(module, "Accelerator", None)
    return [] if accelerator is None else [(accelerator, "backward", functools.partial(_wrap_backward, tap=tap))]
