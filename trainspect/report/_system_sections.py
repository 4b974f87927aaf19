"""Built-in sections on the job and the hardware: summary, system usage, heatmap, cost."""

from __future__ import annotations

import datetime as dt
from typing import Any

import numpy as np
import pandas as pd

from trainspect.profiler.analysis import job_statistics, utilization_statistics
from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.heatmap import heatmap
from trainspect.profiler.metrics import CATALOGUE
from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page, Section, sig
from trainspect.report.summary import summarize
from trainspect.rules.profiler.low_gpu_utilization import UNDERUSED_P95
from trainspect.rules.profiler.overall_system_usage import usage_class

__all__ = ["JobSummarySection", "SystemUsageSection", "HeatmapSection", "CostSection", "usage_advice", "with_job_rows"]

_JOB_CPU = "process_cpu_utilization_percent"
MIN_SAMPLES = 5
"""A node with fewer system samples gets its figures in words, not time series over empty axes."""
_COLS = ["min", "max", "p50", "p90", "p95", "p99"]


def human(value: Any, unit: str) -> str:
    """A statistic with its unit, in the unit's human scale: ``74.7 KB/s``, ``641 MB``, ``28.3 %``, ``12``.

    Example:
        >>> human(74666.0, "bytes/s"), human(641802240, "bytes"), human(28.31, "percent"), human(None, "x")
        ('74.7 KB/s', '642 MB', '28.3 %', '–')
        >>> human(12.0, "count"), human(41.5, "°C"), human(0.25, "s")
        ('12', '41.5 °C', '0.25 s')
    """
    if value is None or value != value:
        return "–"
    v = float(value)
    if unit in ("bytes", "bytes/s"):
        suffix = "/s" if unit == "bytes/s" else ""
        for name in ("B", "KB", "MB", "GB", "TB"):
            if abs(v) < 1000 or name == "TB":
                return f"{sig(v)} {name}{suffix}"
            v /= 1000
    if unit == "percent":
        return f"{sig(v)} %"
    if unit == "count":
        return sig(v)
    return f"{sig(v)} {unit}".strip()


