"""One count of rules and steps, shared by the report, the CLI, the TensorBoard plugin and MLflow.

A run's verdict record holds one current verdict per rule. :class:`RuleCounts` sorts them into the rules that
judged the run (they had data), the rules that found issues, the rules that could not look (NoData, with what they
needed) and the rules that failed; every screen prints :meth:`RuleCounts.line`, so the numbers agree everywhere.
:func:`step_counts` counts the steps of each mode separately (TRAIN and EVAL are never added up).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from trainspect.rules.verdict import Status, Verdict

__all__ = ["RuleCounts", "step_counts", "steps_text", "STEP_MODES"]

STEP_MODES = ("TRAIN", "EVAL", "PREDICT")
_NEED_CHARS = 60


def _need(message: str) -> str:
    """Why a NoData rule could not look, in a few words (from its message): ``"needs GPU utilisation"``."""
    text = " ".join(message.split())
    if "could not judge: " in text:
        text = text.split("could not judge: ", 1)[1]
    elif "found no inputs; " in text:
        text = text.split("found no inputs; ", 1)[1]
    head, _, tail = text.partition(": ")
    if "this rule needs " in text:
        text = "needs " + text.split("this rule needs ", 1)[1]
    elif tail.startswith(("the rule ", "this rule ")):
        text = tail.split(" ", 2)[2]
    else:
        text = head
    text = text.rstrip(". ")
    return text if len(text) <= _NEED_CHARS else text[: _NEED_CHARS - 1] + "…"


@dataclass(frozen=True)
class RuleCounts:
    """The rules of a run by outcome; built by :meth:`of` from its current verdicts.

    ``judged`` lists the rules that looked at data (found issues, found none, or still in progress), ``issues``
    those that found issues, ``no_data`` pairs each rule that could not look with what it needed, ``errors`` the
    rules that failed; ``in_progress`` says whether any verdict is not final yet.

    Example:
        >>> vs = [Verdict("ExplodingTensor", Status.ISSUES_FOUND), Verdict("VanishingGradient", Status.NO_ISSUES_FOUND),
        ...       Verdict("LowGPUUtilization", Status.NO_DATA, message="no GPU: this rule needs GPU utilisation")]
        >>> RuleCounts.of(vs).line()  # doctest: +NORMALIZE_WHITESPACE
        '3 rules: 2 judged, 1 found issues (ExplodingTensor), 1 could not look
         (LowGPUUtilization: needs GPU utilisation)'
    """

    judged: tuple[str, ...] = ()
    issues: tuple[str, ...] = ()
    no_data: tuple[tuple[str, str], ...] = ()
    errors: tuple[str, ...] = ()
    in_progress: bool = False

    @classmethod
    def of(cls, verdicts: Iterable[Verdict]) -> RuleCounts:
        """Count ``verdicts`` (a rule met twice counts once: its last verdict)."""
        latest: dict[str, Verdict] = {}
        for v in verdicts:
            latest[v.rule] = v
        judged = [
            r
            for r, v in latest.items()
            if v.status in (Status.ISSUES_FOUND, Status.NO_ISSUES_FOUND, Status.IN_PROGRESS)
        ]
        return cls(
            judged=tuple(judged),
            issues=tuple(r for r, v in latest.items() if v.status is Status.ISSUES_FOUND),
            no_data=tuple((r, _need(v.message)) for r, v in latest.items() if v.status is Status.NO_DATA),
            errors=tuple(r for r, v in latest.items() if v.status is Status.ERROR),
            in_progress=any(v.status is Status.IN_PROGRESS for v in latest.values()),
        )

    @property
    def total(self) -> int:
        """Every rule counted."""
        return len(self.judged) + len(self.no_data) + len(self.errors)

    def no_data_text(self, limit: int = 3) -> str:
        """The rules that could not look, grouped by what they needed (``limit`` groups, then a count)."""
        groups: dict[str, list[str]] = {}
        for rule, need in self.no_data:
            groups.setdefault(need, []).append(rule)
        parts = [
            f"{', '.join(rules)}: {need}" if need else ", ".join(rules) for need, rules in list(groups.items())[:limit]
        ]
        more = len(groups) - limit
        return "; ".join(parts) + (f"; {more} more" if more > 0 else "")

    def line(self) -> str:
        """``"N rules: J judged, M found issues (…), K could not look (…)"``, the one sentence every screen shows."""
        parts = [f"{len(self.judged)} judged"]
        parts.append(f"{len(self.issues)} found issues" + (f" ({', '.join(self.issues)})" if self.issues else ""))
        if self.no_data:
            parts.append(f"{len(self.no_data)} could not look ({self.no_data_text()})")
        if self.errors:
            parts.append(f"{len(self.errors)} failed ({', '.join(self.errors)})")
        head = f"{self.total} rule{'s' if self.total != 1 else ''}"
        tail = " (verdicts in progress: the run is still going)" if self.in_progress else ""
        return f"{head}: {', '.join(parts)}{tail}"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict: the counts, the names, and :meth:`line`."""
        return {
            "total": self.total,
            "judged": len(self.judged),
            "issues": len(self.issues),
            "no_data": len(self.no_data),
            "errors": len(self.errors),
            "issue_rules": list(self.issues),
            "no_data_rules": [{"rule": r, "needs": n} for r, n in self.no_data],
            "error_rules": list(self.errors),
            "in_progress": self.in_progress,
            "line": self.line(),
        }


def step_counts(trial: Any) -> dict[str, int]:
    """Steps per mode of a Trial: ``{"TRAIN": 300, "EVAL": 3}``.

    Modes without steps are left out; GLOBAL steps (no mode set) are counted only when no other mode has steps.

    Args:
        trial: a :class:`trainspect.store.trial.Trial` (or anything with ``steps(mode=...)``).
    """
    from trainspect.modes import ModeKeys

    out: dict[str, int] = {}
    for name in STEP_MODES:
        try:
            n = len(trial.steps(mode=ModeKeys[name]))
        except Exception:  # noqa: BLE001 - a damaged trial only loses this count
            n = 0
        if n:
            out[name] = n
    if not out:
        n = len(trial.steps(mode=ModeKeys.GLOBAL)) if hasattr(trial, "steps") else 0
        out.update({"GLOBAL": n} if n else {})
    return out


def steps_text(counts: Mapping[str, int]) -> str:
    """``"300 TRAIN, 3 EVAL steps"`` ("no steps" when empty).

    Example:
        >>> steps_text({"TRAIN": 300, "EVAL": 3}), steps_text({})
        ('300 TRAIN, 3 EVAL steps', 'no steps')
    """
    if not counts:
        return "no steps"
    return ", ".join(f"{n:,} {mode}" for mode, n in counts.items()) + " steps"
