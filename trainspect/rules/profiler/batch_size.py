"""BatchSize: CPU, GPU and GPU memory all low, so the batch is too small (spec 2.4)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import SCAN, ProfilerRule, boxplot, job_cpu, pct, window_ends
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["BatchSize"]


class BatchSize(ProfilerRule):
    """Flag GPUs left idle by a too small batch.

    The CPU is the training job's own (its process tree) where it was recorded, else the host's mean over cores.
    At each scan window, over the last ``window`` samples: when the total CPU's p95 is below
    ``cpu_threshold_p95``, each GPU whose utilisation p95 and memory p95 are both below their thresholds
    is a violation. Nodes need more than ``window`` and ``patience`` samples.

    Example:
        >>> BatchSize().window
        500
    """

    parameters = (
        Param("cpu_threshold_p95", float, 70.0, "total CPU p95 below this (%)", min=0, max=100),
        Param("gpu_threshold_p95", float, 70.0, "GPU utilisation p95 below this (%)", min=0, max=100),
        Param("gpu_memory_threshold_p95", float, 70.0, "GPU memory p95 below this (%)", min=0, max=100),
        Param("patience", int, 1000, "samples needed before the rule judges", min=1),
        Param("window", int, 500, "number of most recent samples the p95 are taken over", min=1),
        SCAN,
    )
    cpu_threshold_p95: float
    gpu_threshold_p95: float
    gpu_memory_threshold_p95: float
    patience: int
    window: int
    scan_interval_us: int
    recommendation = (
        "The batch size is too small, and GPUs are underutilized. Consider running on a smaller instance type "
        "or increasing the batch size."
    )
    description = "GPUs underused because the batch is too small; looks at memory, CPU and GPU"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every node with GPUs."""
        missing = self.no_gpu(data)
        if missing:
            return missing
        triggers: list[float] = []
        details: dict[str, Any] = {}
        series: list[Series] = []
        most = 0
        for node, arr in data.system.items():
            if not arr.gpus:
                continue
            most = max(most, len(arr))
            cpu, _own = job_cpu(arr)
            details[node] = {"cpu": boxplot(cpu)}
            for g in arr.gpus:
                details[node][f"gpu{g}"] = boxplot(arr.column(f"gpu{g}_utilization_percent"))  # type: ignore[arg-type]
                mem = arr.column(f"gpu{g}_memory_used_percent")
                details[node][f"gpu{g}_memory"] = boxplot(mem) if mem is not None else {}
            xs, ys, trig = self._scan(arr, cpu)
            triggers += trig
            series.append(Series(f"{node} total CPU p95 (%)", xs, ys, "s", tuple(trig), self.cpu_threshold_p95))
        need = max(self.window, self.patience)
        if most <= need:
            return self.no_data(f"too little data: {most} samples; the rule needs more than {need} (window, patience)")
        if triggers:
            msg = (
                f"{len(triggers)} violation(s): total CPU p95 < {self.cpu_threshold_p95:g}% while GPU p95 < "
                f"{self.gpu_threshold_p95:g}% and GPU memory p95 < {self.gpu_memory_threshold_p95:g}%"
            )
            return self.verdict(Status.ISSUES_FOUND, msg, most, triggers, details, series)
        msg = (
            f"no GPU had utilisation p95 < {self.gpu_threshold_p95:g}% and memory p95 < "
            f"{self.gpu_memory_threshold_p95:g}% while the total CPU p95 was < {self.cpu_threshold_p95:g}%"
        )
        return self.verdict(Status.NO_ISSUES_FOUND, msg, most, (), details, series)

    def _scan(self, arr: SystemArrays, cpu: np.ndarray) -> tuple[tuple[float, ...], tuple[float, ...], list[float]]:
        ends = window_ends(float(arr.timestamps[0]), float(arr.timestamps[-1]), self.scan_s())
        xs, ys, trig = [], [], []
        for end, n in zip(ends, np.searchsorted(arr.timestamps, ends, "right"), strict=True):
            if n <= self.window or n <= self.patience:
                continue
            lo = n - self.window
            cpu_p95 = pct(cpu[lo:n], 95)
            xs.append(float(end))
            ys.append(round(cpu_p95, 3))
            if not cpu_p95 < self.cpu_threshold_p95:
                continue
            for g in arr.gpus:
                util = arr.column(f"gpu{g}_utilization_percent")
                mem = arr.column(f"gpu{g}_memory_used_percent")
                if util is None or mem is None:
                    continue
                if pct(util[lo:n], 95) < self.gpu_threshold_p95 and pct(mem[lo:n], 95) < self.gpu_memory_threshold_p95:
                    trig.append(float(end))
        return tuple(xs), tuple(ys), trig
