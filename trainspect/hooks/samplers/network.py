"""Network throughput, all interfaces together."""

from __future__ import annotations

import time

import psutil

from trainspect.hooks.samplers.base import RateSampler

__all__ = ["NetworkSampler"]


class NetworkSampler(RateSampler):
    """``network_sent_bytes_per_second`` and ``network_received_bytes_per_second``."""

    def _read(self) -> tuple[float, dict[str, float]]:
        io = psutil.net_io_counters(pernic=False)
        now = time.monotonic()
        if io is None:
            return now, {"network_sent_bytes_per_second": 0.0, "network_received_bytes_per_second": 0.0}
        return now, {
            "network_sent_bytes_per_second": float(io.bytes_sent),
            "network_received_bytes_per_second": float(io.bytes_recv),
        }
