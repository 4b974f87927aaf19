"""The utilisation-histogram section: how often each CPU core and GPU of a node sat at each utilisation level."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from trainspect.profiler.histograms import UtilisationHistogram, utilisation_histograms
from trainspect.report import charts
from trainspect.report.context import ReportContext
from trainspect.report.sections import Page, Section
from trainspect.rules.profiler.cpu_bottleneck import HIGH_CORE_PERCENT
from trainspect.rules.profiler.low_gpu_utilization import UNDERUSED_P95

__all__ = ["UtilisationHistogramSection", "histogram_findings", "charted_devices", "bin_labels"]

MAX_CORES = 6
"""Cores charted per node beyond the CPU total: the busiest and the least busy half each (by mean)."""
MAX_GPUS = 8
"""GPUs charted per node beyond the GPU total, chosen the same way."""
SPREAD_POINTS = 20.0
"""GPU means further apart than this (percentage points) read as poor load distribution."""
_NAMED = 16
"""Left-out devices named in the note; more are counted."""
PINNED, IDLE, GOOD = HIGH_CORE_PERCENT, 50.0, UNDERUSED_P95
"""A core is pinned above ``PINNED`` % mean (CPUBottleneck's high core); GPUs under ``IDLE`` % are underused, from
``GOOD`` % (LowGPUUtilization's cut-off) well used."""

GUIDANCE = (
    "How to read: a distribution centred at 80–90 % is good use of a device; one piled up near 0 % is an "
    "idle or underused device; GPUs of one node whose distributions differ point at poor load distribution; "
    "single cores pinned near 100 % while the GPUs idle point at a CPU (input) bottleneck."
)


def bin_labels(edges: Sequence[float]) -> list[str]:
    """The bins' category labels: ``0–5 %`` … (the last bin also holds 100 %).

    Example:
        >>> bin_labels([0.0, 50.0, 100.0])
        ['0–50 %', '50–100 %']
    """
    return [f"{lo:g}–{hi:g} %" for lo, hi in zip(edges, edges[1:], strict=False)]


def _pick(names: Sequence[str], hists: Mapping[str, UtilisationHistogram], limit: int) -> list[str]:
    """All of ``names`` when at most ``limit``, else the busiest and least busy by mean (in device order)."""
    if len(names) <= limit:
        return list(names)
    ranked = sorted(names, key=lambda n: (-_mean(hists[n]), names.index(n)))
    chosen = set(ranked[: (limit + 1) // 2]) | set(ranked[len(ranked) - limit // 2 :])
    return [n for n in names if n in chosen]


def _mean(h: UtilisationHistogram) -> float:
    return h.mean if np.isfinite(h.mean) else -1.0


def charted_devices(hists: Mapping[str, UtilisationHistogram]) -> tuple[list[str], list[str], list[str]]:
    """(CPU devices charted, GPU devices charted, devices left out) of one node.

    The CPU chart holds ``cpu_total`` and at most :data:`MAX_CORES` cores, the GPU chart at most :data:`MAX_GPUS`
    GPUs and ``gpu_total``; the others are left out of the charts (the table lists every device).
    """
    cores = [d for d in hists if d.startswith("cpu") and d != "cpu_total"]
    gpus = [d for d in hists if d.startswith("gpu") and d != "gpu_total"]
    cpu = ["cpu_total"] * ("cpu_total" in hists) + _pick(cores, hists, MAX_CORES)
    gpu = _pick(gpus, hists, MAX_GPUS) + ["gpu_total"] * ("gpu_total" in hists)
    shown = set(cpu) | set(gpu)
    return cpu, gpu, [d for d in hists if d not in shown]


def _means(hists: Mapping[str, UtilisationHistogram], prefix: str) -> dict[str, float]:
    return {
        d: h.mean for d, h in hists.items() if d.startswith(prefix) and not d.endswith("_total") and np.isfinite(h.mean)
    }


def histogram_findings(hists: Mapping[str, UtilisationHistogram]) -> list[tuple[str, bool]]:
    """Short findings on one node's distributions, as (text, is a problem).

    Example:
        >>> H = lambda d, m: UtilisationHistogram("n", d, (0.0, 100.0), (1,), 1, m)
        >>> histogram_findings({"gpu0": H("gpu0", 85.0), "gpu1": H("gpu1", 30.0), "gpu_total": H("gpu_total", 57.5)})
        [('GPU means differ by 55 points (gpu0 85 %, gpu1 30 %): poor load distribution over the GPUs.', True)]
    """
    gpus, cores = _means(hists, "gpu"), _means(hists, "cpu")
    total = hists.get("gpu_total")
    gpu_mean = total.mean if total is not None and np.isfinite(total.mean) else None
    out: list[tuple[str, bool]] = []
    if len(gpus) > 1 and max(gpus.values()) - min(gpus.values()) > SPREAD_POINTS:
        hi, lo = max(gpus, key=gpus.__getitem__), min(gpus, key=gpus.__getitem__)
        out.append(
            (
                f"GPU means differ by {gpus[hi] - gpus[lo]:.0f} points ({hi} {gpus[hi]:.0f} %, {lo} "
                f"{gpus[lo]:.0f} %): poor load distribution over the GPUs.",
                True,
            )
        )
    pinned = sorted((d for d, m in cores.items() if m >= PINNED), key=lambda d: -cores[d])
    if pinned and gpu_mean is not None and gpu_mean < IDLE:
        out.append(
            (
                f"{len(pinned)} CPU core(s) pinned near 100 % ({', '.join(pinned[:4])}) while the GPUs average "
                f"{gpu_mean:.0f} %: a CPU bottleneck is likely (data loading, preprocessing).",
                True,
            )
        )
    if gpu_mean is not None and gpu_mean < IDLE:
        out.append((f"GPUs average {gpu_mean:.0f} %: underused; increase the batch size or feed them faster.", True))
    elif gpu_mean is not None and gpu_mean >= GOOD and not out:
        out.append((f"GPUs average {gpu_mean:.0f} %: good use.", False))
    if gpu_mean is None and "cpu_total" in hists and np.isfinite(hists["cpu_total"].mean):
        cpu = hists["cpu_total"].mean
        out.append(
            (f"No GPU recorded; the CPU averages {cpu:.0f} %" + (": underused." if cpu < IDLE else "."), cpu < IDLE)
        )
    return out


def _chart(page: Page, node: str, kind: str, devices: list[str], hists: Mapping[str, UtilisationHistogram]) -> None:
    if not devices:
        return
    edges = hists[devices[0]].edges
    series = {d: [float(c) for c in hists[d].counts] for d in devices}
    option = charts.bar_chart(
        bin_labels(edges),
        series,
        f"{kind} utilisation histogram ({node})",
        x_name="utilisation",
        y_name="samples",
        y_unit="count",
    )
    page.chart(option, height=300)


def _node(page: Page, node: str, hists: Mapping[str, UtilisationHistogram]) -> None:
    page.h3(f"Node {node}")
    if not hists:
        page.note(f"Node {node} recorded no CPU or GPU utilisation.")
        return
    for text, warn in histogram_findings(hists):
        page.note(text, warn=warn)
    cpu, gpu, left = charted_devices(hists)
    _chart(page, node, "CPU", cpu, hists)
    _chart(page, node, "GPU", gpu, hists)
    if left:
        names = ", ".join(left[:_NAMED]) + (f" and {len(left) - _NAMED} more" if len(left) > _NAMED else "")
        page.p(
            f"Left out of the charts: {len(left)} of {len(hists)} devices ({names}); the charts keep the totals "
            "and the busiest and least busy devices. The table lists every device."
        )
    page.table(["device", "samples", "mean %"], [[d, h.samples, h.mean] for d, h in hists.items()])


class UtilisationHistogramSection(Section):
    """Utilisation histograms per node: CPU total, cores, GPUs and GPU total over the run, with findings."""

    id = "utilisation-histograms"
    order = 45
    title = "Utilisation histograms"
    requires = ("system",)

    def build(self, ctx: ReportContext, page: Page) -> None:
        """Add the guidance, then per node its findings, CPU and GPU histograms and the per-device table."""
        hists = utilisation_histograms(ctx.profiler)
        page.p(GUIDANCE)
        if not hists:
            page.note("No system metrics were recorded, so there is no utilisation to count.")
            return
        for node, devices in hists.items():
            _node(page, node, devices)