def _when(t: float | None) -> str:
    if t is None:
        return "–"
    return dt.datetime.fromtimestamp(t, tz=dt.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


class JobSummarySection(Section):
    """Training job summary: start, end, phases and their pie chart (SageMaker report part 2)."""

    id = "job-summary"
    order = 10
    title = "Training job summary"
    requires = ("profiler",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the job statistics table and the phases chart."""
        stats = job_statistics(ctx.profiler)
        rows: list[tuple[str, Any]] = [
            ("Start time", _when(stats.get("start"))),
            ("End time", _when(stats.get("end"))),
            ("Job duration (s)", stats.get("duration_s")),
        ]
        if "training_loop_s" not in stats:
            page.kv(rows)
            page.note("No step was recorded, so initialization and finalization cannot be told apart from training.")
            return
        rows += [
            ("Training loop start", _when(stats["training_loop_start"])),
            ("Training loop end", _when(stats["training_loop_end"])),
            ("Initialization (s)", stats["initialization_s"]),
            ("Training loop (s)", stats["training_loop_s"]),
            ("Finalization (s)", stats["finalization_s"]),
            ("Initialization %", stats["initialization_percent"]),
            ("Training loop %", stats["training_loop_percent"]),
            ("Finalization %", stats["finalization_percent"]),
        ]
        page.kv(rows)
        phases = {
            "Initialization": stats["initialization_s"],
            "Training loop": stats["training_loop_s"],
            "Finalization": stats["finalization_s"] or 0.0,
        }
        page.chart(charts.pie_chart(phases, "Job phases (seconds)"), height=280)
        if stats["initialization_s"] > stats["training_loop_s"]:
            page.note(
                "Initialization took longer than the training loop: check data download, model loading and "
                "compilation before the first step.",
                warn=True,
            )
        if not ctx.profiler.job_ended:
            page.note("The job has not ended (no end marker): the figures cover what was recorded so far.")


def usage_advice(cpu_p95: float | None, gpu_p95: float | None, gpu_p50: float | None) -> str:
    """SageMaker's plain-language advice from a node's CPU and GPU utilisation percentiles.

    The judgement is OverallSystemUsage's (:func:`~trainspect.rules.profiler.overall_system_usage.usage_class`, the
    cut-off :data:`~trainspect.rules.profiler.low_gpu_utilization.UNDERUSED_P95`); this only words it.

    Example:
        >>> usage_advice(30.0, 40.0, 35.0).split(":")[1]
        ' the instance is underused. Consider a smaller instance, or increase the batch size.'
    """
    kind = usage_class(cpu_p95, gpu_p95, gpu_p50)
    if kind == "no_gpu":
        if cpu_p95 is not None and cpu_p95 < UNDERUSED_P95:
            return (
                f"CPU utilisation p95 is {cpu_p95:.0f}%: the node is underused. Consider a smaller instance, or "
                "increase the batch size."
            )
        return "No GPU was recorded; the CPU is busy, which is expected for CPU training."
    if kind == "well_utilised":
        return f"GPUs are well utilised (p50 {gpu_p50:.0f}%)."
    if kind == "cpu_bottleneck":
        return (
            f"GPU utilisation p95 is {gpu_p95:.0f}% while CPU p95 is {cpu_p95:.0f}%: a CPU bottleneck is likely. "
            "Increase dataloader workers, pre-fetch data, or move preprocessing to the GPU."
        )
    if kind == "uneven":
        return (
            f"GPU utilisation p95 is {gpu_p95:.0f}% but p50 only {gpu_p50 or 0:.0f}%: the GPUs are busy in bursts "
            "and idle between them. Look for waits between the busy phases (data loading, synchronisation, "
            "logging), or increase the batch size."
        )
    return (
        f"GPU utilisation p95 is {gpu_p95:.0f}% and CPU p95 {cpu_p95 or 0:.0f}%: the instance is underused. "
        "Consider a smaller instance, or increase the batch size."
    )


def _p(stats: pd.DataFrame, node: str, metric: str, col: str) -> float | None:
    sel = stats[(stats["node"] == node) & (stats["metric"] == metric)]
    return float(sel[col].iloc[0]) if len(sel) else None


def _cpu_p95(stats: pd.DataFrame, node: str, page: Page) -> float | None:
    """The CPU p95 the advice uses: the training job's own where recorded (the host's is noted beside it)."""
    host = _p(stats, node, "cpu_total_utilization_percent", "p95")
    if host is None:
        host = _p(stats, node, "cpu_utilization_percent", "p95")
    job = _p(stats, node, _JOB_CPU, "p95")
    if job is None:
        return host
    if host is not None:
        page.p(
            f"CPU p95: the training job's processes {job:.1f}% of all cores; the whole host {host:.1f}% "
            f"(the difference is other processes on the machine)."
        )
    return job


def _rate_keys(arr: SystemArrays) -> list[str]:
    """The node's byte-rate metrics (disk, network…): declared ones in catalogue order, then the others."""
    rates = [k for k in arr.keys if CATALOGUE.describe(k).unit == "bytes/s"]
    order = {m.key: i for i, m in enumerate(CATALOGUE.metrics())}
    return sorted(rates, key=lambda k: order.get(CATALOGUE.describe(k).key, len(order)))


def _series(arr: SystemArrays) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    job = arr.column(_JOB_CPU)
    if job is not None:
        out["CPU (training job)"] = (arr.timestamps, job)
    if arr.cpu_cores or "cpu_utilization_percent" in arr.keys:
        out["CPU (host)" if job is not None else "CPU"] = (arr.timestamps, arr.cpu_total())
    for key, label in (("cpu_memory_used_percent", "CPU memory"), ("cpu_iowait_percent", "I/O wait")):
        col = arr.column(key)
        if col is not None:
            out[label] = (arr.timestamps, col)
    for g in arr.gpus:
        for key, label in (
            (f"gpu{g}_utilization_percent", f"GPU {g}"),
            (f"gpu{g}_memory_used_percent", f"GPU {g} mem"),
        ):
            col = arr.column(key)
            if col is not None:
                out[label] = (arr.timestamps, col)
    return out


