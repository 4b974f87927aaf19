"""Host memory in use."""

from __future__ import annotations

import psutil

from trainspect.hooks.samplers.base import Sampler

__all__ = ["MemorySampler"]


class MemorySampler(Sampler):
    """``cpu_memory_used_bytes`` (total - available) and ``cpu_memory_used_percent``."""

    def __init__(self) -> None:
        self._last: dict[str, float] = {}

    def collect(self) -> None:
        """Read ``/proc/meminfo``."""
        vm = psutil.virtual_memory()
        self._last = {
            "cpu_memory_used_bytes": float(vm.total - vm.available),
            "cpu_memory_used_percent": float(vm.percent),
        }

    def aggregate(self) -> dict[str, float]:
        """The last reading."""
        return dict(self._last)
