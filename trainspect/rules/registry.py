"""The rule registry: built-in rules registered explicitly, then entry-point plugins (group ``trainspect.rules``).

A plugin that fails to load is skipped with one warning, never a crash. Names are looked up case-insensitively.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from typing import Any

from trainspect._entry_points import load_entry_points
from trainspect.exceptions import ConfigError
from trainspect.rules.all_zero import AllZero
from trainspect.rules.base import Rule
from trainspect.rules.check_input_images import CheckInputImages
from trainspect.rules.class_imbalance import ClassImbalance
from trainspect.rules.confusion import Confusion
from trainspect.rules.dead_relu import DeadRelu
from trainspect.rules.exploding_tensor import ExplodingTensor
from trainspect.rules.loss_not_decreasing import LossNotDecreasing
from trainspect.rules.nlp_sequence_ratio import NLPSequenceRatio
from trainspect.rules.overfit import Overfit
from trainspect.rules.overtraining import Overtraining
from trainspect.rules.poor_weight_initialization import PoorWeightInitialization
from trainspect.rules.saturated_activation import SaturatedActivation
from trainspect.rules.similar_across_runs import SimilarAcrossRuns
from trainspect.rules.stalled_training_rule import StalledTrainingRule
from trainspect.rules.tensor_variance import TensorVariance
from trainspect.rules.unchanged_tensor import UnchangedTensor
from trainspect.rules.vanishing_gradient import VanishingGradient
from trainspect.rules.weight_update_ratio import WeightUpdateRatio

__all__ = [
    "ENTRY_POINT_GROUP",
    "TENSOR_RULES",
    "RuleRegistry",
    "default_registry",
    "default_rules",
    "rules_from_config",
    "resolve_rules",
]

ENTRY_POINT_GROUP = "trainspect.rules"

TENSOR_RULES: tuple[type[Rule], ...] = (
    VanishingGradient,
    ExplodingTensor,
    PoorWeightInitialization,
    SaturatedActivation,
    DeadRelu,
    WeightUpdateRatio,
    AllZero,
    ClassImbalance,
    Confusion,
    LossNotDecreasing,
    Overfit,
    Overtraining,
    SimilarAcrossRuns,
    TensorVariance,
    UnchangedTensor,
    CheckInputImages,
    NLPSequenceRatio,
    StalledTrainingRule,
)
"""The built-in tensor rules, in smdebug's order."""

_KINDS = ("tensor", "profiler")


class RuleRegistry:
    """Rule classes by name (case-insensitive).

    Example:
        >>> reg = RuleRegistry()
        >>> reg.register(VanishingGradient)
        >>> reg.get("vanishinggradient").__name__
        'VanishingGradient'
    """

    def __init__(self) -> None:
        self._rules: dict[str, type[Rule]] = {}

    def register(self, cls: type[Rule]) -> None:
        """Add a rule class after checking its declared capabilities.

        Raises:
            ConfigError: the class is no Rule, declares an unknown ``kind``, or its name is taken.
        """
        if not (isinstance(cls, type) and issubclass(cls, Rule)):
            raise ConfigError(f"rule registry: {cls!r} is not a subclass of trainspect.rules.Rule")
        if getattr(cls, "kind", None) not in _KINDS:
            raise ConfigError(f"rule registry: {cls.__name__}.kind={cls.kind!r}; allowed: {', '.join(_KINDS)}")
        key = cls.__name__.lower()
        if key in self._rules and self._rules[key] is not cls:
            raise ConfigError(f"rule registry: a rule named {cls.__name__} is already registered")
        self._rules[key] = cls

    def get(self, name: str) -> type[Rule]:
        """Return the class registered under ``name``.

        Raises:
            ConfigError: no such rule; the message lists the valid names.
        """
        cls = self._rules.get(str(name).strip().lower())
        if cls is None:
            raise ConfigError(f"unknown rule {name!r}; valid rules: {', '.join(self.names())}")
        return cls

    def names(self, kind: str | None = None) -> list[str]:
        """Registered rule names, in registration order (optionally of one kind)."""
        return [c.__name__ for c in self._rules.values() if kind is None or c.kind == kind]

    def classes(self, kind: str | None = None) -> list[type[Rule]]:
        """Registered rule classes (optionally of one kind)."""
        return [c for c in self._rules.values() if kind is None or c.kind == kind]

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name.lower() in self._rules

    def load_entry_points(self, group: str = ENTRY_POINT_GROUP) -> None:
        """Register the rules of installed plugins (a class, or a list or tuple of them, per entry point).

        A broken plugin is skipped with one warning (:func:`~trainspect._entry_points.load_entry_points`).
        """

        def register(loaded: Any) -> None:
            for cls in loaded if isinstance(loaded, (list, tuple)) else [loaded]:
                self.register(cls)

        load_entry_points(group, register, "rule")


