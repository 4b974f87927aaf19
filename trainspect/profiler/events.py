"""Event records as smdebug's readers return them, and the mapping between metric keys and smdebug names.

Our metric keys (``cpu3_utilization_percent``) map to smdebug's ``(type, name, dimension)`` triple
(``("cpu", "cpu3", "CPUUtilization")``) and back, so rules and notebooks written for smdebug events work,
and SageMaker profiler output reads into the same arrays as trainspect's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SystemEvent", "TraceEvent", "UNITS", "unit_factor", "smdebug_names", "key_for"]

UNITS = {"s": 1.0, "seconds": 1.0, "ms": 1e3, "milliseconds": 1e3, "us": 1e6, "microseconds": 1e6, "ns": 1e9}


def unit_factor(unit: str) -> float:
    """Multiplier from seconds to ``unit`` (``"s"``, ``"ms"``, ``"us"``, ``"ns"`` or their long names).

    Raises:
        ValueError: an unknown unit.
    """
    key = str(getattr(unit, "name", unit)).lower()
    if key not in UNITS:
        raise ValueError(f"unit={unit!r}: allowed: {', '.join(UNITS)}")
    return UNITS[key]


@dataclass(frozen=True)
class SystemEvent:
    """One system metric sample (smdebug's ``ProfilerSystemEvent``); ``timestamp`` in the requested unit."""

    type: str
    name: str
    dimension: str
    value: float
    node_id: str
    timestamp: float
    key: str = ""


@dataclass(frozen=True)
class TraceEvent:
    """One framework event (smdebug's ``TraceEvent``); times in the requested unit."""

    start_time: float
    end_time: float
    event_name: str
    event_phase: str
    node_id: str = ""
    worker: str = ""
    pid: int = 0
    tid: int = 0
    event_args: dict[str, Any] = field(default_factory=dict)

    @property
    def duration(self) -> float:
        """``end_time - start_time``."""
        return self.end_time - self.start_time


_INDEXED = re.compile(r"^(cpu|gpu)(\d+)_(.+)$")
_GPU_DIMS = {
    "utilization_percent": "GPUUtilization",
    "memory_used_percent": "GPUMemoryUtilization",
    "memory_used_bytes": "GPUMemoryUsedBytes",
    "power_watts": "GPUPowerWatts",
    "temperature_celsius": "GPUTemperatureCelsius",
    "process_memory_used_bytes": "GPUProcessMemoryUsedBytes",
    "process_memory_used_percent": "GPUProcessMemoryUtilization",
}
_PLAIN = {
    "cpu_utilization_percent": ("cpu", "total", "TotalCPUUtilization"),
    "cpu_iowait_percent": ("cpu", "total", "I/OWaitPercentage"),
    "cpu_memory_used_percent": ("cpu", "MemoryUsedPercent", "Memory"),
    "cpu_memory_used_bytes": ("cpu", "MemoryUsedBytes", "Memory"),
    "disk_read_bytes_per_second": ("io", "DiskReadBytesPerSecond", "Disk"),
    "disk_write_bytes_per_second": ("io", "DiskWriteBytesPerSecond", "Disk"),
    "network_sent_bytes_per_second": ("network", "NetworkSentBytesPerSecond", "Algorithm"),
    "network_received_bytes_per_second": ("network", "NetworkReceivedBytesPerSecond", "Algorithm"),
}
_PLAIN_BACK = {(name, dim): key for key, (_t, name, dim) in _PLAIN.items()}


def smdebug_names(key: str) -> tuple[str, str, str]:
    """(type, name, dimension) of a metric key.

    Example:
        >>> smdebug_names("gpu1_memory_used_percent")
        ('gpu', 'gpu1', 'GPUMemoryUtilization')
    """
    if key in _PLAIN:
        return _PLAIN[key]
    match = _INDEXED.match(key)
    if match:
        kind, idx, rest = match.groups()
        if kind == "cpu" and rest == "utilization_percent":
            return "cpu", f"cpu{idx}", "CPUUtilization"
        if kind == "gpu" and rest in _GPU_DIMS:
            return "gpu", f"gpu{idx}", _GPU_DIMS[rest]
    return "other", key, key


def key_for(type_: str, name: str, dimension: str) -> str:
    """The metric key of an smdebug ``(type, name, dimension)`` (inverse of :func:`smdebug_names`).

    Example:
        >>> key_for("cpu", "cpu2", "CPUUtilization")
        'cpu2_utilization_percent'
    """
    m = re.match(r"^(cpu|gpu)(\d+)$", name or "")
    if dimension == "CPUUtilization" and m:
        return f"cpu{m.group(2)}_utilization_percent"
    if m and m.group(1) == "gpu":
        for rest, dim in _GPU_DIMS.items():
            if dim == dimension:
                return f"gpu{m.group(2)}_{rest}"
    if dimension == "I/OWaitPercentage":
        return "cpu_iowait_percent"
    if (name, dimension) in _PLAIN_BACK:
        return _PLAIN_BACK[(name, dimension)]
    if name == "MemoryUsedPercent":
        return "cpu_memory_used_percent"
    snake = re.sub(r"[^0-9a-zA-Z]+", "_", f"{type_}_{name}_{dimension}").strip("_").lower()
    return snake
