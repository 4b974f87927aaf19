"""Tiny system samplers driven by :class:`trainspect.hooks.system_monitor.SystemMonitor`.

Each sampler implements ``collect()`` (read counters now), ``aggregate() -> dict[str, float]`` (the
sample since the previous reset, keys snake_case with a unit suffix) and ``reset()``.
"""

from trainspect.hooks.samplers.base import Sampler
from trainspect.hooks.samplers.cpu import CPUSampler
from trainspect.hooks.samplers.disk import DiskSampler
from trainspect.hooks.samplers.gpu import GPUSampler, visible_gpu_indices
from trainspect.hooks.samplers.memory import MemorySampler
from trainspect.hooks.samplers.network import NetworkSampler

__all__ = [
    "Sampler",
    "CPUSampler",
    "MemorySampler",
    "DiskSampler",
    "NetworkSampler",
    "GPUSampler",
    "visible_gpu_indices",
    "default_samplers",
]


def default_samplers() -> list[Sampler]:
    """The host samplers that always work (GPU is added by the monitor when NVML is available)."""
    return [CPUSampler(), MemorySampler(), DiskSampler(), NetworkSampler()]
