"""Event records as smdebug's readers return them, and the mapping between metric keys and smdebug names.

Our metric keys (``cpu3_utilization_percent``) map to smdebug's ``(type, name, dimension)`` triple
(``("cpu", "cpu3", "CPUUtilization")``) and back, so rules and notebooks written for smdebug events work,
and SageMaker profiler output reads into the same arrays as trainspect's own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from trainspect.profiler.metrics import CATALOGUE

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


def smdebug_names(key: str) -> tuple[str, str, str]:
    """(type, name, dimension) of a metric key (declared in :mod:`trainspect.profiler.metrics`).

    Example:
        >>> smdebug_names("gpu1_memory_used_percent")
        ('gpu', 'gpu1', 'GPUMemoryUtilization')
        >>> smdebug_names("my_metric")
        ('other', 'my_metric', 'my_metric')
    """
    names = CATALOGUE.describe(key).smdebug
    return names if names is not None else ("other", key, key)


def key_for(type_: str, name: str, dimension: str) -> str:
    """The metric key of an smdebug ``(type, name, dimension)`` (inverse of :func:`smdebug_names`).

    Example:
        >>> key_for("cpu", "cpu2", "CPUUtilization")
        'cpu2_utilization_percent'
        >>> key_for("io", "Lustre", "Read MB")
        'io_lustre_read_mb'
    """
    key = CATALOGUE.key_for_smdebug(type_, name, dimension)
    if key is not None:
        return key
    if dimension == "I/OWaitPercentage":
        return "cpu_iowait_percent"
    if name == "MemoryUsedPercent":
        return "cpu_memory_used_percent"
    return re.sub(r"[^0-9a-zA-Z]+", "_", f"{type_}_{name}_{dimension}").strip("_").lower()
