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
from trainspect.hooks.samplers.process import ProcessTreeSampler

__all__ = [
    "Sampler",
    "CPUSampler",
    "MemorySampler",
    "DiskSampler",
    "NetworkSampler",
    "ProcessTreeSampler",
    "GPUSampler",
    "visible_gpu_indices",
    "default_samplers",
]


def default_samplers() -> list[Sampler]:
    """The host samplers that always work.

    The monitor adds the job's :class:`ProcessTreeSampler` and, when NVML is available, the GPU sampler.
    """
    return [CPUSampler(), MemorySampler(), DiskSampler(), NetworkSampler()]
