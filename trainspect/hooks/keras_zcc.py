"""Zero script change for Keras: ``keras.Model.fit/evaluate/predict`` get a trainspect callback.

Importing this module imports neither keras nor TensorFlow. :meth:`KerasAutoLog.install` patches at once when keras
is already imported, and otherwise when the script first imports it (a ``sys.meta_path`` finder wraps the loader of
the ``keras`` package), so torch-only scripts never load TensorFlow. The hook is created at the first call of a
patched method; :meth:`KerasAutoLog.close` restores the methods and closes the hook.
"""

from __future__ import annotations

import functools
import importlib.util
import inspect
import logging
import sys
from typing import Any

from trainspect.hooks._guard import Guarded, guarded
from trainspect.hooks.import_watch import ImportWatcher

__all__ = ["KerasAutoLog"]

log = logging.getLogger(__name__)
_METHODS = ("fit", "evaluate", "predict")


class KerasAutoLog(Guarded):
    """The Keras patches of :func:`trainspect.autolog`.

    Args:
        hook_kwargs: arguments of ``trainspect.keras.Hook`` (``out_dir`` …).
        registry: a list this object removes itself from when closed.
    """

    def __init__(self, hook_kwargs: dict[str, Any], registry: list[Any] | None = None) -> None:
        self._kwargs = dict(hook_kwargs)
        self._registry = registry
        self.hook: Any = None
        self._originals: dict[str, Any] = {}
        self._finder: ImportWatcher | None = None
        self._closed = False

    @classmethod
    def install(cls, hook_kwargs: dict[str, Any], registry: list[Any] | None = None) -> KerasAutoLog | None:
        """Patch keras now or when it is imported; None when keras is not installed."""
        if "keras" not in sys.modules and importlib.util.find_spec("keras") is None:
            return None
        auto = cls(hook_kwargs, registry)
        if "keras" in sys.modules:
            auto._patch()
        else:
            auto._finder = ImportWatcher(("keras",), lambda module: auto._patch())
            sys.meta_path.insert(0, auto._finder)
        return auto

    @guarded()
    def _patch(self) -> None:
        self._remove_finder()
        if self._closed or self._originals:
            return
        import keras

        for name in _METHODS:
            self._originals[name] = keras.Model.__dict__.get(name)
            setattr(keras.Model, name, self._wrap(getattr(keras.Model, name)))

    def _remove_finder(self) -> None:
        if self._finder is not None and self._finder in sys.meta_path:
            sys.meta_path.remove(self._finder)
        self._finder = None

    def _wrap(self, original: Any) -> Any:
        signature = inspect.signature(original)

        @functools.wraps(original)
        def method(model: Any, *args: Any, **kwargs: Any) -> Any:
            bound = self._with_hook(signature, model, args, kwargs)
            if bound is None:
                return original(model, *args, **kwargs)
            return original(*bound.args, **bound.kwargs)

        return method

    @guarded()
    def _with_hook(self, signature: inspect.Signature, model: Any, args: Any, kwargs: Any) -> Any:
        import keras

        from trainspect.hooks.keras_hook import Hook

        bound = signature.bind(model, *args, **kwargs)
        callbacks = bound.arguments.get("callbacks")
        if isinstance(callbacks, keras.callbacks.CallbackList) or self._closed:
            return None  # fit's own validation pass hands its CallbackList on
        callbacks = list(callbacks or [])
        if any(isinstance(c, Hook) for c in callbacks):
            return None
        if self.hook is None:
            self.hook = Hook(**self._kwargs)
        bound.arguments["callbacks"] = [*callbacks, self.hook]
        return bound

    def close(self) -> None:
        """Restore the methods and close the hook."""
        if self._closed:
            return
        self._closed = True
        self._remove_finder()
        if self._originals:
            import keras

            for name, original in self._originals.items():
                if original is None:
                    delattr(keras.Model, name)
                else:
                    setattr(keras.Model, name, original)
        if self.hook is not None:
            self.hook.close()
        if self._registry is not None and self in self._registry:
            self._registry.remove(self)
