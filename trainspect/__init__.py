"""trainspect: a local debugger and profiler for deep-learning training jobs.

``import trainspect`` loads no framework; ``trainspect.torch`` and ``trainspect.keras`` import theirs on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from trainspect import modes
from trainspect._version import __version__
from trainspect.collections import Collection
from trainspect.config import ReductionConfig, SaveConfig, SaveConfigMode
from trainspect.exceptions import ConfigError, RunDirectoryInUse, TrainingStopped
from trainspect.modes import ModeKeys
from trainspect.store.trial import StepState, Trial, create_trial

__all__ = [
    "Collection",
    "ConfigError",
    "ModeKeys",
    "ReductionConfig",
    "RunDirectoryInUse",
    "SaveConfig",
    "SaveConfigMode",
    "StepState",
    "TrainingStopped",
    "Trial",
    "__version__",
    "autolog",
    "create_trial",
    "modes",
]

_LAZY = {"torch", "keras", "rules", "profiler", "report", "mlflow_plugin", "frames"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return importlib.import_module(f"trainspect.{name}")
    if name == "ProfilerConfig":
        from trainspect.profiler.config import ProfilerConfig

        return ProfilerConfig
    raise AttributeError(f"module 'trainspect' has no attribute {name!r}")


def autolog(*args: Any, **kwargs: Any) -> Any:
    """Instrument the frameworks in this process with no other change to the script (see ``trainspect.hooks.zcc``)."""
    from trainspect.hooks.zcc import autolog as _autolog
    from trainspect.smdebug_compat import install

    return _autolog(*args, smdebug_installer=install, **kwargs)
