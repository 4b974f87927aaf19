"""Built-in framework-metrics sections: phase ratios, step durations, operators, Python hotspots, dataloader."""

from __future__ import annotations

import logging

import numpy as np

from trainspect._units import duration
from trainspect.profiler.analysis import (
    cuda_memory_statistics,
    dataloader_statistics,
    phase_ratios,
    python_hotspots,
    step_histogram,
    step_statistics,
    top_operators,
)
from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page, Section
from trainspect.rules.profiler.dataloader import MAX_LOADERS_PERCENT, MIN_LOADERS_PERCENT, MIN_WAIT_PERCENT
from trainspect.rules.profiler.step_outlier import StepOutlier
from trainspect.rules.verdict import Status, Verdict

__all__ = [
    "PhaseRatioSection",
    "StepDurationSection",
    "OperatorSection",
    "PythonSection",
    "DataloaderSection",
    "CudaMemorySection",
]

log = logging.getLogger(__name__)

_LISTED = 10
"""Outlier steps named per worker and mode in the step-duration note; more are counted."""


class PhaseRatioSection(Section):
    """Train/eval/other and forward/backward ratios (SageMaker report part 4)."""

    id = "framework-ratios"
    order = 60
    title = "Framework metrics: where the time went"
    requires = ("steps",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the two ratio pies and their advice."""
        ratios = phase_ratios(ctx.profiler)
        modes, spans = ratios["modes"], ratios["spans"]  # both always there (empty: no steps timed)
        if modes:
            page.chart(charts.pie_chart(modes, "Training loop: TRAIN / EVAL / between steps (%)"), height=280)
            if modes["other"] > 25.0:  # "other" is in every non-empty ``modes``
                page.note(
                    f"{modes['other']:.0f}% of the training loop was spent between steps (data loading, "
                    "logging, checkpoints, evaluation outside the hook): increase dataloader workers or "
                    "pre-fetch data.",
                    warn=True,
                )
        if spans:
            page.chart(charts.pie_chart(spans, "Step time: forward / backward / optimizer / dataloader (%)"), 280)
            fwd, bwd = spans["forward"], spans["backward"]
            if fwd and bwd:
                page.p(
                    f"Forward to backward ratio: {fwd / bwd:.2f} (backward passes usually take about twice as "
                    "long as forward passes)."
                )


class StepDurationSection(Section):
    """Step-duration statistics, histogram and timeline per worker and mode (SageMaker report part 7)."""

    id = "step-durations"
    order = 70
    title = "Step durations"
    requires = ("steps",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the statistics table, histogram and duration over time."""
        stats = step_statistics(ctx.profiler)
        page.table(
            ["worker", "mode", "steps", "mean (s)", "min", "p50", "p95", "p99", "max", "between steps (s)"],
            stats.itertuples(index=False, name=None),
        )
        hist = step_histogram(ctx.profiler, bins=50)
        for (worker, mode), grp in hist.groupby(["worker", "mode"], sort=True):
            cats = [duration((a + b) / 2) for a, b in zip(grp["bin_start"], grp["bin_end"], strict=True)]
            page.chart(
                charts.bar_chart(
                    cats,
                    {"steps": grp["count"].tolist()},
                    f"Step duration histogram ({worker}, {mode})",
                    x_name="step duration",
                    y_name="steps",
                    y_unit="count",
                ),
                height=260,
            )
        series = {}
        for worker, tab in sorted(ctx.profiler.framework.items()):
            if tab.step_count:
                series[worker] = (tab.steps["start"], tab.steps["end"] - tab.steps["start"])
        page.chart(charts.line_chart(series, "Step duration over time", y_name="step duration", y_unit="s"), 280)
        _long_steps_note(ctx, page)


def step_outlier_verdict(ctx: ReportContext) -> Verdict | None:
    """StepOutlier's verdict on the run: the one the run holds, else the rule evaluated now (``None``: it failed)."""
    found = next((v for v in ctx.verdicts if v.rule == StepOutlier.__name__), None)
    if found is not None:
        return found
    try:
        return StepOutlier().evaluate(ctx.profiler)
    except Exception as exc:  # noqa: BLE001 - the rule's failure only loses the note
        log.warning("trainspect report: StepOutlier failed: %s", exc)
        return None


def outlier_steps(verdict: Verdict) -> dict[str, list[int]]:
    """The steps StepOutlier found longer than its threshold, per worker and mode (``"worker_0/TRAIN"``)."""
    return {
        label: [int(s) for s in d.get("step_numbers") or ()]
        for label, d in sorted(verdict.details.items())
        if isinstance(d, dict) and d.get("number_of_outliers")
    }


def _threshold_rule(verdict: Verdict) -> str:
    """How the verdict's threshold was set (`` (median + 5·MAD)``), from its parameters; empty when they are absent."""
    params = verdict.parameters
    if "literal" not in params:
        return ""
    if params["literal"]:
        return f" (mean + {params.get('stddev', 3.0):g}·std)"
    return f" (median + {params.get('mad_factor', 5.0):g}·MAD)"


def _listed(steps: list[int], count: int) -> str:
    """``"3, 7, 12"``, or the first :data:`_LISTED` of ``count`` steps ``"… and 72 more"``."""
    shown = ", ".join(str(s) for s in steps[:_LISTED])
    return shown + (f" and {count - _LISTED} more" if count > _LISTED else "")


def _outliers_text(verdict: Verdict, label: str, steps: list[int]) -> str:
    d = verdict.details[label]
    count = int(d["number_of_outliers"])
    text = (
        f"{label}: {count} step(s) longer than StepOutlier's threshold {duration(float(d['threshold_s']))}"
        f"{_threshold_rule(verdict)}: steps {_listed(steps, count)}"
    )
    stalls = [int(s) for s in d.get("stall_step_numbers") or ()]
    if verdict.status is Status.ISSUES_FOUND and stalls and "lost_percent" in d:
        text += (
            f"; the stalls among them (steps {_listed(stalls, len(stalls))}) cost "
            f"{float(d['lost_percent']):.1f}% of the training loop"
        )
    return text


def _long_steps_note(ctx: ReportContext, page: Page) -> None:
    """The step outliers StepOutlier finds, and whether they cost the training loop: the rule's own judgement."""
    verdict = step_outlier_verdict(ctx)
    found = outlier_steps(verdict) if verdict is not None else {}
    if verdict is None or not found:
        return
    lines = ". ".join(_outliers_text(verdict, label, steps) for label, steps in found.items())
    if verdict.status is Status.ISSUES_FOUND:
        page.note(
            f"{lines}. StepOutlier finds they cost a real share of the training loop: look for CPU or I/O "
            "bottlenecks, garbage collection or checkpointing at those times.",
            warn=True,
        )
        return
    page.note(
        f"{lines}. StepOutlier finds they cost little of the training loop (scheduler noise on a loaded "
        "machine, rare stalls)."
    )


class OperatorSection(Section):
    """The most expensive CPU and GPU operators of the detailed-profiling window."""

    id = "operators"
    order = 80
    title = "Top CPU and GPU operators"
    requires = ("operators",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add a table and a bar chart per device."""
        for device in ("cpu", "gpu"):
            ops = top_operators(ctx.profiler, device=device, n=15)
            if ops.empty:
                page.note(f"No {device.upper()} operator was recorded in the detailed window.")
                continue
            page.h3(f"{device.upper()} operators")
            top = ops.iloc[0]
            page.p(
                f"The most expensive {device.upper()} operator is {top['name']} ({top['percent']:.1f}% of "
                f"{device.upper()} self time on {top['worker']})."
            )
            page.table(
                ["worker", "operator", "calls", "self time (µs)", "total time (µs)", "%"],
                ops[["worker", "name", "calls", "self_time_us", "total_time_us", "percent"]].itertuples(
                    index=False, name=None
                ),
            )
            top10 = ops.head(10).iloc[::-1]
            page.chart(
                charts.bar_chart(
                    top10["name"].tolist(),
                    {"self time": (top10["self_time_us"] / 1e6).tolist()},
                    f"{device.upper()} operators by self time",
                    horizontal=True,
                    y_unit="s",
                ),
                300,
            )


class PythonSection(Section):
    """Functions with the most own time in the Python-profiled steps."""

    id = "python"
    order = 90
    title = "Python hotspots"
    requires = ("python",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the hotspot table."""
        hot = python_hotspots(ctx.profiler, n=20)
        page.table(
            ["worker", "function", "file", "line", "calls", "own time (s)", "cumulative (s)"],
            hot.itertuples(index=False, name=None),
        )


class DataloaderSection(Section):
    """Dataloader waits and worker count (SageMaker report part 10)."""

    id = "dataloader"
    order = 100
    title = "Dataloader analysis"
    requires = ("dataloader",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the statistics, the wait histogram and worker-count advice."""
        stats = dataloader_statistics(ctx.profiler)
        page.table(
            ["worker", "num_workers", "waits", "mean (s)", "p50", "p95", "max", "total (s)", "% of loop"],
            stats.itertuples(index=False, name=None),
        )
        cores = max((len(a.cpu_cores) for a in ctx.profiler.system.values()), default=0)
        for _, row in stats.iterrows():
            page.note(
                _advice(row["worker"], row["num_workers"], row["loop_percent"], cores),
                warn=bool(row["loop_percent"] > MIN_WAIT_PERCENT),
            )
        waits = [tab.spans["end"] - tab.spans["start"] for tab in ctx.profiler.framework.values()]
        waits = [
            w[k == 4] for w, k in zip(waits, [t.spans["kind"] for t in ctx.profiler.framework.values()], strict=True)
        ]
        flat = np.concatenate(waits) if waits else np.zeros(0)
        if len(flat):
            counts, edges = np.histogram(flat, bins=40)
            cats = [duration((edges[i] + edges[i + 1]) / 2) for i in range(len(counts))]
            page.chart(
                charts.bar_chart(
                    cats,
                    {"waits": counts.tolist()},
                    "Dataloader wait times",
                    x_name="wait",
                    y_name="waits",
                    y_unit="count",
                ),
                240,
            )


def _advice(worker: str, num_workers: object, loop_percent: float, cores: int) -> str:
    """Worker-count advice, with the cut-offs of the Dataloader rule's defaults (wait share, loaders per core)."""
    n = None if num_workers is None or num_workers != num_workers else int(num_workers)  # type: ignore[call-overload]
    share = f"{worker} waited for data {loop_percent:.0f}% of its training loop"
    few = n is None or cores == 0 or n < cores * MIN_LOADERS_PERCENT / 100.0
    if loop_percent > MIN_WAIT_PERCENT and few:
        target = f" (up to {cores}, the number of cores)" if cores else ""
        return f"{share}: increase dataloader workers (num_workers={n}){target}, set pin_memory=True and pre-fetch."
    if cores and n is not None and n > cores * MAX_LOADERS_PERCENT / 100.0:
        return f"{share}; {n} dataloader workers on {cores} cores: decrease num_workers to avoid contention."
    return f"{share}: data loading is not a bottleneck."


def _mib(value: float) -> str:
    return "–" if not np.isfinite(value) else f"{value / 2**20:,.1f}"


class CudaMemorySection(Section):
    """The job's own GPU memory, from PyTorch's CUDA allocator (not the device total NVML reports)."""

    id = "cuda-memory"
    order = 105
    title = "GPU memory of the training job"
    requires = ("cuda_memory",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the per-device table: first, last and largest allocated memory, reserved, peak, growth."""
        stats = cuda_memory_statistics(ctx.profiler)
        page.p(
            "Memory PyTorch's CUDA allocator holds for this job at each step end (MiB); other processes on the "
            "same GPU are not counted. Steady growth over the run suggests tensors kept across steps."
        )
        page.table(
            [
                "worker",
                "device",
                "steps",
                "allocated, first",
                "allocated, last",
                "allocated, max",
                "reserved, max",
                "peak",
                "growth",
            ],
            [
                (
                    r.worker,
                    r.device,
                    r.steps,
                    _mib(r.allocated_first_bytes),
                    _mib(r.allocated_last_bytes),
                    _mib(r.allocated_max_bytes),
                    _mib(r.reserved_max_bytes),
                    _mib(r.peak_bytes),
                    _mib(r.growth_bytes),
                )
                for r in stats.itertuples()
            ],
        )
