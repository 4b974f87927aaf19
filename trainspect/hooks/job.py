"""The job that ``autolog()``/``trainspect run`` records in this process, and how a script's own hook joins it.

The active loggers, and the settings of a hook the script creates itself (one hook, one run directory per job).
Below both :mod:`trainspect.hooks.zcc` (which fills :data:`_ACTIVE`) and the hooks (which join it): neither needs
the other's module.
"""

from __future__ import annotations

import logging
from typing import Any

from trainspect import hook_settings

__all__ = ["PyTorchJob", "active_hook", "active_job", "join_autolog"]

log = logging.getLogger(__name__)

_ACTIVE: list[Any] = []
"""The loggers ``autolog()`` installed in this process (at most one; a Keras-only one is no :class:`PyTorchJob`)."""


class PyTorchJob:
    """What a PyTorch ``autolog()`` offers the hooks (``trainspect.hooks.zcc.AutoLogger`` is one)."""

    hook: Any
    hook_kwargs: dict[str, Any]

    def adopt(self, hook: Any) -> None:
        """Record with the script's own hook from now on."""
        raise NotImplementedError

    def close(self) -> None:
        """Remove the patches and close the hook."""
        raise NotImplementedError


def _job() -> PyTorchJob | None:
    return _ACTIVE[0] if _ACTIVE and isinstance(_ACTIVE[0], PyTorchJob) else None


def join_autolog(framework: str, given: dict[str, Any]) -> tuple[dict[str, Any], PyTorchJob | None]:
    """Settings for a PyTorch hook the script creates while autolog is active: one hook, one run directory per job.

    The run directory stays ``trainspect run``'s; every setting the script gives (anything but a default) wins, the
    others come from ``trainspect run``'s configuration, and included collections are the union of both. Returns the
    settings and the logger that must adopt the new hook (None when autolog is not active).
    """
    logger = _job()
    if logger is None or framework != "pytorch" or logger.hook.disabled:
        return given, None
    if logger.hook.collector.step_open or logger.hook.collector.global_step >= 0:
        log.warning(
            "trainspect: the script created its own hook after recording began; this job keeps recording "
            "into %s with trainspect run's settings and the script's hook records nothing",
            logger.hook.out_dir,
        )
        return {**given, "dry_run": True}, None
    defaults = hook_settings.defaults("pytorch")
    merged = {**defaults, **logger.hook_kwargs}
    for key, value in given.items():
        if key == "out_dir" or value is None or (key in defaults and value == defaults[key]):
            continue
        if key == "include_collections" and merged.get(key):
            value = [*merged[key], *(v for v in value if v not in merged[key])]
        merged[key] = value
    return merged, logger


def active_job() -> PyTorchJob | None:
    """The PyTorch ``autolog()`` job of this process (None when not active)."""
    return _job()


def active_hook() -> Any:
    """The hook that ``autolog()``/``trainspect run`` records with in this process (None when not active)."""
    logger = _job()
    return logger.hook if logger is not None else None
