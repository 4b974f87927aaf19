"""Before/after comparison of two runs (run directories or MLflow run ids): a terminal table and an HTML page.

Runs rarely do the same amount of work, so the rows that decide are per unit of work: throughput, time and cost
per 1,000 steps (and per epoch where the steps per epoch are known), and the projected saving is for the same
amount of work. Totals (duration, steps, cost) are shown for reference and never coloured as wins.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.render import _echarts, _environment, _finite, script_json
from trainspect.report.summary import RunSummary, summarize

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")

__all__ = ["summary_for", "compare_runs", "compare_table", "render_compare", "saving_percent", "time_saving_percent",
           "is_mlflow_run_id"]  # fmt: skip


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
    for key in ("batch_size", "steps_per_epoch"):
        value = str(run.data.params.get(key, "")).strip()
        if value.isdigit() and int(value) > 0 and getattr(out, key) is None:
            setattr(out, key, int(value))
    return out


def _ratio_saving(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before <= 0:
        return None
    return 100.0 * (before - after) / before


def saving_percent(before: RunSummary, after: RunSummary) -> float | None:
    """How much less ``after`` would cost than ``before`` for the same work, in percent (negative: more).

    Compares the cost per 1,000 steps; when neither run knows its steps, the runs' total costs.

    Example:
        >>> a = RunSummary("a", duration_s=503, instances=3, price_per_hour=14.688)
        >>> b = RunSummary("b", duration_s=502, instances=2, price_per_hour=3.825)
        >>> round(saving_percent(a, b))
        83
        >>> a = RunSummary("a", duration_s=100, steps=1000, price_per_hour=1.0)
        >>> b = RunSummary("b", duration_s=60, steps=2000, price_per_hour=1.0)  # twice the work in 60 % of the time
        >>> round(saving_percent(a, b))
        70
    """
    if not before.steps and not after.steps:
        return _ratio_saving(before.cost, after.cost)
    return _ratio_saving(before.cost_per_1k_steps, after.cost_per_1k_steps)


def time_saving_percent(before: RunSummary, after: RunSummary) -> float | None:
    """How much less time ``after`` would take than ``before`` for the same work (per 1,000 steps), in percent."""
    return _ratio_saving(before.time_per_1k_steps_s, after.time_per_1k_steps_s)


def _cpu_direction(a: RunSummary, b: RunSummary) -> str:
    """Busier CPUs win only on CPU-only runs; with GPUs the CPU is not the work (neither wins)."""
    return "" if a.gpu_p95 is not None or b.gpu_p95 is not None else "high"


@dataclass(frozen=True)
class _Row:
    key: str
    label: str
    better: str | Callable[[RunSummary, RunSummary], str]  # "low", "high" or "" (no winner: totals)
    digits: int = 4


_ROWS: tuple[_Row, ...] = (
    _Row("steps_per_s", "throughput (steps/s)", "high"),
    _Row("samples_per_s", "throughput (samples/s)", "high"),
    _Row("time_per_1k_steps_s", "time per 1,000 steps (s)", "low"),
    _Row("cost_per_1k_steps", "cost per 1,000 steps ($)", "low"),
    _Row("time_per_epoch_s", "time per epoch (s)", "low"),
    _Row("cost_per_epoch", "cost per epoch ($)", "low"),
    _Row("step_p50_s", "step time p50 (s)", "low"),
    _Row("step_p95_s", "step time p95 (s)", "low"),
    _Row("step_p99_s", "step time p99 (s)", "low"),
    _Row("dataloader_wait_percent", "data-loader wait (% of loop)", "low", 3),
    _Row("gpu_mean", "GPU utilisation mean (%)", "high", 3),
    _Row("gpu_p95", "GPU utilisation p95 (%)", "high", 3),
    _Row("cpu_mean", "CPU utilisation mean (%)", _cpu_direction, 3),
    _Row("cpu_p95", "CPU utilisation p95 (%)", _cpu_direction, 3),
    _Row("io_wait_p95", "I/O wait p95 (%)", "low", 3),
    _Row("memory_p95", "CPU memory p95 (%)", ""),
    _Row("steps", "steps done", ""),
    _Row("duration_s", "duration (s)", ""),
    _Row("instances", "instances (nodes)", ""),
    _Row("workers", "workers", ""),
    _Row("batch_size", "batch size (per worker)", ""),
    _Row("price_per_hour", "price per instance-hour ($)", "", 6),
    _Row("cost", "cost of the run ($)", ""),
)


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _winner(direction: str, va: Any, vb: Any) -> str | None:
    if not direction or not isinstance(va, (int, float)) or not isinstance(vb, (int, float)) or va == vb:
        return None
    return ("b" if vb < va else "a") if direction == "low" else ("b" if vb > va else "a")


def compare_runs(before: RunSummary, after: RunSummary) -> list[dict[str, Any]]:
    """Rows of the comparison (rows unknown for both runs are left out).

    Each row: ``label``, ``a``, ``b``, ``change`` (B vs A, text), ``winner`` (``"a"``, ``"b"`` or None when the
    row ranks nothing, e.g. totals of different amounts of work) and ``better`` (True when B wins, False when A
    wins, else None).
    """
    a, b = before.to_dict(), after.to_dict()
    rows = []
    for row in _ROWS:
        va, vb = a.get(row.key), b.get(row.key)
        if va is None and vb is None:
            continue
        direction = row.better(before, after) if callable(row.better) else row.better
        change = f"{100.0 * (vb - va) / abs(va):+.1f}%" if isinstance(va, (int, float)) and isinstance(
            vb, (int, float)) and va else ""  # fmt: skip
        rows.append(_row(row.label, _fmt(va, row.digits), _fmt(vb, row.digits), change, _winner(direction, va, vb)))
    rows.append(_row("rules triggered", ", ".join(before.rules_triggered) or "none",
                     ", ".join(after.rules_triggered) or "none", "", None))  # fmt: skip
    rows.append(_saving_row(before, after))
    return rows


def _row(label: str, a: str, b: str, change: str, winner: str | None) -> dict[str, Any]:
    better = None if winner is None else winner == "b"
    return {"label": label, "a": a, "b": b, "change": change, "winner": winner, "better": better}


def _saving_row(before: RunSummary, after: RunSummary) -> dict[str, Any]:
    """The projected saving for the same work: cost per 1,000 steps, else time per 1,000 steps, else whole runs."""
    per_work = bool(before.steps or after.steps)
    saving, what = saving_percent(before, after), "cost"
    if saving is None and per_work:
        saving, what = time_saving_percent(before, after), "time"
    label = f"projected {what} saving for the same work" if per_work else "saving (whole runs)"
    winner = None if not saving else ("b" if saving > 0 else "a")
    return _row(label, "", "–" if saving is None else f"{saving:.0f}%", "", winner)


def compare_table(before: RunSummary, after: RunSummary) -> str:
    """The comparison as a plain-text table for the terminal; ``*`` marks the winner of each row."""
    rows = compare_runs(before, after)
    head = ("", f"A: {before.name}", f"B: {after.name}", "B vs A")
    body = [(r["label"], r["a"] + (" *" if r["winner"] == "a" else ""), r["b"] + (" *" if r["winner"] == "b" else ""),
             r["change"]) for r in rows]  # fmt: skip
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(4)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("* the better run of the row (per unit of work; totals of different amounts of work rank nothing)")
    return "\n".join(lines)


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


def render_compare(before: RunSummary, after: RunSummary) -> str:
    """The comparison as a self-contained HTML page (side by side, winners coloured, with charts)."""
    chart_data = _charts(before, after)
    return (
        _environment()
        .get_template("compare.html.j2")
        .render(
            a=before,
            b=after,
            rows=compare_runs(before, after),
            generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            charts_json=script_json(_finite(chart_data)),
            echarts_js=_echarts(),
            chart_ids=list(chart_data),
        )
    )
