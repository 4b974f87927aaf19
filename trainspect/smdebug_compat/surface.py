"""The smdebug modules trainspect answers, built from trainspect's own classes (docs/smdebug.md lists each call).

Each entry of :data:`MODULES` returns the public names of one smdebug module. Frameworks are imported only when the
module that needs them is imported (``smdebug.pytorch`` imports torch, ``smdebug.tensorflow`` imports keras).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType
from typing import Any

from trainspect.exceptions import SmdebugNotSupported

__all__ = ["MODULES", "build", "CollectionKeys", "SmdebugNotSupported"]


class CollectionKeys:
    """smdebug's names of the built-in collections."""

    ALL = "all"
    DEFAULT = "default"
    WEIGHTS = "weights"
    BIASES = "biases"
    GRADIENTS = "gradients"
    LOSSES = "losses"
    METRICS = "metrics"
    INPUTS = "inputs"
    OUTPUTS = "outputs"
    LAYERS = "layers"
    SM_METRICS = "sm_metrics"
    OPTIMIZER_VARIABLES = "optimizer_variables"
    TENSORFLOW_SUMMARIES = "tensorflow_summaries"
    SCALARS = "scalars"
    RELU_OUTPUT = "relu_output"
    TANH_INPUT = "tanh_input"
    SIGMOID_INPUT = "sigmoid_input"
    LABELS = "labels"
    PREDICTIONS = "predictions"


# Public smdebug names that trainspect does not implement, with the nearest trainspect equivalent.
_NOT_SUPPORTED = {
    "SessionHook": "TensorFlow 1 sessions are not supported; use KerasHook (Keras 3 fit/evaluate/predict)",
    "EstimatorHook": "TensorFlow estimators are not supported; use KerasHook (Keras 3 fit/evaluate/predict)",
    "wrap_optimizer": "not needed: trainspect.keras.Hook reads gradients from the training step",
    "wrap_tape": "GradientTape loops are not instrumented; use Model.fit with KerasHook",
    "register_block": "MXNet is not supported",
    "reset_collections": "collections belong to the hook: hook.get_collections()",
    "load_collections": "read a run's collections with create_trial(path).collections()",
    "ProfilerTrial": "read profiler data with trainspect.profiler (see docs/profiler.md)",
    "S3SystemMetricsReader": "use LocalSystemMetricsReader(path); trainspect.profiler.SystemMetricsReader reads s3://",
    "S3AlgorithmMetricsReader": "use LocalAlgorithmMetricsReader(path); trainspect.profiler.FrameworkMetricsReader "
    "reads s3://",
}
_TS = "trainspect"


