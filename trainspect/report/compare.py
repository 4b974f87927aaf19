"""Before/after comparison of two runs (run directories or MLflow run ids): a terminal table and an HTML page.

Runs rarely do the same amount of work, so the rows that decide are per unit of work: throughput, time and cost
per 1,000 steps (and per epoch where the steps per epoch are known), all from the training loop (start-up is its
own row), and the projected saving is for the same amount of work, from the same figures. Totals (duration, steps,
cost) are shown for reference and never coloured as wins.

A run that diverged or was stopped is ranked in no row, a run whose rules found issues (that the other's did not)
is never ranked better, and the first line says why the runs are unlike; throughput differences inside the noise
of the step cycles rank nothing ("within noise"). See :mod:`trainspect.report._compare_rows`.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from trainspect._json_safe import json_safe
from trainspect.report import _compare_rows as rows_
from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.render import _echarts, _environment, script_json
from trainspect.report.summary import REPORT_ARTIFACT, RunSummary, summarize

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")

__all__ = [
    "summary_for",
    "compare_runs",
    "compare_note",
    "compare_table",
    "render_compare",
    "saving_percent",
    "time_saving_percent",
    "is_mlflow_run_id",
]


def is_mlflow_run_id(run: str | os.PathLike[str]) -> bool:
    """Whether ``run`` names no directory and looks like an MLflow run id (32 hex digits)."""
    return not Path(run).is_dir() and bool(_RUN_ID.match(str(run)))


def summary_for(
    run: str | os.PathLike[str],
    price_per_hour: float | None = None,
    batch_size: int | None = None,
    steps_per_epoch: int | None = None,
) -> RunSummary:
    """Summarise a run directory, or an MLflow run id (its ``trainspect/*`` summary metrics, named by its run name).

    Args:
        run: a run directory or an MLflow run id.
        price_per_hour: the instance's hourly price (cost rows).
        batch_size: samples per step and worker (samples/s); an MLflow run's ``batch_size`` param otherwise.
        steps_per_epoch: training steps per epoch (the per-epoch rows); MLflow's ``steps_per_epoch`` param otherwise.

    Raises:
        FileNotFoundError: ``run`` is neither a directory nor an MLflow run that can be read.
    """
    path = Path(run)
    if path.is_dir():
        out = summarize(ReportContext.load(path, price_per_hour=price_per_hour), name=path.resolve().name)
    else:
        out = _mlflow_summary(str(run))
    if price_per_hour is not None:
        out.price_per_hour = price_per_hour
    out.batch_size = batch_size or out.batch_size
    out.steps_per_epoch = steps_per_epoch or out.steps_per_epoch
    return out


def _mlflow_summary(run_id: str) -> RunSummary:
    if not _RUN_ID.match(run_id):
        raise FileNotFoundError(f"{run_id} is neither a run directory nor an MLflow run id (32 hex digits)")
    try:
        from mlflow.tracking import MlflowClient

        run = MlflowClient().get_run(run_id)
    except Exception as exc:
        raise FileNotFoundError(f"{run_id} is neither a run directory nor a readable MLflow run id ({exc})") from None
    out = RunSummary.from_metrics(run.info.run_name or run_id, dict(run.data.metrics))
    out.report = f"MLflow artifact {REPORT_ARTIFACT}"
    diverged = str(run.data.tags.get("trainspect.diverged", "")).split(" (first", 1)[0]
    out.diverged = diverged or out.diverged
    for key in ("batch_size", "steps_per_epoch"):
        value = str(run.data.params.get(key, "")).strip()
        if value.isdigit() and int(value) > 0 and getattr(out, key) is None:
            setattr(out, key, int(value))
    return out


def saving_percent(before: RunSummary, after: RunSummary) -> float | None:
    """How much less ``after`` would cost than ``before`` for the same work, in percent (negative: more).

    Compares the cost per 1,000 steps (training-loop time); when neither run knows its steps, the runs' total
    costs. A change of price alone (SageMaker's example) saves the same on both.

    Example:
        >>> a = RunSummary("a", duration_s=503, instances=3, price_per_hour=14.688)
        >>> b = RunSummary("b", duration_s=502, instances=2, price_per_hour=3.825)
        >>> round(saving_percent(a, b))
        83
        >>> a = RunSummary("a", duration_s=503, loop_s=497, steps=100, instances=3, price_per_hour=14.688)
        >>> b = RunSummary("b", duration_s=502, loop_s=496, steps=100, instances=2, price_per_hour=3.825)
        >>> round(saving_percent(a, b))
        83
        >>> a = RunSummary("a", duration_s=100, steps=1000, price_per_hour=1.0)
        >>> b = RunSummary("b", duration_s=60, steps=2000, price_per_hour=1.0)  # twice the work in 60 % of the time
        >>> round(saving_percent(a, b))
        70
    """
    if not before.steps and not after.steps:
        return rows_.ratio_saving(before.cost, after.cost)
    return rows_.ratio_saving(before.cost_per_1k_steps, after.cost_per_1k_steps)


def time_saving_percent(before: RunSummary, after: RunSummary) -> float | None:
    """How much less training-loop time ``after`` would take than ``before`` per 1,000 steps, in percent.

    It is ``1 - A's throughput / B's``: the throughput row and the saving never disagree.

    Example:
        >>> a, b = RunSummary("a", loop_s=100.0, steps=1000), RunSummary("b", loop_s=80.0, steps=1000)
        >>> round(time_saving_percent(a, b), 6), round(100 * (1 - a.steps_per_s / b.steps_per_s), 6)
        (20.0, 20.0)
    """
    return rows_.ratio_saving(before.time_per_1k_steps_s, after.time_per_1k_steps_s)


def compare_note(before: RunSummary, after: RunSummary) -> str:
    r"""The unlike-runs sentence that heads the table and the page ("" when the runs are alike).

    Example:
        >>> a = RunSummary("a", steps=53, diverged="loss NaN from step 52",
        ...                stops=("stopped by StopTraining at step 52 (rule ExplodingTensor)",))
        >>> print(compare_note(a, RunSummary("b", steps=53)).replace(": ", ":\n"))
        unlike runs:
        A diverged (loss NaN from step 52) and was stopped by StopTraining at step 52 (rule ExplodingTensor):
        its speed figures are not a fair comparison; no row ranks the runs
    """
    return rows_.fairness(before, after).note


def compare_runs(before: RunSummary, after: RunSummary) -> list[dict[str, Any]]:
    """Rows of the comparison (rows unknown for both runs are left out).

    Each row: ``key``, ``label``, ``a``, ``b``, ``change`` (B vs A, text: a ratio beyond ±100 %, the 95 % interval
    of throughput-derived rows), ``winner`` (``"a"``, ``"b"`` or None when the row ranks nothing: totals, a
    difference within noise, a run that diverged, was stopped or whose rules found issues) and ``better`` (True
    when B wins, False when A wins, else None). First the verdicts and the reports, then the losses at matched
    steps, the figures, and the projected saving last.
    """
    fair = rows_.fairness(before, after)
    return [
        *rows_.health_rows(before, after),
        *rows_.loss_rows(before, after),
        *rows_.metric_rows(before, after, fair),
        rows_.saving_row(before, after, fair),
    ]


_FOOTNOTES = (
    "* the better run of the row; none where the difference is within noise (95% interval of the step cycles)",
    "per-unit rows (throughput, time and cost per 1,000 steps or per epoch, the saving) use the training loop "
    "(first step to last): time per 1,000 steps = 1,000 / steps/s; start-up is its own row; totals rank nothing",
    "a run that diverged or was stopped ranks in no row; a run whose rules found issues the other run's did not is "
    "never marked better",
)


def compare_table(before: RunSummary, after: RunSummary) -> str:
    """The comparison as a plain-text table for the terminal; ``*`` marks the winner of each row.

    The first line is the unlike-runs sentence when the runs are unlike (:func:`compare_note`).
    """
    rows = [r for r in compare_runs(before, after) if r["key"] != "rules"]  # the rule counts: below the table
    head = ("", f"A: {before.name}", f"B: {after.name}", "B vs A")
    body = [
        (
            r["label"],
            r["a"] + (" *" if r["winner"] == "a" else ""),
            r["b"] + (" *" if r["winner"] == "b" else ""),
            r["change"],
        )
        for r in rows
    ]
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(4)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += [f"rules of {who}: {s.rules_line}" for who, s in (("A", before), ("B", after)) if s.rules_line]
    note = compare_note(before, after)
    return "\n".join(([note] if note else []) + lines + list(_FOOTNOTES))


_UTIL = (("cpu_mean", "CPU mean %"), ("gpu_mean", "GPU mean %"), ("dataloader_wait_percent", "data-loader wait %"))


def _charts(before: RunSummary, after: RunSummary) -> dict[str, Any]:
    a, b = before.to_dict(), after.to_dict()
    util = [(k, label) for k, label in _UTIL if a.get(k) is not None or b.get(k) is not None]
    if not util:
        return {}
    series = {
        f"A: {before.name}": [a.get(k) or 0.0 for k, _ in util],
        f"B: {after.name}": [b.get(k) or 0.0 for k, _ in util],
    }
    return {"util": charts.bar_chart([label for _, label in util], series, "Utilisation", y_name="%")}


def _href(report: str, out: str | os.PathLike[str] | None) -> str:
    """A link to a report file: relative to the page when its path is known, else a file URI ("" for none)."""
    path = Path(report)
    if not report or not path.is_absolute() or not path.is_file():
        return ""
    if out is not None:
        try:
            return Path(os.path.relpath(path, Path(out).resolve().parent)).as_posix()
        except ValueError:  # another drive (Windows)
            pass
    return path.as_uri()


def render_compare(before: RunSummary, after: RunSummary, out: str | os.PathLike[str] | None = None) -> str:
    """The comparison as a self-contained HTML page (side by side, winners coloured, with charts).

    Args:
        before: run A.
        after: run B.
        out: where the page will be written: the links to the runs' reports are relative to it (file URIs else).
    """
    chart_data = _charts(before, after)
    return (
        _environment()
        .get_template("compare.html.j2")
        .render(
            a=before,
            b=after,
            rows=compare_runs(before, after),
            note=compare_note(before, after),
            href_a=_href(before.report, out),
            href_b=_href(after.report, out),
            generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            charts_json=script_json(json_safe(chart_data)),
            echarts_js=_echarts(),
            chart_ids=list(chart_data),
        )
    )
