"""Keras 3 integration: ``trainspect.keras.Hook`` (importing this module imports keras and TensorFlow)."""

from trainspect.hooks.keras_hook import Hook

__all__ = ["Hook"]
