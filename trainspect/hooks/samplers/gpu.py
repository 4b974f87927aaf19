"""NVIDIA GPU utilisation, memory, power and temperature through NVML (``pynvml`` from nvidia-ml-py).

Only the GPUs visible to the job are sampled (``CUDA_VISIBLE_DEVICES``, read through
:mod:`trainspect.env`), and they are numbered as the job sees them (``gpu0`` is the first visible GPU).
"""

from __future__ import annotations

import importlib
from typing import Any

from trainspect import env
from trainspect.hooks.samplers.base import Sampler

__all__ = ["GPUSampler", "GPUUnavailable", "visible_gpu_indices"]

_INSTALL_HINT = "pip install 'trainspect[gpu]' (nvidia-ml-py)"


class GPUUnavailable(RuntimeError):
    """NVML is missing or sees no GPU; the monitor skips GPU metrics."""


def visible_gpu_indices(spec: str | None, uuids: list[str]) -> list[int]:
    """Map ``CUDA_VISIBLE_DEVICES`` to NVML device indices.

    Args:
        spec: the variable's value (``None``: every device).
        uuids: the UUID of each NVML device, in NVML order.

    Returns:
        NVML indices in the job's order. As CUDA does, parsing stops at the first token that names no
        device; ``"GPU-…"`` UUID prefixes are accepted; MIG instances are not sampled separately.

    Example:
        >>> visible_gpu_indices("1,0", ["GPU-a", "GPU-b"])
        [1, 0]
    """
    if spec is None:
        return list(range(len(uuids)))
    out: list[int] = []
    for token in (t.strip() for t in spec.split(",")):
        index: int | None = None
        if token.lstrip("-").isdigit():
            index = int(token) if 0 <= int(token) < len(uuids) else None
        elif token.startswith("GPU-"):
            matches = [i for i, u in enumerate(uuids) if u.startswith(token)]
            index = matches[0] if len(matches) == 1 else None
        if index is None or index in out:
            break
        out.append(index)
    return out


class GPUSampler(Sampler):
    """Utilisation, memory, power and temperature of the visible GPUs.

    Per visible GPU ``j``: ``gpu{j}_utilization_percent``, ``gpu{j}_memory_used_bytes``,
    ``gpu{j}_memory_used_percent``, ``gpu{j}_power_watts``, ``gpu{j}_temperature_celsius``.

    Raises:
        GPUUnavailable: pynvml is not installed, NVML cannot start, or no GPU is visible.
    """

    def __init__(self) -> None:
        try:
            self._nvml: Any = importlib.import_module("pynvml")
        except ImportError:
            raise GPUUnavailable(f"pynvml is not installed: {_INSTALL_HINT}") from None
        try:
            self._nvml.nvmlInit()
            count = int(self._nvml.nvmlDeviceGetCount())
            handles = [self._nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            uuids = [_text(self._nvml.nvmlDeviceGetUUID(h)) for h in handles]
        except Exception as exc:  # NVMLError and driver errors alike
            raise GPUUnavailable(f"NVML is not usable: {exc}") from None
        order = visible_gpu_indices(env.CUDA_VISIBLE_DEVICES.get(), uuids)
        if not order:
            self._shutdown()
            raise GPUUnavailable("no GPU is visible to this job")
        self._handles = [handles[i] for i in order]
        self._unsupported: set[tuple[int, str]] = set()
        self._last: dict[str, float] = {}

    def _read(self, j: int, what: str, handle: Any) -> Any:
        if (j, what) in self._unsupported:
            return None
        nv = self._nvml
        try:
            if what == "utilization_percent":
                return float(nv.nvmlDeviceGetUtilizationRates(handle).gpu)
            if what == "memory":
                return nv.nvmlDeviceGetMemoryInfo(handle)
            if what == "power_watts":
                return float(nv.nvmlDeviceGetPowerUsage(handle)) / 1000.0
            return float(nv.nvmlDeviceGetTemperature(handle, nv.NVML_TEMPERATURE_GPU))
        except Exception:  # a metric the device does not support
            self._unsupported.add((j, what))
            return None

    def collect(self) -> None:
        """Read every metric of every visible GPU."""
        out: dict[str, float] = {}
        for j, handle in enumerate(self._handles):
            util = self._read(j, "utilization_percent", handle)
            if util is not None:
                out[f"gpu{j}_utilization_percent"] = util
            mem = self._read(j, "memory", handle)
            if mem is not None:
                out[f"gpu{j}_memory_used_bytes"] = float(mem.used)
                out[f"gpu{j}_memory_used_percent"] = 100.0 * float(mem.used) / float(mem.total or 1)
            for what in ("power_watts", "temperature_celsius"):
                value = self._read(j, what, handle)
                if value is not None:
                    out[f"gpu{j}_{what}"] = value
        self._last = out

    def aggregate(self) -> dict[str, float]:
        """The last reading."""
        return dict(self._last)

    def _shutdown(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except Exception:  # already shut down
            pass

    def close(self) -> None:
        """Shut NVML down."""
        self._shutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
