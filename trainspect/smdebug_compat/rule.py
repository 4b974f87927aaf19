"""smdebug's custom-rule surface on a trainspect Trial: ``Rule``, ``RequiredTensors``, ``invoke_rule``.

A custom rule written for SageMaker Debugger (``from smdebug.rules.rule import Rule``) subclasses :class:`Rule`,
declares what it reads in ``set_required_tensors(step)`` (optional) and judges one global step in
``invoke_at_step(step)``. :func:`invoke_rule` walks the saved steps, as smdebug's invoker does, and a rule whose
condition is met raises :class:`RuleEvaluationConditionMet` from ``invoke`` (spec 0.1-0.3).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from trainspect.exceptions import (
    NoMoreData,
    StepUnavailable,
    TensorUnavailable,
    TensorUnavailableForStep,
    TrainspectError,
)

__all__ = [
    "Rule",
    "RequiredTensors",
    "RuleEvaluationConditionMet",
    "InsufficientInformationForRuleInvocation",
    "invoke_rule",
]

log = logging.getLogger(__name__)
POLL_S = 2.0
"""How often a rule invoked on a running job looks for new steps (smdebug's poll interval)."""


class RuleEvaluationConditionMet(TrainspectError):
    """A rule's condition was met at a step (``end_of_rule=True`` ends the rule's evaluation)."""

    def __init__(self, rule_name: str, step: int, end_of_rule: bool = False) -> None:
        super().__init__(f"Evaluation of the rule {rule_name} at step {step} resulted in the condition being met")
        self.rule_name, self.step, self.end_of_rule = rule_name, step, end_of_rule


class InsufficientInformationForRuleInvocation(TrainspectError):
    """A rule cannot run with the information available."""


class RequiredTensors:
    """The tensors a rule reads at a step, declared in ``set_required_tensors`` and read before ``invoke_at_step``."""

    def __init__(self, base_trial: Any, other_trials: list[Any]) -> None:
        self.trials = [base_trial, *other_trials]
        self._wanted: dict[tuple[int, str], set[int]] = {}

    def add(self, name: str, steps: list[int], trial: Any = None, should_match_regex: bool = False) -> None:
        """Declare ``name`` (or every tensor matching it) at ``steps`` of ``trial`` (the base trial by default).

        Raises:
            TensorUnavailable: the trial never saved ``name``.
        """
        trial = self.trials[0] if trial is None else trial
        names = trial.tensor_names(regex=[name]) if should_match_regex else [name]
        for one in names:
            if not should_match_regex and one not in trial.tensor_names():
                raise TensorUnavailable(one)
            self._wanted.setdefault((self._trial_index(trial), one), set()).update(steps)

    def _trial_index(self, trial: Any) -> int:
        return next(i for i, t in enumerate(self.trials) if t is trial)

    def get_names(self) -> set[str]:
        """The names declared so far."""
        return {name for _, name in self._wanted}

    def get(self) -> list[Any]:
        """The declared tensors (Trial ``Tensor`` objects)."""
        return [self.trials[i].tensor(name) for i, name in self._wanted]

    def get_tensor_steps(self, name: str, trial: Any = None) -> list[int]:
        """The steps declared for ``name``."""
        index = 0 if trial is None else self._trial_index(trial)
        return sorted(self._wanted.get((index, name), ()))

    def clear(self) -> None:
        """Forget every declaration (before the next step)."""
        self._wanted.clear()

    def fetch(self) -> None:
        """Read every declared value once.

        Raises:
            TensorUnavailableForStep: a declared value was not saved.
        """
        for (index, name), steps in self._wanted.items():
            tensor = self.trials[index].tensor(name)
            for step in sorted(steps):
                tensor.value(step)


class Rule:
    """smdebug's custom-rule base: subclass it and implement ``invoke_at_step(step) -> bool``.

    Example:
        >>> class Never(Rule):
        ...     def invoke_at_step(self, step):
        ...         return False
        >>> Never(base_trial=None).rule_name
        'Never'
    """

    def __init__(self, base_trial: Any, action_str: str = "", other_trials: list[Any] | None = None) -> None:
        self.base_trial = base_trial
        self.other_trials = list(other_trials or [])
        self.trials = [base_trial, *self.other_trials]
        self.action_str = action_str
        self.rule_name = type(self).__name__
        self.req_tensors = RequiredTensors(base_trial, self.other_trials)
        self.report: dict[str, Any] = {
            "RuleTriggered": 0,
            "Violations": 0,
            "Details": {},
            "Datapoints": 0,
            "RuleParameters": "",
        }

    def set_required_tensors(self, step: int) -> None:
        """Declare what ``invoke_at_step(step)`` reads (optional)."""

    def invoke_at_step(self, step: int) -> bool:
        """Return True when the rule's condition is met at ``step``."""
        raise NotImplementedError

    def invoke(self, step: int) -> None:
        """Judge one global step: read what is declared, then raise when the condition is met.

        Raises:
            RuleEvaluationConditionMet: ``invoke_at_step`` returned a true value.
        """
        self.req_tensors.clear()
        self.set_required_tensors(step)
        self.req_tensors.fetch()
        if self.invoke_at_step(step):
            self.report["RuleTriggered"] += 1
            raise RuleEvaluationConditionMet(self.rule_name, step)


def invoke_rule(rule_obj: Rule, start_step: int = 0, end_step: int | None = None, raise_eval_cond: bool = False) -> int:
    """Evaluate a rule at every saved step in ``[start_step, end_step)``; return how many steps met it.

    Steps whose tensors are missing are skipped, as smdebug does. With ``end_step=None`` on a job still
    running, new steps are judged as they arrive until the job ends.

    Raises:
        RuleEvaluationConditionMet: the condition was met and ``raise_eval_cond`` is set.
    """
    trial, judged, met = rule_obj.base_trial, -1, 0
    while True:
        trial.refresh()
        steps = [s for s in trial.steps() if max(start_step, judged + 1) <= s and (end_step is None or s < end_step)]
        for step in steps:
            judged = step
            try:
                rule_obj.invoke(step)
            except (TensorUnavailableForStep, TensorUnavailable, StepUnavailable, NoMoreData):
                continue
            except RuleEvaluationConditionMet as met_at:
                met += 1
                if raise_eval_cond:
                    raise
                log.info("%s", met_at)
                if met_at.end_of_rule:
                    return met
        if trial.loaded_all_steps or (end_step is not None and judged >= end_step - 1):
            return met
        time.sleep(POLL_S)
