"""Before/after comparison of two runs (run directories or MLflow run ids): a terminal table and an HTML page."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.render import _echarts, _environment, _finite, script_json
from trainspect.report.summary import RunSummary, summarize

_RUN_ID = re.compile(r"^[0-9a-f]{32}$")

__all__ = ["summary_for", "compare_runs", "compare_table", "render_compare", "saving_percent"]


def summary_for(run: str | os.PathLike[str], price_per_hour: float | None = None) -> RunSummary:
    """Summarise a run directory, or an MLflow run id (its ``trainspect/*`` summary metrics).

    Raises:
        FileNotFoundError: ``run`` is neither a directory nor an MLflow run that can be read.
    """
    path = Path(run)
    if path.is_dir():
        return summarize(ReportContext.load(path, price_per_hour=price_per_hour), name=path.name)
    if not _RUN_ID.match(str(run)):
        raise FileNotFoundError(f"{run!s} is neither a run directory nor an MLflow run id (32 hex digits)")
    try:
        from mlflow.tracking import MlflowClient

        data = MlflowClient().get_run(str(run)).data
    except Exception as exc:
        raise FileNotFoundError(f"{run!s} is neither a run directory nor a readable MLflow run id ({exc})") from None
    out = RunSummary.from_metrics(str(run), dict(data.metrics))
    if price_per_hour is not None:
        out.price_per_hour = price_per_hour
    return out


def saving_percent(before: RunSummary, after: RunSummary) -> float | None:
    """How much cheaper ``after`` is than ``before``, in percent (negative: more expensive).

    Example:
        >>> a = RunSummary("a", duration_s=503, instances=3, price_per_hour=14.688)
        >>> b = RunSummary("b", duration_s=502, instances=2, price_per_hour=3.825)
        >>> round(saving_percent(a, b))
        83
    """
    if before.cost is None or after.cost is None or before.cost <= 0:
        return None
    return 100.0 * (before.cost - after.cost) / before.cost


_ROWS: tuple[tuple[str, str, str], ...] = (
    ("duration_s", "duration (s)", "low"),
    ("instances", "instances (nodes)", ""),
    ("workers", "workers", ""),
    ("steps", "steps", ""),
    ("step_p50_s", "step time p50 (s)", "low"),
    ("step_p95_s", "step time p95 (s)", "low"),
    ("cpu_p95", "CPU utilisation p95 (%)", "high"),
    ("gpu_p95", "GPU utilisation p95 (%)", "high"),
    ("memory_p95", "CPU memory p95 (%)", ""),
    ("io_wait_p95", "I/O wait p95 (%)", "low"),
    ("price_per_hour", "price per instance-hour ($)", ""),
    ("cost", "cost ($)", "low"),
)


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.4g}" if abs(v) < 1000 else f"{v:,.0f}"
    return str(v)


def compare_runs(before: RunSummary, after: RunSummary) -> list[dict[str, Any]]:
    """Rows of the comparison: ``label``, ``a``, ``b``, ``change`` (text) and ``better`` (True/False/None)."""
    a, b = before.to_dict(), after.to_dict()
    rows = []
    for key, label, good in _ROWS:
        va, vb = a.get(key), b.get(key)
        change, better = "", None
        if isinstance(va, (int, float)) and isinstance(vb, (int, float)) and va:
            change = f"{100.0 * (vb - va) / abs(va):+.1f}%"
            if good and vb != va:
                better = (vb < va) if good == "low" else (vb > va)
        rows.append({"label": label, "a": _fmt(va), "b": _fmt(vb), "change": change, "better": better})
    rows.append({"label": "rules triggered", "a": ", ".join(before.rules_triggered) or "none",
                 "b": ", ".join(after.rules_triggered) or "none", "change": "", "better": None})  # fmt: skip
    saving = saving_percent(before, after)
    rows.append({"label": "saving", "a": "", "b": "–" if saving is None else f"{saving:.0f}%",
                 "change": "", "better": None if saving is None else saving > 0})  # fmt: skip
    return rows


def compare_table(before: RunSummary, after: RunSummary) -> str:
    """The comparison as a plain-text table for the terminal."""
    rows = compare_runs(before, after)
    head = ("", f"A: {before.name}", f"B: {after.name}", "B vs A")
    body = [(r["label"], r["a"], r["b"], r["change"]) for r in rows]
    widths = [max(len(str(x[i])) for x in (head, *body)) for i in range(4)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() for row in (head, *body)]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def render_compare(before: RunSummary, after: RunSummary) -> str:
    """The comparison as a self-contained HTML page (side by side, with a utilisation chart)."""
    keys = [("cpu_p95", "CPU p95 %"), ("gpu_p95", "GPU p95 %"), ("memory_p95", "memory p95 %")]
    a, b = before.to_dict(), after.to_dict()
    keys = [(k, label) for k, label in keys if a.get(k) is not None or b.get(k) is not None]
    chart = charts.bar_chart([label for _, label in keys], {f"A: {before.name}": [a.get(k) or 0.0 for k, _ in keys],
                             f"B: {after.name}": [b.get(k) or 0.0 for k, _ in keys]}, "Utilisation p95")  # fmt: skip
    return (
        _environment()
        .get_template("compare.html.j2")
        .render(
            a=before,
            b=after,
            rows=compare_runs(before, after),
            generated=time.strftime("%Y-%m-%d %H:%M:%S %Z"),
            charts_json=script_json(_finite({"util": chart} if keys else {})),
            echarts_js=_echarts(),
            has_chart=bool(keys),
        )
    )
