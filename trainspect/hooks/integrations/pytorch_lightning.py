"""The ``pytorch_lightning`` package's ``TrainspectCallback``; see :mod:`._lightning_driver` for what it does."""

from __future__ import annotations

from typing import Any

import pytorch_lightning as pl

from trainspect.hooks.integrations._lightning_driver import LightningDriver, factory

__all__ = ["TrainspectCallback", "callbacks_factory"]


class TrainspectCallback(LightningDriver, pl.Callback):
    """A ``pytorch_lightning`` ``Callback`` that drives ``hook``'s steps (None: the hook recording the module)."""

    def __init__(self, hook: Any = None) -> None:
        super().__init__()
        self._given = hook


def callbacks_factory() -> list[Any]:
    """The ``pytorch_lightning.callbacks_factory`` entry point: one callback per Trainer, bound at its setup."""
    return factory(TrainspectCallback)
