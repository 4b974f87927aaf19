"""The incremental form of a tensor rule: declared inputs, a small state, and a pure per-step check.

A :class:`TensorRule` declares what it reads as :class:`Select` entries (collections, regexes, module
types, the reductions it needs and whether it needs raw values), keeps its memory in a small state object
from :meth:`TensorRule.init_state`, and judges one step at a time in :meth:`TensorRule.check`. The
engine (a whole trial at once) and the live runner (steps as the hook records them) feed the same check,
so offline and live verdicts agree.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, ClassVar

from trainspect.rules.base import Requirement, Rule
from trainspect.rules.columns import Checks, Columns
from trainspect.rules.step_data import Check, StepData
from trainspect.rules.tally import Tally
from trainspect.rules.verdict import Verdict

__all__ = ["Select", "TensorRule"]


@dataclass(frozen=True)
class Select:
    """One input of a rule: which tensors it reads, under which role, and in what form.

    A tensor is selected when it belongs to one of ``collections`` or its name matches one of ``regex``
    (``re.match``, as smdebug), or always with ``all_tensors``.

    Args:
        role: the name the rule uses for these tensors (``"main"``, ``"labels"``…).
        collections: collection names.
        regex: tensor-name regexes.
        all_tensors: select every tensor.
        module_types: module class names whose inputs/outputs the hook records into ``collections[0]``.
        module_inputs: record those modules' inputs.
        module_outputs: record those modules' outputs.
        reductions: reductions the rule reads (``"abs_mean"``…); saved by the hook when ``raw`` is False.
        raw: whether the rule needs full values.

    Example:
        >>> Select("main", collections=("gradients",)).matches("gradient/Net_fc.weight", frozenset({"gradients"}))
        True
    """

    role: str = "main"
    collections: tuple[str, ...] = ()
    regex: tuple[str, ...] = ()
    all_tensors: bool = False
    module_types: tuple[str, ...] = ()
    module_inputs: bool = False
    module_outputs: bool = False
    reductions: tuple[str, ...] = ()
    raw: bool = True

    def matches(self, name: str, collections: frozenset[str]) -> bool:
        """Return whether the tensor ``name`` (member of ``collections``) is selected."""
        if self.all_tensors or any(c in collections for c in self.collections):
            return True
        return any(_compiled(r).match(name) for r in self.regex)

    def describe(self) -> str:
        """Say what to record for this input, for NoData messages."""
        parts = []
        if self.collections:
            parts.append("collection " + " or ".join(repr(c) for c in self.collections))
        if self.regex:
            parts.append("tensors matching " + " or ".join(repr(r) for r in self.regex))
        if self.module_types:
            where = "inputs" if self.module_inputs else "outputs"
            parts.append(f"the {where} of {'/'.join(self.module_types)} modules")
        return ", ".join(parts) if parts else "any tensor"


_REGEX_CACHE: dict[str, re.Pattern[str]] = {}


def _compiled(pattern: str) -> re.Pattern[str]:
    compiled = _REGEX_CACHE.get(pattern)
    if compiled is None:
        compiled = _REGEX_CACHE[pattern] = re.compile(pattern)
    return compiled


class TensorRule(Rule):
    """Base class of tensor rules: implement :meth:`selects`, :meth:`check` and, if needed, a state.

    Class attributes:
        live: whether the rule can run in-process from the hook's step records (False for rules that
            read other runs).
        needs_tensors: whether a step without any selected tensor is skipped (False for rules that watch
            the steps themselves, such as StalledTrainingRule).
        series_label: the name of the watched value in charts.
    """

    kind: ClassVar[str] = "tensor"
    live: ClassVar[bool] = True
    needs_tensors: ClassVar[bool] = True
    series_label: ClassVar[str] = "value"

    def selects(self) -> list[Select]:
        """Return the rule's inputs (default: every tensor)."""
        return [Select(all_tensors=True)]

    def requirements(self) -> list[Requirement]:
        """Return what the hook must record for this rule, derived from :meth:`selects`."""
        reqs = []
        for sel in self.selects():
            if sel.all_tensors or not (sel.collections or sel.regex):
                continue
            name = sel.collections[0] if sel.collections else f"{self.name.lower()}_{sel.role}"
            reqs.append(
                Requirement(
                    collection=name,
                    include_regex=sel.regex,
                    module_types=sel.module_types,
                    module_inputs=sel.module_inputs,
                    module_outputs=sel.module_outputs,
                    reductions=sel.reductions,
                    raw=sel.raw,
                )
            )
        return reqs

    def compared_runs(self) -> list[str]:
        """Return the paths of other runs this rule compares against (default: none).

        A rule written before this name existed may define ``other_trials()`` instead; it is still called.
        """
        legacy = getattr(self, "other_trials", None)
        return list(legacy()) if callable(legacy) else []

    def chart_threshold(self) -> float | None:
        """Return the threshold drawn with the series (default: none).

        A rule written before this name existed may define ``threshold()`` instead; it is still called.
        """
        legacy = getattr(self, "threshold", None)
        return legacy() if callable(legacy) else None

    def init_state(self) -> Any:
        """Return a fresh state object for one evaluation (default: None, a stateless rule)."""
        return None

    @classmethod
    def has_check(cls) -> bool:
        """Whether the class implements the incremental check (every built-in tensor rule does)."""
        return cls.check is not TensorRule.check

    def check(self, state: Any, data: StepData) -> Check | None:
        """Judge one step; return None when the step gives no datapoint (too little data so far)."""
        raise NotImplementedError(f"{self.name} does not implement check()")

    def check_columns(self, state: Any, cols: Columns) -> Checks | None:
        """Judge a chunk of steps at once, as :meth:`check` step by step would (optional; the offline fast path).

        ``cols`` holds whole columns (see :mod:`trainspect.rules.columns`): every role at most one scalar tensor.
        Judge the steps step-by-step feeding would give (those in ``cols.seen`` when ``needs_tensors``), leave the
        state as those calls would, and return their datapoints; or return None, before changing the state, to be
        fed step by step (the default).
        """
        return None

    def finish(self, state: Any, last: StepData | None) -> Check | None:
        """Judge what is left once the data ends (default: nothing); ``last`` is the last step seen."""
        return None

    def idle(self, state: Any, now: float, last: StepData | None) -> Check | None:
        """Judge the time since the last step while waiting for data (default: nothing)."""
        return None

    def insufficient(self, state: Any) -> str:
        """Explain why steps with inputs gave no datapoint (too little data); used in NoData messages."""
        return "too few steps to judge"

    def describe_inputs(self) -> str:
        """Say what must be recorded for this rule."""
        return "; ".join(s.describe() for s in self.selects())

    def evaluate(self, data: Any) -> Verdict:
        """Judge a finished sequence of :class:`StepData` (a pure, batch use of :meth:`check`).

        Args:
            data: an iterable of :class:`StepData` in step order, each holding this rule's inputs.

        Returns:
            The verdict over all steps, with every triggering step counted.
        """
        tally = Tally(self)
        steps: Iterable[StepData] = data
        for step in steps:
            tally.feed(step)
        tally.end()
        return tally.verdict(finished=True)
