"""MLflow integration: logging a job to an MLflow run, the run-context provider, autolog and mlflow-sync.

The submodules load on first use. The run-context provider (``trainspect.mlflow_plugin.context``) is MLflow's entry
point, loaded by MLflow while ``import mlflow`` runs: it is reached here only after MLflow is imported, and no other
module imports it, so MLflow never finds it half-initialised.

Example:
    >>> from trainspect.mlflow_plugin import system_key
    >>> system_key("cpu_memory_used_bytes")
    ('system/system_memory_usage_megabytes', 1e-06)
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Divergence",
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
    "Divergence": "divergence",
    "MlflowLogger": "logger",
    "MlflowSession": "session",
    "MlflowSink": "sink",
    "TrainspectRunContextProvider": "context",
    "autolog": "autologging",
    "context_tags": "tags",
    "resolve_run": "session",
    "step_metrics": "keys",
    "sync_run": "sync",
    "system_key": "keys",
    "system_metrics": "keys",
    "verdict_tags": "keys",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        if _WHERE[name] == "context":
            importlib.import_module("mlflow")  # MLflow first: its registry loads the context module itself
        return getattr(importlib.import_module(f"trainspect.mlflow_plugin.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'trainspect.mlflow_plugin' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(__all__)
