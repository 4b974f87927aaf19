"""Built-in sections on rules and tensors: rules summary, one section per triggered rule, the tensor side."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page, Section
from trainspect.rules.counts import steps_text
from trainspect.rules.verdict import Verdict

__all__ = ["RulesSummarySection", "TriggeredRulesSection", "TensorSection", "MAX_LOSS_POINTS"]

MAX_LOSS_POINTS = 2000
MIN_POINTS = 3
"""Fewer values than this are listed in words instead of drawn on empty-looking axes."""
_HIDDEN = {"OverallSystemUsage", "OverallFrameworkMetrics"}


def param_text(value: Any) -> str:
    """A parameter value as users write it in JSON/YAML configs: ``false``, ``null``, ``1e-07``, ``[...]``."""
    if isinstance(value, (bool, type(None), list, tuple, dict)):
        return json.dumps(value, default=str)
    return str(value)


def _params(v: Verdict) -> str:
    return ", ".join(f"{k}={param_text(val)}" for k, val in v.parameters.items())


def _triggered(v: Verdict) -> bool:
    return v.triggers > 0 or v.issues_found


class RulesSummarySection(Section):
    """All rules, sorted by triggers, with parameters and recommendations (SageMaker report part 5)."""

    id = "rules-summary"
    order = 110
    title = "Rules summary"
    requires = ("verdicts",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the lead sentence and the summary table."""
        verdicts = sorted((v for v in ctx.verdicts if v.rule not in _HIDDEN), key=lambda v: (-v.triggers, v.rule))
        top = verdicts[0] if verdicts else None
        if top is not None and _triggered(top):
            page.p(
                f"The rule that triggered most is {top.rule}: {top.triggers} times over {top.datapoints} "
                f"datapoints. {top.recommendation}"
            )
        elif verdicts:
            page.p("No rule found issues.")
        rows = [
            [
                v.rule,
                v.kind,
                str(v.status),
                v.triggers,
                v.datapoints,
                v.message,
                v.recommendation if _triggered(v) else "",
                _params(v),
                _evaluated(v),
            ]
            for v in verdicts
        ]
        page.table(
            [
                "rule",
                "kind",
                "status",
                "triggers",
                "datapoints",
                "finding",
                "recommendation",
                "parameters",
                "evaluated",
            ],
            rows,
        )
        page.p(
            "Each rule's latest verdict from the run's record (rules/verdicts.json): live by the hook, offline by "
            "`trainspect rules`, or by this report; `trainspect rules DIR` and the TensorBoard Rules tab show the "
            "same set."
        )


