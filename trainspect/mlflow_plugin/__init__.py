"""MLflow integration: logging a job to an MLflow run, the run-context provider, autolog and mlflow-sync.

The submodules load on first use, so that MLflow can import the run-context provider
(``trainspect.mlflow_plugin.context``) while it is itself still initialising.

Example:
    >>> from trainspect.mlflow_plugin import system_key
    >>> system_key("cpu_memory_used_bytes")
    ('system/system_memory_usage_megabytes', 1e-06)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "MlflowLogger",
    "MlflowSession",
    "MlflowSink",
    "TrainspectRunContextProvider",
    "autolog",
    "context_tags",
    "resolve_run",
    "step_metrics",
    "sync_run",
    "system_key",
    "system_metrics",
    "verdict_tags",
]

_WHERE = {
    "MlflowLogger": "logger",
    "MlflowSession": "session",
    "MlflowSink": "sink",
    "TrainspectRunContextProvider": "context",
    "autolog": "autologging",
    "context_tags": "context",
    "resolve_run": "session",
    "step_metrics": "keys",
    "sync_run": "sync",
    "system_key": "keys",
    "system_metrics": "keys",
    "verdict_tags": "session",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"trainspect.mlflow_plugin.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'trainspect.mlflow_plugin' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
