"""Disk read and write throughput, all disks together."""

from __future__ import annotations

import time

import psutil

from trainspect.hooks.samplers.base import RateSampler

__all__ = ["DiskSampler"]


class DiskSampler(RateSampler):
    """``disk_read_bytes_per_second`` and ``disk_write_bytes_per_second``."""

    def _read(self) -> tuple[float, dict[str, float]]:
        io = psutil.disk_io_counters(perdisk=False)
        now = time.monotonic()
        if io is None:
            return now, {"disk_read_bytes_per_second": 0.0, "disk_write_bytes_per_second": 0.0}
        return now, {
            "disk_read_bytes_per_second": float(io.read_bytes),
            "disk_write_bytes_per_second": float(io.write_bytes),
        }