class SystemUsageSection(Section):
    """System usage per node: percentiles table, advice and time series (SageMaker report part 3)."""

    id = "system-usage"
    order = 40
    title = "System usage statistics"
    requires = ("system",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add per-node advice, the percentile table and the utilisation time series."""
        stats = utilization_statistics(ctx.profiler)
        for node, arr in sorted(ctx.profiler.system.items()):
            page.h3(f"Node {node}")
            cpu95 = _cpu_p95(stats, node, page)
            gpu95 = _p(stats, node, "gpu_total_utilization_percent", "p95")
            gpu50 = _p(stats, node, "gpu_total_utilization_percent", "p50")
            page.note(usage_advice(cpu95, gpu95, gpu50), warn=usage_class(cpu95, gpu95, gpu50) != "well_utilised")
            sel = stats[stats["node"] == node]
            rows = []
            for _, r in sel.iterrows():
                metric = CATALOGUE.describe(r["metric"])
                if metric.table:  # undeclared metrics too: shown under their key, never dropped
                    rows.append([metric.display_label] + [human(r[c], str(r["unit"])) for c in _COLS])
            page.table(["metric", *_COLS], rows, num=[False] + [True] * len(_COLS))
            if len(arr) < MIN_SAMPLES:
                page.note(
                    f"Only {len(arr)} system sample(s) were recorded on {node} (every {arr.interval_ms or '?'} "
                    "ms): too few to chart; the table above shows them. Longer runs, or a shorter "
                    "system_monitor_interval_millis, give time series."
                )
                continue
            page.chart(
                charts.line_chart(_series(arr), f"Utilisation over time ({node})", y_name="utilisation", y_unit="%"),
                height=340,
            )
            io = {
                CATALOGUE.describe(k).display_label: (arr.timestamps, arr.values[:, arr.keys.index(k)])
                for k in _rate_keys(arr)
            }
            if io:
                page.chart(
                    charts.line_chart(io, f"Disk and network ({node})", y_name="rate", y_unit="B/s", log=False),
                    height=260,
                )


class HeatmapSection(Section):
    """The utilisation heatmap: CPU cores and GPUs over time, with step boundaries."""

    id = "heatmap"
    order = 50
    title = "Utilisation heatmap"
    requires = ("system",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add one heatmap per node."""
        page.p(
            "Each row is a CPU core or a GPU, each column a time bucket; darker means busier. Idle GPUs next to "
            "busy cores point at an input pipeline bottleneck. The first rows are the training job's processes "
            "(% of all cores) and the whole host (mean of cores): on a shared machine the host can be busy while "
            "the job uses little of it."
        )
        for node in sorted(ctx.profiler.system):
            hm = heatmap(ctx.profiler, node=node, max_columns=200)
            if len(ctx.profiler.system[node]) < MIN_SAMPLES:
                page.note(
                    f"Node {node}: only {len(ctx.profiler.system[node])} system sample(s), too few for a heatmap."
                )
                continue
            if not hm["rows"]:
                page.note(f"Node {node} recorded no per-core or GPU utilisation.")
                continue
            hm = with_job_rows(hm, ctx.profiler.system[node])
            height = max(220, min(900, 14 * len(hm["rows"]) + 140))
            page.chart(charts.heatmap_chart(hm, f"Utilisation % ({node}, {hm['bucket_s']:.1f} s buckets)"), height)


JOB_ROW, HOST_ROW = "job CPU", "host CPU"
"""The heatmap's first rows: the training job's processes (% of all cores) and the whole host (mean of cores)."""


def with_job_rows(hm: dict[str, Any], arr: SystemArrays) -> dict[str, Any]:
    """``hm`` with the job's CPU row and the host's CPU row on top, in the same time buckets.

    On a shared machine the host is busy while the job uses a fraction of it: the two rows side by side tell them
    apart. The job row is left out when the monitor recorded no job CPU (``process_cpu_utilization_percent``).
    """
    job = arr.column(_JOB_CPU)
    times = list(hm.get("times") or [])
    if job is None or not times:
        return hm
    lo, width = float(times[0]), float(hm.get("bucket_s") or 1.0)
    inside = (arr.timestamps >= lo) & (arr.timestamps <= lo + width * len(times))
    bucket = np.minimum(((arr.timestamps[inside] - lo) / width).astype(np.int64), len(times) - 1)
    rows = []
    for values in (np.asarray(job, dtype=np.float64), np.asarray(arr.cpu_total(), dtype=np.float64)):
        vals = values[inside]
        ok = np.isfinite(vals)
        sums = np.bincount(bucket[ok], weights=vals[ok], minlength=len(times))
        counts = np.bincount(bucket[ok], minlength=len(times))
        rows.append([round(float(a / c), 2) if c else None for a, c in zip(sums, counts, strict=True)])
    return {**hm, "rows": [JOB_ROW, HOST_ROW, *hm["rows"]], "values": [*rows, *hm["values"]]}


class CostSection(Section):
    """What the run cost at the given hourly price, and what a smaller instance might save."""

    id = "cost"
    order = 120
    title = "Cost"
    requires = ("price",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the cost table and advice."""
        s = summarize(ctx)
        cost = f"${s.cost:.4f}" if s.cost is not None else None
        page.kv(
            [
                ("Price per instance-hour", f"${ctx.price_per_hour:.3f}"),
                ("Instances (nodes)", s.instances),
                ("Duration (s)", s.duration_s),
                ("Cost", cost),
            ]
        )
        util = s.gpu_p95 if s.gpu_p95 is not None else s.cpu_p95
        if util is not None and util < UNDERUSED_P95:
            page.note(
                f"Utilisation p95 is {util:.0f}%: a smaller or cheaper instance would likely do the same "
                "work for less. Compare runs with `trainspect compare A B --price-per-hour A=.. B=..`.",
                warn=True,
            )
