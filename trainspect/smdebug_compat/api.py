"""smdebug's hook singletons, framework hook classes and ``create_trial``, on trainspect."""

from __future__ import annotations

import functools
import logging
import os
from typing import Any

from trainspect import env
from trainspect.exceptions import SmdebugNotSupported
from trainspect.modes import parse_mode

__all__ = [
    "pytorch_hook_class",
    "keras_hook_class",
    "get_hook_for",
    "set_hook",
    "del_hook",
    "get_collection",
    "get_collections",
    "create_trial",
]

log = logging.getLogger(__name__)
_CURRENT: list[Any] = []  # smdebug's hook singleton (get_hook/set_hook): the script's one hook of the job


def set_hook(hook: Any) -> None:
    """Make ``hook`` the one ``get_hook()`` returns."""
    _CURRENT[:] = [hook]


def del_hook() -> None:
    """Forget the current hook (it is not closed)."""
    _CURRENT.clear()


def _autologged() -> Any:
    from trainspect.hooks import zcc

    return zcc.active_hook()


def _get(hook_class: Any, json_config_path: str | None, create_if_not_exists: bool) -> Any:
    if _CURRENT:
        return _CURRENT[0]
    hook = _autologged()
    if hook is None and create_if_not_exists:
        from trainspect.hook_config import config_path

        if json_config_path or config_path():
            hook = hook_class.create_from_json_file(json_config_path)
        else:
            out = env.TRAINSPECT_OUT_DIR.get() or os.path.join("runs", "smdebug-hook")
            hook = hook_class(out_dir=out)
    if hook is not None:
        set_hook(hook)
    return hook


def get_hook_for(hook_class: type) -> Any:
    """The ``get_hook`` of one smdebug framework module (creating a ``Hook`` or a ``KerasHook`` when asked to)."""

    def get_hook(json_config_path: str | None = None, create_if_not_exists: bool = False) -> Any:
        """The job's hook: the one the script created, else ``trainspect run``'s, else (when asked) a new one."""
        return _get(hook_class, json_config_path, create_if_not_exists)

    return get_hook


def _any_hook() -> Any:
    if _CURRENT:
        return _CURRENT[0]
    hook = _autologged()
    if hook is None:
        raise LookupError(
            "no hook: create one first (smd.Hook.create_from_json_file() or smd.get_hook(create_if_not_exists=True))"
        )
    return hook


def get_collection(name: str) -> Any:
    """The named collection of the job's hook (smdebug's module-level ``get_collection``)."""
    return _any_hook().get_collection(name)


def get_collections() -> dict[str, Any]:
    """Every collection of the job's hook."""
    return dict(_any_hook().get_collections())


def _wrap_optimizer(self: Any, optimizer: Any) -> Any:
    """Return ``optimizer`` itself: trainspect's Keras hook reads gradients from the training step."""
    return optimizer


def _set_keras_mode(self: Any, mode: Any) -> None:
    """Switch the mode of what is recorded next (``fit``/``evaluate``/``predict`` set it themselves).

    Through the step driver: an open step ends with what the framework staged for it, as at any other boundary.
    """
    self._driver.set_mode(parse_mode(mode))


def _wrap_tape(self: Any, tape: Any) -> Any:
    raise SmdebugNotSupported(
        "smdebug.tensorflow.KerasHook.wrap_tape is not supported by trainspect: GradientTape loops are not "
        "instrumented; train with Model.fit(callbacks=[hook]) (the hook is a Keras callback)"
    )


def _job_hook_class(base: type, module: str, name: str, extra: dict[str, Any] | None = None) -> type:
    """A subclass of a trainspect hook that becomes the job's hook (``get_hook()``) when created, named as smdebug's."""

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        base.__init__(self, *args, **kwargs)  # type: ignore[misc]
        set_hook(self)

    def _cleanup(self: Any) -> None:
        """Close the hook (smdebug's end-of-job call, which its tests and some scripts make)."""
        self.close()

    attrs = {"__init__": __init__, "_cleanup": _cleanup, "__module__": module, **(extra or {})}
    cls = type(name, (base,), attrs)
    cls.__qualname__ = name
    return cls


@functools.cache
def pytorch_hook_class() -> type:
    """``smdebug.pytorch.Hook``: trainspect's PyTorch hook with smdebug's subclass points, the job's hook."""
    from trainspect.hooks.torch_smdebug import SmdebugHook

    return _job_hook_class(SmdebugHook, "smdebug.pytorch", "Hook")


@functools.cache
def keras_hook_class() -> type:
    """``smdebug.tensorflow.KerasHook``: trainspect's Keras hook (a Keras callback), registered as the job's hook."""
    from trainspect.hooks.keras_hook import Hook

    extra = {"wrap_optimizer": _wrap_optimizer, "wrap_tape": _wrap_tape, "set_mode": _set_keras_mode}
    return _job_hook_class(Hook, "smdebug.tensorflow", "KerasHook", extra)


def create_trial(path: str | os.PathLike[str], name: str | None = None, **smdebug_options: Any) -> Any:
    """The ``create_trial`` of smdebug; its reading options (``range_steps``, ``parallel``…) need no setting."""
    from trainspect.store.trial import create_trial as ts_create_trial

    if smdebug_options:
        log.debug("trainspect: create_trial ignores smdebug options %s", sorted(smdebug_options))
    _flush_job_hook()
    return ts_create_trial(os.fspath(path), name=name)


def _flush_job_hook() -> None:
    """Put the steps the job's hook has ended on disk before a trial in the same process reads them.

    smdebug writes a step's file when the step ends, so its scripts read a run right after the training loop without
    closing the hook; trainspect's writer works in the background, so the read waits for it (at most 10 s).
    """
    hook = _CURRENT[0] if _CURRENT else _autologged()
    flush = getattr(hook, "flush", None)
    if flush is not None and not getattr(hook, "disabled", False):
        flush(timeout=10.0)
