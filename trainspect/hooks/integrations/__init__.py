"""Trainer integrations: each drives a hook through its public step API, or gives back a loss its trainer rescaled.

* :mod:`.lightning`: a Lightning ``Callback`` (``TrainspectCallback``) that begins and ends the hook's steps in
  Lightning's loops; every ``Trainer`` gets one through Lightning's ``callbacks_factory`` entry point (inert unless a
  trainspect hook knows the trainer's module).
* :mod:`.transformers`: a Hugging Face ``TrainerCallback`` (``TrainspectCallback``) doing the same for the
  ``Trainer``; a ``Trainer`` built while a hook listens gets one (the loss tap wraps ``Trainer.__init__``).
* :mod:`.accelerate`: ``Accelerator.backward`` divides the loss by the accumulation steps; the tap multiplies it back.

:data:`PATCHED_ON_IMPORT` names the modules whose import makes the loss tap (:mod:`trainspect.hooks.torch_backward`)
patch them, each with the integration module whose ``targets(tap, module)`` gives the patches. docs/architecture.md
lists every patch and why no public callback gives the same.
"""

from __future__ import annotations

from typing import Any

__all__ = ["PATCHED_ON_IMPORT", "hook_for"]

PATCHED_ON_IMPORT = {
    "transformers.trainer": "trainspect.hooks.integrations.transformers",
    "accelerate.accelerator": "trainspect.hooks.integrations.accelerate",
}
"""Module imported by the script → the integration that patches it (``targets(tap, module)``)."""


def hook_for(model: Any) -> Any:
    """The PyTorch hook that records ``model`` in this process: ``autolog()``'s, else a started hook that knows it.

    A hook knows ``model`` when it registered it, a module that holds it, or a module it holds (a Lightning module's
    ``net``). None when there is none (the integration then does nothing).
    """
    from trainspect.hooks.job import active_hook
    from trainspect.hooks.shutdown import CLOSERS

    job = active_hook()
    if job is not None and not job.disabled:
        return job
    if model is None:
        return None
    modules = list(model.modules()) if hasattr(model, "modules") else [model]
    for obj in reversed(CLOSERS.open_objects()):
        knows = getattr(obj, "knows", None)
        if knows is not None and not getattr(obj, "disabled", True) and any(knows(m) for m in modules):
            return obj
    return None
