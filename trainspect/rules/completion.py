"""Verdicts for every rule that can judge a run, over the whole run: the report and the closing summary use them.

The hook's live rules judge while training; what they do not cover (tensor rules not in the live set, profiler
rules, verdicts of a mid-run ``trainspect rules``) is evaluated when the report is made, so the report, the
closing line, ``trainspect rules``, TensorBoard and MLflow speak of the same rules.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from typing import Any

from trainspect.rules.base import Rule
from trainspect.rules.record import unfinished_rules
from trainspect.rules.tensor_rule import TensorRule
from trainspect.rules.verdict import Status, Verdict
from trainspect.store.layout import RunLayout

__all__ = ["rules_to_complete", "evaluate_missing"]

_log = logging.getLogger(__name__)


def rules_to_complete(
    run_dir: str | os.PathLike[str], current: Sequence[Verdict], trial: Any, has_profiler: bool
) -> tuple[list[TensorRule], list[Rule]]:
    """The built-in tensor and profiler rules the record lacks, or holds only unfinished.

    Args:
        run_dir: the run directory.
        current: its current verdicts.
        trial: its Trial (None: no tensors; no tensor rule is added).
        has_profiler: whether it holds profiler data (else no profiler rule is added).
    """
    from trainspect.rules.applicable import applicable_rules
    from trainspect.rules.profiler import PROFILER_RULES
    from trainspect.rules.registry import default_registry

    stale = unfinished_rules(RunLayout(run_dir).verdicts)
    have = {v.rule for v in current} - stale
    tensor: list[TensorRule] = []
    if trial is not None:
        try:
            chosen, _skipped = applicable_rules(trial, {}, default_registry(), strict=False)
        except Exception as exc:  # noqa: BLE001 - a damaged trial: its tensor rules are left as they are
            _log.warning("trainspect: could not choose the tensor rules for %s: %s", run_dir, exc)
            chosen = []
        tensor = [r for r in chosen if isinstance(r, TensorRule) and r.name not in have]
    profiler: list[Rule] = []
    if has_profiler:
        for rule_cls in PROFILER_RULES:
            rule = rule_cls()  # type: ignore[abstract]
            if rule.name not in have:
                profiler.append(rule)
    return tensor, profiler


def evaluate_missing(trial: Any, rules: Sequence[TensorRule], over: bool) -> list[Verdict]:
    """Evaluate tensor ``rules`` over the whole ``trial`` (no actions fired, nothing written).

    A rule that fails ends as an ``Error`` verdict; ``over``: the run has ended (else verdicts are InProgress).
    """
    if not rules:
        return []
    from trainspect.rules.engine import evaluate

    try:
        return evaluate(trial, list(rules), write=False, actions=False, final=over)
    except Exception as exc:  # noqa: BLE001 - one failed evaluation is its own verdict, not the report's
        _log.warning("trainspect: tensor rules could not be evaluated: %s", exc)
        return [
            Verdict(rule=r.name, status=Status.ERROR, kind=r.kind, message=f"{type(exc).__name__}: {exc}")
            for r in rules
        ]
