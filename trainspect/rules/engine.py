"""Offline evaluation: every rule over a trial's whole step range, one verdict per rule.

Unlike SageMaker, which stops a rule at its first trigger, the engine evaluates the whole range and counts
every triggering step. The inputs of all tensor rules are fetched once per tensor and worker (see
:mod:`~trainspect.rules.tensor_pass`); in a run with several workers every tensor rule judges every worker, and
its verdict names the worker of the first trigger. Profiler rules get ``trainspect.profiler.load_profiler_data``
once. While the run is not over (no end marker, recent data, no ``final=True``), verdicts that found no issues
say ``InProgress``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from trainspect.rules.actions import finish_webhooks
from trainspect.rules.base import Rule
from trainspect.rules.record import record_verdicts, stamp
from trainspect.rules.step_data import StepData
from trainspect.rules.tally import Tally
from trainspect.rules.tensor_pass import evaluate_tensor_rules, with_mode
from trainspect.rules.tensor_rule import TensorRule
from trainspect.rules.trial_feed import note_damage, trial_problems
from trainspect.rules.trial_view import TrialLike, TrialView, open_trial
from trainspect.rules.verdict import Status, Verdict, read_verdicts
from trainspect.store.layout import RunLayout
from trainspect.store.nan_origins import read_origins

__all__ = [
    "evaluate",
    "load_verdicts",
    "recorded_besides",
    "run_finished",
    "fire_actions",
    "open_trial",
    "evaluate_tensor_rules",
    "with_mode",
]

_log = logging.getLogger(__name__)


def run_finished(trial: TrialView, final: bool = False, stale_after_s: float | None = None) -> bool:
    """Whether the run is over: ``final``, every step loaded, the end marker, or old data.

    Without an end marker, a run whose newest data is older than ``stale_after_s`` is over (see
    :func:`trainspect.profiler.ending.run_over`).
    """
    if final or getattr(trial, "loaded_all_steps", False):
        return True
    path = getattr(trial, "path", None)
    if path is None:
        return False
    from trainspect.profiler.ending import run_over

    return RunLayout(path).end_marker.exists() or run_over(path, stale_after_s=stale_after_s)


OFFLINE_WEBHOOK_BUDGET_S = 10.0
"""Seconds that :func:`evaluate` waits, for all the webhooks it fired together, before returning."""


def evaluate(
    trial: TrialLike,
    rules: Sequence[Rule],
    start_step: int | None = None,
    end_step: int | None = None,
    *,
    write: bool = True,
    actions: bool = True,
    final: bool = False,
    stale_after_s: float | None = None,
) -> list[Verdict]:
    """Evaluate rules over a trial and return one verdict per rule, in the order given.

    Args:
        trial: a Trial (``trainspect.create_trial``) or a run directory.
        rules: the rules.
        start_step: first global step evaluated (None: the first saved).
        end_step: global step where evaluation stops, exclusive (None: the last saved).
        write: add this evaluation to the run's verdict record (``RunLayout(run).verdicts``); what was recorded
            before (the hook's live verdicts, earlier evaluations) stays in the record's history.
        actions: run the actions of rules that found issues (log, callback, webhook); the webhooks' POSTs are
            awaited, :data:`OFFLINE_WEBHOOK_BUDGET_S` at most in all, and one warning names each not delivered.
        final: the job is over (verdicts are final even without an end marker; ``trainspect rules --final``).
        stale_after_s: a directory without an end marker whose newest data is older than this many seconds is
            over (``None``: ``trainspect.profiler.ending.STALE_AFTER_S``, one hour).

    Returns:
        The verdicts, marked ``source="offline"`` with their evaluation time. A rule that raised ends as
        ``Error``; the others go on.
    """
    trial = open_trial(trial)
    try:
        trial.refresh()
    except Exception:
        _log.debug("trial.refresh() failed", exc_info=True)
    finished = run_finished(trial, final, stale_after_s)
    tensor_rules = [r for r in rules if isinstance(r, TensorRule)]
    results: dict[int, Verdict] = {}
    if tensor_rules:
        for t_rule, verdict in zip(
            tensor_rules, evaluate_tensor_rules(trial, tensor_rules, start_step, end_step, finished), strict=True
        ):
            results[id(t_rule)] = note_damage(verdict, trial_problems(trial))
    loaded: dict[str, Any] = {}  # the profiler data, loaded once for every profiler rule
    for rule in rules:
        if id(rule) not in results:
            results[id(rule)] = _evaluate_other(rule, trial, finished, loaded)
    verdicts = stamp(_note_missing_workers(trial, [results[id(r)] for r in rules]), "offline")
    run_dir = getattr(trial, "path", None)
    origins = read_origins(run_dir) if run_dir is not None else []
    verdicts = [rule.explain(v, origins) for rule, v in zip(rules, verdicts, strict=True)]
    if actions:
        fire_actions(rules, verdicts)
    path = getattr(trial, "path", None)
    if write and path is not None:
        _write(path, verdicts, finished)
    if actions:  # a webhook posts from a daemon thread: deliver (or report) it before a script's exit drops it
        finish_webhooks((a for r in rules for a in r.actions), OFFLINE_WEBHOOK_BUDGET_S, "before evaluate returned")
    return verdicts


def _note_missing_workers(trial: TrialView, verdicts: list[Verdict]) -> list[Verdict]:
    """Say in every verdict which workers never wrote some steps (a rank that died or lags).

    Those steps are left out of the evaluation rather than judged on partial data.
    """
    incomplete = getattr(trial, "incomplete_steps", None)
    missing = incomplete() if callable(incomplete) else {}
    if not missing:
        return verdicts
    per_worker: dict[str, list[int]] = {}
    for step, workers in missing.items():
        for worker in workers:
            per_worker.setdefault(worker, []).append(step)
    note = "; ".join(f"{w} did not write {len(s)} step(s) ({min(s)}-{max(s)})" for w, s in sorted(per_worker.items()))
    out = []
    for v in verdicts:
        details = {**v.details, "missing_workers": {w: len(s) for w, s in per_worker.items()}}
        out.append(
            replace(v, message=f"{v.message} [incomplete: {note}; those steps were not evaluated]", details=details)
        )
    return out


def _evaluate_other(rule: Rule, trial: TrialView, finished: bool, loaded: dict[str, Any]) -> Verdict:
    try:
        if rule.kind == "profiler":
            if "profiler" not in loaded:
                loaded["profiler"] = _profiler_data(trial, finished)
            data = loaded["profiler"]
        else:
            data = trial
        verdict = rule.evaluate(data)
    except Exception as exc:
        return Verdict(rule=rule.name, status=Status.ERROR, kind=rule.kind, message=f"{type(exc).__name__}: {exc}")
    verdict = note_damage(verdict, getattr(data, "problems", []) if rule.kind == "profiler" else trial_problems(trial))
    if not finished and verdict.status is Status.NO_ISSUES_FOUND:
        verdict = verdict.with_status(Status.IN_PROGRESS)
    return verdict


def _profiler_data(trial: TrialView, finished: bool = False) -> Any:
    from trainspect.profiler import load_profiler_data  # type: ignore[attr-defined]

    where: Any = getattr(trial, "path", trial)
    data = load_profiler_data(where)
    if finished and getattr(data, "job_ended", True) is False:  # over by --final or by old data
        data = replace(data, job_ended=True)
    return data


def evaluate_steps(rule: TensorRule, steps: Sequence[StepData], finished: bool = True) -> Verdict:
    """Evaluate one tensor rule over StepData values (pure; used by tests and custom tooling)."""
    tally = Tally(rule)
    for step in steps:
        tally.feed(step)
    if finished:
        tally.end()
    return tally.verdict(finished)


def fire_actions(rules: Sequence[Rule], verdicts: Sequence[Verdict]) -> None:
    """Run the actions of each rule whose verdict found issues (StopTraining is a no-op offline)."""
    for rule, verdict in zip(rules, verdicts, strict=True):
        if verdict.status is Status.ISSUES_FOUND:
            for action in rule.actions:
                action.fire(verdict)


def _write(path: Any, verdicts: list[Verdict], finished: bool) -> None:
    record_verdicts(path, verdicts, "offline", finished)


def load_verdicts(run_dir: str | os.PathLike[str]) -> list[Verdict]:
    """Read the current verdicts of a run: each rule's latest, live or offline (empty when there are none)."""
    path = Path(run_dir)
    if path.is_file():
        return read_verdicts(path)
    return read_verdicts(RunLayout(path).verdicts)


def recorded_besides(run_dir: str | os.PathLike[str], verdicts: Sequence[Verdict]) -> list[Verdict]:
    """The run's current verdicts of rules not among ``verdicts`` (e.g. live verdicts of rules not run offline).

    Together with ``verdicts`` they are the set the report, the TensorBoard Rules tab and MLflow show.
    """
    done = {v.rule for v in verdicts}
    try:
        return [v for v in load_verdicts(run_dir) if v.rule not in done]
    except (OSError, ValueError) as exc:
        _log.warning("rules: could not read the verdict record of %s: %s", run_dir, exc)
        return []
