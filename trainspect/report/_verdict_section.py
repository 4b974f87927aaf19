"""The report's first section: is the run OK, and if not, what went wrong, where, and what to do."""

from __future__ import annotations

import datetime as dt
from typing import Any

from trainspect.profiler.analysis import job_statistics
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page, Section
from trainspect.rules.counts import RuleCounts, steps_text
from trainspect.rules.verdict import Status, Verdict
from trainspect.store.job_events import stop_text

__all__ = ["VerdictSection", "triggered_first", "involved", "first_seen"]

_HIDDEN = {"OverallSystemUsage", "OverallFrameworkMetrics"}
_MAX_TENSORS = 3


def _triggered(v: Verdict) -> bool:
    return v.triggers > 0 or v.issues_found


def triggered_first(verdicts: list[Verdict]) -> list[Verdict]:
    """The verdicts with issues, earliest first trigger first (then most triggers)."""
    hits = [v for v in verdicts if _triggered(v) and v.rule not in _HIDDEN]

    def key(v: Verdict) -> tuple[float, float, int, str]:
        step = float("inf") if v.first_trigger_step is None else float(v.first_trigger_step)
        when = float("inf") if v.first_trigger_time is None else float(v.first_trigger_time)
        return step, when, -v.triggers, v.rule

    return sorted(hits, key=key)


def first_seen(v: Verdict) -> str:
    """Where a rule first found an issue: ``step 52 (TRAIN)``, or a time for profiler rules."""
    if v.first_trigger_step is not None:
        return f"step {v.first_trigger_step}" + (f" ({v.mode})" if v.mode else "")
    if v.first_trigger_time is not None:
        return dt.datetime.fromtimestamp(v.first_trigger_time, tz=dt.timezone.utc).strftime("%H:%M:%S UTC")
    return "–"


def involved(v: Verdict) -> str:
    """The tensors or the resource a verdict is about, shortened."""
    if v.tensors:
        more = len(v.tensors) - _MAX_TENSORS
        return ", ".join(v.tensors[:_MAX_TENSORS]) + (f" and {more} more" if more > 0 else "")
    if v.workers:
        return ", ".join(v.workers[:_MAX_TENSORS])
    return "system / framework metrics" if v.kind == "profiler" else "–"


class VerdictSection(Section):
    """Verdict first: how the job ended, the rules with issues (first step, tensors, recommendation), the job's line.

    The badge prints :meth:`RuleCounts.line` of every current verdict (the CLI and TensorBoard print the same);
    OverallSystemUsage and OverallFrameworkMetrics are counted there but kept out of the issues table.
    """

    id = "verdict"
    order = 0
    title = "Verdict"

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the job's ending (stops, an early failure), the count badge, the issues table and the job line."""
        _ending(ctx, page)
        counts = RuleCounts.of(ctx.verdicts)
        hits = triggered_first(ctx.verdicts)
        if counts.issues or hits:
            page.verdict(f"Issues found. {counts.line()}", ok=False)
            rows = [[v.rule, first_seen(v), v.triggers, involved(v), v.message, v.recommendation] for v in hits]
            if rows:
                page.table(
                    ["rule", "first seen", "triggers", "tensors / resource", "finding", "recommendation"],
                    rows,
                    css="verdict-table",
                )
        elif counts.total:
            page.verdict(f"No issues. {counts.line()}", ok=True)
        else:
            page.verdict("No rule was evaluated", ok=None)
            if ctx.failed_early() is None:
                page.note("Pass rules='default' to the hook, or run `trainspect rules RUN_DIR`, to check this run.")
        errors = [v for v in ctx.verdicts if v.status is Status.ERROR]
        if errors:
            page.note(
                "Rules that failed to evaluate: " + ", ".join(f"{v.rule} ({v.message})" for v in errors), warn=True
            )
        for note in ctx.notes:
            page.note(note)
        page.kv(_job_line(ctx))


def _ending(ctx: ReportContext, page: Page) -> None:
    """The StopTraining stops (one line per rule and step, with the workers) and a failure before the first step."""
    failed = ctx.failed_early()
    if failed:
        page.verdict(failed[0].upper() + failed[1:], ok=False)
    seen: dict[str, list[str]] = {}
    for stop in ctx.stops:
        seen.setdefault(stop_text(stop), []).append(str(stop.get("worker") or ""))
    for text, workers in seen.items():
        named = [w for w in workers if w]
        page.note(f"The training was {text}" + (f" on {', '.join(named)}" if named else "") + ".", warn=True)


def _job_duration(ctx: ReportContext) -> float | None:
    if not ctx.profiler.system and not ctx.profiler.framework:
        return None
    try:
        duration = job_statistics(ctx.profiler).get("duration_s")
    except Exception:  # noqa: BLE001 - damaged profiler data only loses this figure
        return None
    return None if duration is None else float(duration)


def _job_line(ctx: ReportContext) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = []
    prof = ctx.profiler
    duration = _job_duration(ctx)
    if duration is not None:
        rows.append(("Job duration", _duration(float(duration))))
    steps = ctx.step_counts()
    if steps:
        rows.append(("Steps", steps_text(steps)))
    elif ctx.failed_early():
        rows.append(("Steps", "none recorded"))
    if prof.system:
        gpus = sum(len(a.gpus) for a in prof.system.values())
        rows.append(("Hardware", f"{len(prof.system)} node(s), {gpus} GPU(s)"))
    if not prof.job_ended and (prof.system or prof.framework):
        rows.append(("State", "running or ended without an end marker"))
    return rows


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"
