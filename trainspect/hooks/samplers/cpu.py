"""Per-core and total CPU utilisation and I/O wait, from ``/proc/stat`` deltas (through psutil)."""

from __future__ import annotations

from typing import Any

import psutil

from trainspect.hooks.samplers.base import Sampler

__all__ = ["CPUSampler"]


def _busy_total(t: Any) -> tuple[float, float, float]:
    total = float(sum(t))
    idle = float(t.idle) + float(getattr(t, "iowait", 0.0))
    return total - idle, total, float(getattr(t, "iowait", 0.0))


class CPUSampler(Sampler):
    """``cpu{i}_utilization_percent`` per core, ``cpu_utilization_percent`` and ``cpu_iowait_percent``.

    Utilisation is the busy share of each core's time between two readings (as ``psutil.cpu_percent``
    computes it; guest time is already inside user time so it is not counted twice).
    """

    def __init__(self) -> None:
        self._prev: list[Any] | None = None
        self._last: dict[str, float] = {}
        self._keys = [f"cpu{i}_utilization_percent" for i in range(psutil.cpu_count() or 1)]

    def collect(self) -> None:
        """Read per-core times and compute utilisation since the previous reading."""
        now = psutil.cpu_times(percpu=True)
        if self._prev is None or len(self._prev) != len(now):
            self._prev = now
            self._last = {}
            return
        out: dict[str, float] = {}
        busy_sum = total_sum = iowait_sum = 0.0
        for i, (a, b) in enumerate(zip(self._prev, now, strict=False)):
            busy0, total0, io0 = _busy_total(a)
            busy1, total1, io1 = _busy_total(b)
            dt = total1 - total0
            busy = min(max(busy1 - busy0, 0.0), dt) if dt > 0 else 0.0
            out[f"cpu{i}_utilization_percent"] = 100.0 * busy / dt if dt > 0 else 0.0
            busy_sum += busy
            total_sum += max(dt, 0.0)
            iowait_sum += max(io1 - io0, 0.0)
        out["cpu_utilization_percent"] = 100.0 * busy_sum / total_sum if total_sum > 0 else 0.0
        out["cpu_iowait_percent"] = 100.0 * iowait_sum / total_sum if total_sum > 0 else 0.0
        self._prev = now
        self._last = out

    def aggregate(self) -> dict[str, float]:
        """Utilisation over the last period (0 before the second reading)."""
        if not self._last:
            zeros = dict.fromkeys(self._keys, 0.0)
            return {**zeros, "cpu_utilization_percent": 0.0, "cpu_iowait_percent": 0.0}
        return dict(self._last)
