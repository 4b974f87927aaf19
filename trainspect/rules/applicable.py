"""Which built-in rules can judge a run: those whose inputs it recorded (the others are skipped, with the reason).

``trainspect rules`` without ``--rule``, the report and the closing summary run this same set, so they count the
same rules.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trainspect.exceptions import ConfigError
from trainspect.rules.base import Rule
from trainspect.rules.registry import RuleRegistry
from trainspect.rules.tensor_rule import TensorRule
from trainspect.rules.trial_feed import TrialFeed, roles_for
from trainspect.rules.trial_view import TrialView
from trainspect.store.layout import RunLayout

__all__ = ["applicable_rules"]


def applicable_rules(
    trial: TrialView, params: dict[str, dict[str, str]], registry: RuleRegistry, strict: bool = True
) -> tuple[list[Rule], list[tuple[str, str]]]:
    """The registry's rules that can judge ``trial``, and ``(name, reason)`` for each one skipped.

    Args:
        trial: the run.
        params: rule parameters by rule class name (``--param``).
        registry: the rules to choose from.
        strict: a rule given parameters that cannot run here is an error, not a skip.

    Raises:
        ConfigError: wrong parameters given for a rule, or (``strict``) parameters for a rule not run here.
    """
    source = TrialFeed(trial)
    names, membership = source.names(), source.membership()
    has_steps = bool(trial.steps())
    path = getattr(trial, "path", None)
    has_profiler = _has_profiler(path) if path else False
    chosen: list[Rule] = []
    skipped: list[tuple[str, str]] = []
    for cls in registry.classes():
        given = params.get(cls.__name__)
        try:
            rule = cls(**(given or {}))
        except ConfigError as exc:
            if given:
                raise  # the user's --param is wrong: say so (exit 2), do not skip the rule silently
            skipped.append((cls.__name__, f"needs parameters: {exc}"))
            continue
        reason = _why_not(rule, names, membership, has_steps, has_profiler)
        if reason and given and strict:
            raise ConfigError(f"--param {cls.__name__}.{next(iter(given))}: {cls.__name__} is not run here ({reason})")
        if reason:
            skipped.append((rule.name, reason))
        else:
            chosen.append(rule)
    return chosen, skipped


def _has_profiler(path: Any) -> bool:
    if RunLayout(path).profiler_dir.exists():
        return True
    root = Path(path)
    if not any((root / name).exists() for name in ("system", "framework", "profiler-output")):
        return False  # no SageMaker profiler output can be here: spare the import of the profiler (and pandas)
    from trainspect.profiler.readers import resolve_profiler_root

    return resolve_profiler_root(path)[0] == "sagemaker"


def _why_not(rule: Rule, names: list[str], membership: Any, has_steps: bool, has_profiler: bool) -> str:
    if rule.kind == "profiler":
        return "" if has_profiler else "the run has no profiler data"
    if not isinstance(rule, TensorRule):
        return ""
    if not rule.needs_tensors:
        return "" if has_steps else "the run has no saved steps"
    if roles_for(rule, names, membership):
        return ""
    return f"inputs not recorded: {rule.describe_inputs()}"
