"""The training job's CUDA memory per device, from PyTorch's caching allocator, as framework metrics per step.

NVML sees the whole device (every process on it); the allocator's counters are this process's own, and reading
them is cheap (host-side counters, no device synchronisation). Nothing is read until the training has initialised
CUDA itself: the probe never initialises CUDA. Per device ``d`` (CUDA's numbering, the system metrics' ``gpu{d}``):

* ``gpu{d}_memory_allocated_bytes``: memory held by tensors (``torch.cuda.memory_allocated``);
* ``gpu{d}_memory_reserved_bytes``: memory the caching allocator holds (``torch.cuda.memory_reserved``);
* ``gpu{d}_memory_peak_allocated_bytes``: the peak of the first since the start, or since the training's last
  ``torch.cuda.reset_peak_memory_stats`` (``torch.cuda.max_memory_allocated``; the probe never resets it);
* ``gpu{d}_memory_allocated_percent``: the first as a share of the device's memory.

The PyTorch hook registers a probe on its framework recorder at start (:func:`install_cuda_memory`); the recorder
calls it at each step end and writes the values to its ``step_metrics`` table.
"""

from __future__ import annotations

import importlib
from typing import Any

from trainspect.hooks.framework_metrics import FrameworkRecorder

__all__ = ["CudaMemoryProbe", "install_cuda_memory", "CUDA_MEMORY_KEYS"]

CUDA_MEMORY_KEYS = {
    "gpu{d}_memory_allocated_bytes": "bytes",
    "gpu{d}_memory_reserved_bytes": "bytes",
    "gpu{d}_memory_peak_allocated_bytes": "bytes",
    "gpu{d}_memory_allocated_percent": "percent",
}
"""The metric keys this probe writes (``{d}``: the CUDA device index) and their units."""


class CudaMemoryProbe:
    """Reads the caching allocator's counters of every device this process uses.

    Args:
        cuda: the ``torch.cuda`` module (or a stand-in with ``is_initialized``, ``device_count``,
            ``memory_stats_as_nested_dict`` and ``get_device_properties``); default: imported when first called.

    Example:
        >>> CudaMemoryProbe()()  # CUDA not initialised (or no CUDA): nothing to read
        {}
    """

    name = "cuda_memory"

    def __init__(self, cuda: Any = None) -> None:
        self._cuda = cuda
        self._totals: dict[int, float] = {}

    def _module(self) -> Any:
        if self._cuda is None:
            self._cuda = importlib.import_module("torch.cuda")
        return self._cuda

    def __call__(self) -> dict[str, float]:
        """Metric key -> value for every device with memory allocated by this process (empty before CUDA starts)."""
        cuda = self._module()
        if not cuda.is_initialized():
            return {}
        out: dict[str, float] = {}
        for d in range(int(cuda.device_count())):
            stats = cuda.memory_stats_as_nested_dict(d)
            allocated = _counter(stats, "allocated_bytes", "current")
            reserved = _counter(stats, "reserved_bytes", "current")
            peak = _counter(stats, "allocated_bytes", "peak")
            if not (reserved or peak):
                continue  # a device this process never allocated on
            out[f"gpu{d}_memory_allocated_bytes"] = allocated
            out[f"gpu{d}_memory_reserved_bytes"] = reserved
            out[f"gpu{d}_memory_peak_allocated_bytes"] = peak
            total = self._totals.get(d)
            if total is None:
                total = self._totals[d] = float(cuda.get_device_properties(d).total_memory)
            if total > 0:
                out[f"gpu{d}_memory_allocated_percent"] = 100.0 * allocated / total
        return out


def _counter(stats: dict[str, Any], name: str, which: str) -> float:
    """``stats[name]["all"][which]`` of ``torch.cuda.memory_stats_as_nested_dict`` (0 when absent)."""
    return float(stats.get(name, {}).get("all", {}).get(which, 0))


def install_cuda_memory(recorder: FrameworkRecorder) -> None:
    """Record this job's CUDA memory per step on ``recorder`` (once per recorder; no-op without CUDA)."""
    recorder.add_step_source(CudaMemoryProbe())
