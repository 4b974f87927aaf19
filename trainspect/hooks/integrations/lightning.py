"""Lightning's ``TrainspectCallback`` (``lightning.pytorch``); see :mod:`._lightning_driver` for what it does."""

from __future__ import annotations

from typing import Any

import lightning.pytorch as pl

from trainspect.hooks.integrations._lightning_driver import LightningDriver, factory

__all__ = ["TrainspectCallback", "callbacks_factory"]


class TrainspectCallback(LightningDriver, pl.Callback):
    """A Lightning ``Callback`` that drives ``hook``'s steps (None: the hook that records the trainer's module).

    Example:
        >>> import tempfile, lightning as L, trainspect as ts
        >>> from trainspect.lightning import TrainspectCallback
        >>> hook = ts.torch.Hook(tempfile.mkdtemp())
        >>> trainer = L.Trainer(callbacks=[TrainspectCallback(hook)], logger=False, enable_progress_bar=False)
        >>> sum(isinstance(c, TrainspectCallback) for c in trainer.callbacks)  # yours, and the entry point's
        2
    """

    def __init__(self, hook: Any = None) -> None:
        super().__init__()
        self._given = hook


def callbacks_factory() -> list[Any]:
    """The ``lightning.pytorch.callbacks_factory`` entry point: one callback per Trainer, bound at its setup."""
    return factory(TrainspectCallback)