class TriggeredRulesSection(Section):
    """One part per rule that triggered: its message, recommendation, what it saw and its chart."""

    id = "triggered-rules"
    order = 20
    title = "Rules that found issues"
    requires = ("verdicts", "triggered")

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add one sub-section per triggered rule."""
        for v in sorted((v for v in ctx.verdicts if _triggered(v)), key=lambda v: (-v.triggers, v.rule)):
            page.h3(v.rule)
            page.p(v.message)
            if v.recommendation:
                page.note(f"Recommendation: {v.recommendation}", warn=True)
            page.kv(_where(v))
            for s in v.series:
                x_type = "time" if s.x_unit in ("s", "time", "epoch_s", "second") else "value"
                if len(s.x) < MIN_POINTS:
                    page.note(
                        f"{s.label}: only {len(s.x)} value(s) recorded, too few to chart: "
                        + ", ".join(f"{x:g} → {y:.4g}" for x, y in zip(s.x, s.y, strict=False))
                    )
                    continue
                opt = charts.line_chart(
                    {s.label: (np.asarray(s.x, float), np.asarray(s.y, float))},
                    f"{v.rule}: {s.label}",
                    x_type=x_type,
                    mark_x=s.trigger_x,
                    threshold=s.threshold,
                    y_name=s.label,
                )
                page.chart(opt, height=280)


def _when(t: float | None) -> str | None:
    return None if t is None else dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%H:%M:%S UTC")


def _where(v: Verdict) -> list[tuple[str, Any]]:
    rows: list[tuple[str, Any]] = [("Triggers", v.triggers), ("Datapoints", v.datapoints)]
    if v.first_trigger_step is not None:
        mode = f" ({v.mode})" if v.mode else ""
        rows.append(("Global steps", f"{v.first_trigger_step} … {v.last_trigger_step}{mode}"))
    if v.first_trigger_time is not None:
        rows.append(("Time", f"{_when(v.first_trigger_time)} … {_when(v.last_trigger_time)}"))
    if v.tensors:
        shown = ", ".join(v.tensors[:20]) + (f" and {len(v.tensors) - 20} more" if len(v.tensors) > 20 else "")
        rows.append(("Tensors", shown))
    if v.workers:
        rows.append(("Workers", ", ".join(v.workers)))
    rows.append(("Parameters", _params(v)))
    rows.append(("Evaluated", _evaluated(v)))
    return rows


def _evaluated(v: Verdict) -> str:
    """Who evaluated the verdict and when: ``live 12:03:04 UTC``, ``offline …``, ``report …``."""
    return " ".join(x for x in (v.source, _when(v.evaluated_at)) if x) or "–"


def _loss_curve(tensor: Any, mode: ModeKeys) -> tuple[np.ndarray, np.ndarray]:
    steps = tensor.steps(mode)
    if len(steps) > MAX_LOSS_POINTS:
        steps = [steps[i] for i in np.linspace(0, len(steps) - 1, MAX_LOSS_POINTS).round().astype(int)]
    ys = []
    for s in steps:
        try:
            ys.append(float(np.asarray(tensor.value(s, mode)).reshape(-1)[0]))
        except Exception:
            ys.append(float("nan"))
    return np.asarray(steps, dtype=float), np.asarray(ys, dtype=float)


def _span(first: int | None, last: int | None) -> str | None:
    return None if first is None else f"{first}\u00a0…\u00a0{last}"  # never wrapped inside


class TensorSection(Section):
    """The tensor side: loss curves per mode and tensor-rule verdicts with the steps and tensors involved."""

    id = "tensors"
    order = 30
    title = "Tensors and losses"
    requires = ("tensors",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the loss curves and the tensor-rule table."""
        trial = ctx.trial
        losses = trial.tensor_names(collection="losses")
        page.p(
            f"{len(trial.tensor_names())} tensors saved over {steps_text(ctx.step_counts())} by "
            f"{len(trial.workers())} worker(s)."
        )
        if not losses:
            page.note("No loss was saved: register the loss (hook.register_loss(loss_fn)) to see its curve.")
        for mode in trial.modes():
            series = {name: _loss_curve(trial.tensor(name), mode) for name in losses[:8]}
            series = {k: v for k, v in series.items() if len(v[0])}
            for name, (x, y) in series.items():
                bad = x[~np.isfinite(y)]
                if len(bad):
                    page.note(
                        f"{name} ({mode.name}) is NaN/Inf at {len(bad)} of {len(x)} saved steps, first at step "
                        f"{bad[0]:.0f}" + (" (every saved step)." if len(bad) == len(x) else "."),
                        warn=True,
                    )
            if series:
                page.chart(charts.line_chart(series, f"Loss ({mode.name})", x_type="value", y_name="loss"), 280)
        tensor_verdicts = [v for v in ctx.verdicts if v.kind == "tensor"]
        if tensor_verdicts:
            rows = [
                [
                    v.rule,
                    str(v.status),
                    v.triggers,
                    _span(v.first_trigger_step, v.last_trigger_step),
                    ", ".join(v.tensors[:10]),
                    v.message,
                ]
                for v in tensor_verdicts
            ]
            page.table(["rule", "status", "triggers", "steps", "tensors", "finding"], rows)