def _missing(module: str) -> Callable[[str], Any]:
    def __getattr__(name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        hint = _NOT_SUPPORTED.get(name, f"see docs/smdebug.md for what {_TS} implements")
        raise SmdebugNotSupported(f"{module}.{name} is not supported by {_TS}'s smdebug compatibility layer: {hint}")

    return __getattr__


def _common() -> dict[str, Any]:
    from trainspect import modes
    from trainspect.config import ReductionConfig, SaveConfig, SaveConfigMode

    return {
        "modes": modes,
        "SaveConfig": SaveConfig,
        "SaveConfigMode": SaveConfigMode,
        "ReductionConfig": ReductionConfig,
    }


def _modes() -> dict[str, Any]:
    from trainspect import modes

    return {name: getattr(modes, name) for name in ("ModeKeys", "TRAIN", "EVAL", "PREDICT", "GLOBAL")}


def _trials() -> dict[str, Any]:
    from trainspect.smdebug_compat.api import create_trial

    return {"create_trial": create_trial}


def _framework(kind: str) -> dict[str, Any]:
    api = importlib.import_module("trainspect.smdebug_compat.api")
    names = {
        "pytorch": ("Hook", "set_hook", "del_hook", "get_collection", "get_collections"),
        "tensorflow": ("KerasHook", "set_hook", "del_hook", "get_collection", "get_collections"),
    }[kind]
    out = {**_common(), **_trials(), "CollectionKeys": CollectionKeys}
    from trainspect.collections import Collection

    out["Collection"] = Collection
    hook_class = api.pytorch_hook_class() if kind == "pytorch" else api.keras_hook_class()
    out.update({name: hook_class if name in ("Hook", "KerasHook") else getattr(api, name) for name in names})
    out["get_hook"] = api.get_hook_for(hook_class)
    return out


def _hook_module(kind: str) -> dict[str, Any]:
    exports = _framework(kind)
    return {k: exports[k] for k in ("Hook", "KerasHook") if k in exports}


def _singletons(kind: str) -> dict[str, Any]:
    exports = _framework(kind)
    return {k: exports[k] for k in ("get_hook", "set_hook", "del_hook")}


def _config_constants() -> dict[str, Any]:
    return {
        "CONFIG_FILE_PATH_ENV_STR": "SMDEBUG_CONFIG_FILE_PATH",
        "DEFAULT_CONFIG_FILE_PATH": "/opt/ml/input/config/debughookconfig.json",
    }


def _rules() -> dict[str, Any]:
    from trainspect.smdebug_compat.rule import Rule, invoke_rule

    return {"invoke_rule": invoke_rule, "Rule": Rule}


def _rule_module() -> dict[str, Any]:
    from trainspect.smdebug_compat import rule

    return {name: getattr(rule, name) for name in ("Rule", "RequiredTensors")}


def _exceptions() -> dict[str, Any]:
    from trainspect import exceptions
    from trainspect.smdebug_compat import rule

    names = ("TensorUnavailable", "TensorUnavailableForStep", "StepUnavailable", "StepNotYetAvailable", "NoMoreData")
    return {
        **{name: getattr(exceptions, name) for name in names},
        **{
            name: getattr(rule, name)
            for name in ("RuleEvaluationConditionMet", "InsufficientInformationForRuleInvocation")
        },
    }


def _core_collection() -> dict[str, Any]:
    from trainspect.collections import Collection

    return {"Collection": Collection, "CollectionKeys": CollectionKeys}


def str2bool(value: Any) -> bool:
    """The ``str2bool`` of smdebug (used by SageMaker scripts for their argparse flags)."""
    from trainspect.config import parse_bool

    return parse_bool("value", value)


def _notebook(*names: str) -> Callable[[], dict[str, Any]]:
    """The smdebug notebook views and local readers (``trainspect.notebook.compat``) named ``names``."""

    def exports() -> dict[str, Any]:
        from trainspect.notebook import compat

        return {name: getattr(compat, name) for name in names}

    return exports


def _picked(*names: str) -> Callable[[], dict[str, Any]]:
    return lambda: {k: v for k, v in _common().items() if k in names}


MODULES: dict[str, Callable[[], dict[str, Any]]] = {
    "smdebug": lambda: {**_common(), "__version__": "1.0.34+trainspect"},
    "smdebug.modes": _modes,
    "smdebug.core": dict,
    "smdebug.core.modes": _modes,
    "smdebug.core.collection": _core_collection,
    "smdebug.core.json_config": _config_constants,
    "smdebug.core.config_constants": _config_constants,
    "smdebug.core.reduction_config": _picked("ReductionConfig"),
    "smdebug.core.save_config": _picked("SaveConfig", "SaveConfigMode"),
    "smdebug.pytorch": lambda: _framework("pytorch"),
    "smdebug.pytorch.hook": lambda: _hook_module("pytorch"),
    "smdebug.pytorch.collection": _core_collection,
    "smdebug.pytorch.singleton_utils": lambda: _singletons("pytorch"),
    "smdebug.tensorflow": lambda: _framework("tensorflow"),
    "smdebug.tensorflow.keras": lambda: _hook_module("tensorflow"),
    "smdebug.tensorflow.singleton_utils": lambda: _singletons("tensorflow"),
    "smdebug.trials": _trials,
    "smdebug.rules": _rules,
    "smdebug.rules.rule_invoker": _rules,
    "smdebug.rules.rule": _rule_module,
    "smdebug.exceptions": _exceptions,
    "smdebug.profiler": dict,
    "smdebug.profiler.utils": lambda: {"str2bool": str2bool},
    "smdebug.profiler.system_metrics_reader": _notebook("LocalSystemMetricsReader"),
    "smdebug.profiler.algorithm_metrics_reader": _notebook("LocalAlgorithmMetricsReader"),
    "smdebug.profiler.analysis": dict,
    "smdebug.profiler.analysis.notebook_utils": dict,
    "smdebug.profiler.analysis.notebook_utils.metrics_histogram": _notebook("MetricsHistogram"),
    "smdebug.profiler.analysis.notebook_utils.step_histogram": _notebook("StepHistogram"),
    "smdebug.profiler.analysis.notebook_utils.heatmap": _notebook("Heatmap"),
}


def build(module: ModuleType) -> None:
    """Fill an ``smdebug`` module object with trainspect's implementation of its public names."""
    exports = MODULES[module.__name__]()
    module.__dict__.update(exports)
    module.__dict__["__all__"] = sorted(k for k in exports if not k.startswith("_"))
    module.__dict__["__getattr__"] = _missing(module.__name__)
