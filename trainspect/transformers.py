"""Hugging Face integration: ``trainspect.transformers.TrainspectCallback`` (importing this imports transformers).

A ``Trainer`` built while a trainspect hook listens already gets one; pass your own to bind a given hook. See
:mod:`trainspect.hooks.integrations.transformers`.
"""

from trainspect.hooks.integrations.transformers import TrainspectCallback

__all__ = ["TrainspectCallback"]
