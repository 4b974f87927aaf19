"""OverallSystemUsage: utilisation statistics per node (spec 2.10); never triggers."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.rules.profiler._common import JOB_CPU_KEY, ProfilerRule, downsample
from trainspect.rules.profiler.low_gpu_utilization import UNDERUSED_P95
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["OverallSystemUsage", "usage_class"]


def _groups(arr: SystemArrays) -> dict[str, np.ndarray]:
    """Per-row totals: CPU and GPU as means over cores/GPUs, network and disk as sums (bytes/s)."""
    out: dict[str, np.ndarray] = {}
    job = arr.column(JOB_CPU_KEY)
    if job is not None and np.isfinite(job).any():
        out["CPU"] = job.astype(np.float64)  # the training job's own processes
        if arr.cpu_cores:
            out["Host CPU"] = arr.cpu_total()
    elif arr.cpu_cores:
        out["CPU"] = arr.cpu_total()
    if arr.gpus:
        for label, what in (("GPU", "utilization_percent"), ("GPU memory", "memory_used_percent")):
            mat = arr.matrix([f"gpu{g}_{what}" for g in arr.gpus]).astype(np.float64)
            if np.isfinite(mat).any():
                with np.errstate(invalid="ignore"), warnings.catch_warnings():
                    warnings.simplefilter("ignore", RuntimeWarning)  # rows of a tick without GPU samples: NaN
                    out[label] = np.nanmean(mat, axis=1)
    for label, keys in (
        ("CPU memory", ["cpu_memory_used_percent"]),
        ("I/O", ["cpu_iowait_percent"]),
        ("Network", ["network_sent_bytes_per_second", "network_received_bytes_per_second"]),
        ("Disk", ["disk_read_bytes_per_second", "disk_write_bytes_per_second"]),
    ):
        if any(k in arr.keys for k in keys):
            out[label] = np.nansum(arr.matrix(keys).astype(np.float64), axis=1)
    return out


def _stats(v: np.ndarray) -> dict[str, float]:
    v = v[np.isfinite(v)]
    if not len(v):
        return {}
    qs = np.percentile(v, [99, 95, 50])
    return {
        "max": round(max(float(v.max()), 0.0), 2),
        "p99": round(max(float(qs[0]), 0.0), 2),
        "p95": round(max(float(qs[1]), 0.0), 2),
        "p50": round(max(float(qs[2]), 0.0), 2),
        "min": round(max(float(v.min()), 0.0), 2),
    }


class OverallSystemUsage(ProfilerRule):
    """Summarise system utilisation per node.

    Statistics (max, p99, p95, p50, min) of CPU, CPU memory, GPU, GPU memory, I/O wait, network and disk
    per node in ``details``; the message is the report's narrative. Never triggers. ``CPU`` is the training
    job's own processes where they were recorded (then ``Host CPU`` is the whole machine), else the host.

    Example:
        >>> OverallSystemUsage().kind
        'profiler'
    """

    parameters = ()
    recommendation = ""
    description = "system utilisation statistics per node"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Summarise every node."""
        if not data.system:
            return self.no_data("no system metrics were recorded")
        details: dict[str, Any] = {}
        series: list[Series] = []
        notes = []
        for node, arr in data.system.items():
            groups = _groups(arr)
            for label, v in groups.items():
                details.setdefault(label, {})[node] = _stats(v)
            for label in ("CPU", "Host CPU", "GPU"):
                if label in groups:
                    xs, ys = downsample(arr.timestamps, groups[label])
                    series.append(Series(f"{node} {label} utilisation (%)", xs, ys, "s"))
            notes.append(_narrative(node, details))
        first = next(iter(data.system.values()))
        return self.verdict(Status.NO_ISSUES_FOUND, " ".join(notes), len(first), (), details, series)


def _narrative(node: str, details: dict[str, Any]) -> str:
    host = details.get("Host CPU", {}).get(node, {})
    text = _usage(node, details)
    if host:
        text += f" (CPU: the training job's processes; the whole host: p95 {host.get('p95', float('nan')):.1f}%.)"
    return text


def usage_class(cpu_p95: float | None, gpu_p95: float | None, gpu_p50: float | None) -> str:
    """How a node used its hardware, from its CPU p95 and GPU p95 and p50 (%), against :data:`UNDERUSED_P95`.

    ``"no_gpu"`` (no GPU p95), ``"underutilised"`` (GPU and CPU p95 below it; a missing CPU counts as idle),
    ``"cpu_bottleneck"`` (GPU p95 below it, CPU p95 not), ``"well_utilised"`` (GPU p50 above it), else ``"uneven"``
    (GPU p95 at or above it, p50 not above it). The rule's narrative and the report's advice both read it.

    Example:
        >>> usage_class(30.0, 40.0, 35.0), usage_class(95.0, 40.0, 35.0), usage_class(30.0, 90.0, 80.0)
        ('underutilised', 'cpu_bottleneck', 'well_utilised')
    """
    if gpu_p95 is None:
        return "no_gpu"
    if gpu_p95 < UNDERUSED_P95:
        return "underutilised" if (cpu_p95 or 0.0) < UNDERUSED_P95 else "cpu_bottleneck"
    return "well_utilised" if gpu_p50 is not None and gpu_p50 > UNDERUSED_P95 else "uneven"


def _usage(node: str, details: dict[str, Any]) -> str:
    cpu = details.get("CPU", {}).get(node, {})
    gpu = details.get("GPU", {}).get(node, {})
    kind = usage_class(cpu.get("p95"), gpu.get("p95"), gpu.get("p50"))
    if kind == "no_gpu":
        return f"{node}: CPU p95 {cpu.get('p95', float('nan')):.1f}%, p50 {cpu.get('p50', float('nan')):.1f}% (no GPU)."
    if kind == "underutilised":
        return (
            f"{node}: GPU p95 {gpu['p95']:.1f}% and CPU p95 {cpu.get('p95', 0):.1f}% are below "
            f"{UNDERUSED_P95:g}%: underutilised."
        )
    if kind == "cpu_bottleneck":
        return (
            f"{node}: GPU p95 {gpu['p95']:.1f}% below {UNDERUSED_P95:g}% with CPU p95 {cpu['p95']:.1f}%: a CPU "
            "bottleneck is likely."
        )
    if kind == "well_utilised":
        return f"{node}: GPU p50 {gpu['p50']:.1f}% above {UNDERUSED_P95:g}%: well utilised."
    return f"{node}: GPU p50 {gpu['p50']:.1f}%, CPU p50 {cpu.get('p50', float('nan')):.1f}%."