def _profiler_rules() -> list[type[Rule]]:
    try:
        from trainspect.rules.profiler import PROFILER_RULES  # type: ignore[attr-defined]
    except ImportError:
        return []
    except Exception as exc:  # a bug there must not take the tensor rules down
        warnings.warn(f"trainspect: profiler rules failed to import: {exc}", RuntimeWarning, stacklevel=2)
        return []
    return list(PROFILER_RULES)


def default_registry(plugins: bool = True) -> RuleRegistry:
    """Build a registry: the built-in tensor rules, the profiler rules, then (optionally) plugins."""
    reg = RuleRegistry()
    for cls in TENSOR_RULES:
        reg.register(cls)
    for cls in _profiler_rules():
        try:
            reg.register(cls)
        except ConfigError as exc:
            warnings.warn(f"trainspect: {exc}", RuntimeWarning, stacklevel=2)
    if plugins:
        reg.load_entry_points()
    return reg


def default_rules() -> list[Rule]:
    """The default rule set of a hook given ``rules="default"``.

    Cheap rules that need only the losses and reductions of the gradients.

    Returns:
        ``[VanishingGradient(), ExplodingTensor(), LossNotDecreasing()]``.
    """
    return [VanishingGradient(), ExplodingTensor(), LossNotDecreasing()]


def _lower_keys(entry: Mapping[str, Any]) -> dict[str, Any]:
    return {str(k).strip().lower().replace("_", ""): v for k, v in entry.items()}


def rules_from_config(config: Iterable[Mapping[str, Any] | str], registry: RuleRegistry | None = None) -> list[Rule]:
    """Build rules from a JSON-style config.

    Each entry is a rule name or a dict with ``name`` (also ``rule`` or ``rule_to_invoke``), optional
    ``parameters`` (values may be strings) and optional ``actions``; keys are case-insensitive.

    Args:
        config: the entries, e.g. ``[{"name": "ExplodingTensor", "parameters": {"only_nan": "True"},
            "actions": ["StopTraining"]}]``.
        registry: where names are looked up (default: :func:`default_registry`).

    Returns:
        The rules.

    Raises:
        ConfigError: an unknown rule, parameter or action; the message lists the valid ones.
    """
    reg = registry or default_registry()
    rules = []
    for entry in config:
        if isinstance(entry, str):
            rules.append(reg.get(entry)())
            continue
        if not isinstance(entry, Mapping):
            raise ConfigError(f"rules config: {entry!r} is neither a rule name nor an object")
        keys = _lower_keys(entry)
        name = keys.get("name") or keys.get("rule") or keys.get("ruletoinvoke")
        if not name:
            raise ConfigError(f"rules config: entry {dict(entry)!r} has no name; valid rules: {', '.join(reg.names())}")
        params = {str(k).strip().lower(): v for k, v in (keys.get("parameters") or keys.get("params") or {}).items()}
        params.pop("rule_to_invoke", None)
        rules.append(reg.get(name)(actions=keys.get("actions"), **params))
    return rules


def resolve_rules(rules: Iterable[Any], registry: RuleRegistry | None = None) -> list[Rule]:
    """Turn what a hook's ``rules=[...]`` holds (rules, rule names, config dicts) into rules.

    Raises:
        ConfigError: an unknown rule name (the message lists the valid ones), or an entry of another type.

    Example:
        >>> [r.name for r in resolve_rules(["VanishingGradient", {"name": "LossNotDecreasing"}])]
        ['VanishingGradient', 'LossNotDecreasing']
    """
    out: list[Rule] = []
    reg = registry
    for i, entry in enumerate(rules):
        if isinstance(entry, Rule):
            out.append(entry)
        elif isinstance(entry, (str, Mapping)):
            reg = reg or default_registry()
            out.extend(rules_from_config([entry], reg))
        elif isinstance(entry, type) and issubclass(entry, Rule):
            out.append(entry())
        else:
            raise ConfigError(
                f"rules[{i}]={entry!r}: expected a Rule (e.g. trainspect.rules.VanishingGradient()), a rule name "
                "or a config dict"
            )
    return out
