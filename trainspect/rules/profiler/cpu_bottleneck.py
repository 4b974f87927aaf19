"""CPUBottleneck: high CPU while the GPUs idle (spec 2.2)."""

from __future__ import annotations

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.rules.base import Param
from trainspect.rules.profiler._bottleneck import BottleneckRule
from trainspect.rules.profiler._common import SCAN, job_cpu

__all__ = ["CPUBottleneck", "HIGH_CORE_PERCENT"]

HIGH_CORE_PERCENT = 90.0
"""A CPU core busier than this (%) is high: the default ``cpu_threshold`` (the report's "pinned core" too)."""


class CPUBottleneck(BottleneckRule):
    """Flag a busy CPU starving the GPUs.

    Samples where some core is above ``cpu_threshold`` while some GPU is below ``gpu_threshold``;
    triggers when they exceed ``threshold`` percent of more than ``patience`` samples. Where the training job's
    own CPU was recorded (``process_cpu_utilization_percent``), a sample counts only when the job's processes
    use at least ``cpu_threshold`` % of one core, so another job saturating a core is not blamed on the training
    (smdebug looks at the host only).

    Example:
        >>> CPUBottleneck().cpu_threshold
        90.0
    """

    parameters = (
        Param("threshold", float, 50.0, "bottleneck samples above this % of all samples trigger", min=0, max=100),
        Param("cpu_threshold", float, HIGH_CORE_PERCENT, "a core above this % is high", min=0, max=100),
        Param("gpu_threshold", float, 10.0, "a GPU below this % is low", min=0, max=100),
        Param("patience", int, 1000, "samples needed before the rule judges", min=1),
        SCAN,
    )
    threshold: float
    cpu_threshold: float
    gpu_threshold: float
    patience: int
    scan_interval_us: int
    recommendation = "Consider increasing the number of data loaders or applying data pre-fetching."
    description = "high CPU with low GPU for more than threshold % of the time"
    resource = "CPU"

    def _high(self, arr: SystemArrays) -> np.ndarray | None:
        """Per sample: some core above ``cpu_threshold`` (and the job's own share of it, where recorded)."""
        cores = [f"cpu{i}_utilization_percent" for i in arr.cpu_cores]
        if not cores:
            return None
        with np.errstate(invalid="ignore"):
            high = np.any(arr.matrix(cores) > self.cpu_threshold, axis=1)
            own, is_job = job_cpu(arr)
            if is_job:
                high &= own * len(cores) >= self.cpu_threshold
        return high

    def _limit(self) -> float:
        return float(self.cpu_threshold)
