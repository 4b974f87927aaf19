"""IOBottleneck: high I/O wait while the GPUs idle (spec 2.3)."""

from __future__ import annotations

import numpy as np

from trainspect.profiler.arrays import SystemArrays
from trainspect.rules.base import Param
from trainspect.rules.profiler._bottleneck import BottleneckRule
from trainspect.rules.profiler._common import SCAN

__all__ = ["IOBottleneck"]


class IOBottleneck(BottleneckRule):
    """Flag I/O wait starving the GPUs.

    Samples where I/O wait is above ``io_threshold`` while some GPU is below ``gpu_threshold``;
    triggers when they exceed ``threshold`` percent of more than ``patience`` samples.

    Example:
        >>> IOBottleneck().io_threshold
        50.0
    """

    parameters = (
        Param("threshold", float, 50.0, "bottleneck samples above this % of all samples trigger", min=0, max=100),
        Param("io_threshold", float, 50.0, "I/O wait above this % is high", min=0, max=100),
        Param("gpu_threshold", float, 10.0, "a GPU below this % is low", min=0, max=100),
        Param("patience", int, 1000, "samples needed before the rule judges", min=1),
        SCAN,
    )
    threshold: float
    io_threshold: float
    gpu_threshold: float
    patience: int
    scan_interval_us: int
    recommendation = (
        "Pre-fetch data or choose different file formats, such as binary formats that improve I/O performance."
    )
    description = "high I/O wait with low GPU for more than threshold % of the time"
    resource = "I/O wait"

    def _high(self, arr: SystemArrays) -> np.ndarray | None:
        col = arr.column("cpu_iowait_percent")
        if col is None:
            return None
        with np.errstate(invalid="ignore"):
            return col > self.io_threshold

    def _limit(self) -> float:
        return float(self.io_threshold)
