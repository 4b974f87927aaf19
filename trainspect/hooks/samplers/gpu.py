"""NVIDIA GPU utilisation, memory, power and temperature through NVML (``pynvml`` from nvidia-ml-py).

Only the devices visible to the job are sampled, numbered as CUDA numbers them (``gpu0`` is the job's
``cuda:0``): :mod:`trainspect.hooks.samplers.gpu_mapping` resolves ``CUDA_VISIBLE_DEVICES`` and
``CUDA_DEVICE_ORDER`` to NVML handles by UUID. Failures never reach the training:

* a metric the device does not support is dropped quietly;
* any other error is retried at the next sample; after ``failure_limit`` failures in a row the metric is
  dropped with one warning naming the device;
* a device that is lost (NVML "GPU is lost") stops being sampled, with one warning naming it;
* every NVML call holds the session lock, so :meth:`GPUSampler.close` never shuts NVML down under a call.
"""

from __future__ import annotations

import importlib
import logging
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from trainspect import env
from trainspect.hooks.samplers.base import Sampler
from trainspect.hooks.samplers.gpu_mapping import NvmlGpu, Target, discover, resolve_visible
from trainspect.hooks.samplers.nvml_session import ErrorKind, FailureCounter, NvmlClosed, NvmlSession, classify

__all__ = ["GPUSampler", "GPUUnavailable", "visible_gpu_indices", "FAILURE_LIMIT"]

logger = logging.getLogger(__name__)

_INSTALL_HINT = "pip install 'trainspect[gpu]' (nvidia-ml-py)"
FAILURE_LIMIT = 5
"""Consecutive failures of one metric of one device after which it is no longer read."""
_MIG_METRICS = ("memory", "processes")
_SAMPLE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal")  # by nvmlValueType_t


class GPUUnavailable(RuntimeError):
    """NVML is missing or sees no GPU; the monitor skips GPU metrics.

    Attributes:
        expected: nothing suggests a GPU (no ``/dev/nvidiactl``): the monitor logs INFO, not a warning.
    """

    def __init__(self, message: str, expected: bool = True) -> None:
        super().__init__(message)
        self.expected = expected


def visible_gpu_indices(spec: str | None, uuids: list[str]) -> list[int]:
    """Map ``CUDA_VISIBLE_DEVICES`` to NVML indices, for GPUs known only by UUID (taken as one model).

    Example:
        >>> visible_gpu_indices("1,0", ["GPU-a", "GPU-b"])
        [1, 0]
    """
    gpus = [NvmlGpu(i, i, u, f"{i:08x}") for i, u in enumerate(uuids)]
    return [t.gpu.index for t in resolve_visible(spec, gpus)]


@dataclass
class _Device:
    target: Target
    metrics: tuple[str, ...]
    lost: bool = False
    dropped: set[str] = field(default_factory=set)
    util_seen_us: int = 0
    total_bytes: float = 0.0


def _gpu_present() -> bool:
    return os.path.exists("/dev/nvidiactl") or bool(env.CUDA_VISIBLE_DEVICES.get())


class GPUSampler(Sampler):
    """Utilisation, memory, power and temperature of the visible GPUs, and the job's share of their memory.

    Per visible device ``j``: ``gpu{j}_utilization_percent`` (mean of NVML's utilisation samples since the
    previous reading), ``gpu{j}_memory_used_bytes``, ``gpu{j}_memory_used_percent`` (whole device),
    ``gpu{j}_process_memory_used_bytes`` and ``gpu{j}_process_memory_used_percent`` (the job's processes,
    when ``job_pids`` is given), ``gpu{j}_power_watts``, ``gpu{j}_temperature_celsius``. A MIG instance gives
    its memory only (one warning says so).

    Args:
        job_pids: returns the pids of the job's processes (per-process GPU memory is summed over them).
        nvml: the ``pynvml`` module (default: imported).
        failure_limit: consecutive failures after which a metric is dropped.

    Raises:
        GPUUnavailable: pynvml is not installed, NVML cannot start, or no GPU is visible.
    """

    def __init__(
        self,
        job_pids: Callable[[], Iterable[int]] | None = None,
        nvml: Any = None,
        failure_limit: int = FAILURE_LIMIT,
    ) -> None:
        if nvml is None:
            try:
                nvml = importlib.import_module("pynvml")
            except ImportError:
                raise GPUUnavailable(f"pynvml is not installed: {_INSTALL_HINT}") from None
        try:
            self._nv = NvmlSession(nvml)
        except Exception as exc:  # NVMLError (no driver, no library, no device files) and the like
            raise GPUUnavailable(f"NVML is not usable: {exc}", expected=not _gpu_present()) from None
        try:
            gpus = discover(self._nv)
            targets = resolve_visible(env.CUDA_VISIBLE_DEVICES.get(), gpus, env.CUDA_DEVICE_ORDER.get())
        except Exception as exc:
            self._nv.close()
            raise GPUUnavailable(f"NVML cannot list the GPUs: {exc}", expected=False) from None
        if not targets:
            self._nv.close()
            raise GPUUnavailable("no GPU is visible to this job", expected=not gpus)
        self._job_pids = job_pids
        full = ("utilization", "memory", "power", "temperature") + (("processes",) if job_pids else ())
        self._devices = [_Device(t, tuple(m for m in full if t.mig is None or m in _MIG_METRICS)) for t in targets]
        self._failures = FailureCounter(failure_limit)
        self._last: dict[str, float] = {}
        self._warn_mig()

    @property
    def targets(self) -> list[Target]:
        """The sampled devices, ``gpu0`` first."""
        return [d.target for d in self._devices]

    def _warn_mig(self) -> None:
        migs = [d.target.describe() for d in self._devices if d.target.mig is not None]
        if migs:
            logger.warning(
                "trainspect: %s: NVML gives a MIG instance's memory but not its utilisation, power or "
                "temperature; only memory is recorded for it",
                ", ".join(migs),
            )

    # --- reading --------------------------------------------------------------------------------------
    def _read(self, dev: _Device, metric: str) -> dict[str, float]:
        handle, j = dev.target.handle, dev.target.index
        if metric == "utilization":
            return {f"gpu{j}_utilization_percent": self._utilization(dev)}
        if metric == "memory":
            mem = self._nv.call("nvmlDeviceGetMemoryInfo", handle)
            dev.total_bytes = float(mem.total or 0)
            return {
                f"gpu{j}_memory_used_bytes": float(mem.used),
                f"gpu{j}_memory_used_percent": 100.0 * float(mem.used) / (dev.total_bytes or 1.0),
            }
        if metric == "power":
            return {f"gpu{j}_power_watts": float(self._nv.call("nvmlDeviceGetPowerUsage", handle)) / 1000.0}
        if metric == "temperature":
            kind = self._nv.const("NVML_TEMPERATURE_GPU", 0)
            return {f"gpu{j}_temperature_celsius": float(self._nv.call("nvmlDeviceGetTemperature", handle, kind))}
        return self._process_memory(dev)

    def _utilization(self, dev: _Device) -> float:
        """Mean of NVML's utilisation samples newer than the last one seen; the current rate when none is."""
        if "samples" not in dev.dropped:
            kind = self._nv.const("NVML_GPU_UTILIZATION_SAMPLES", 1)
            try:
                vtype, samples = self._nv.call("nvmlDeviceGetSamples", dev.target.handle, kind, dev.util_seen_us)
            except NvmlClosed:
                raise
            except Exception as exc:
                if classify(exc) not in (ErrorKind.NO_SAMPLES, ErrorKind.UNSUPPORTED):
                    raise
                if classify(exc) is ErrorKind.UNSUPPORTED:
                    dev.dropped.add("samples")
                samples = []
            name = _SAMPLE_FIELDS[int(vtype)] if samples and 0 <= int(vtype) < len(_SAMPLE_FIELDS) else "uiVal"
            fresh = [s for s in samples if int(s.timeStamp) > dev.util_seen_us]
            if fresh:
                dev.util_seen_us = max(int(s.timeStamp) for s in fresh)
                return sum(float(getattr(s.sampleValue, name)) for s in fresh) / len(fresh)
        return float(self._nv.call("nvmlDeviceGetUtilizationRates", dev.target.handle).gpu)

    def _process_memory(self, dev: _Device) -> dict[str, float]:
        """GPU memory of the job's processes; nothing when NVML lists processes but none of the job's."""
        assert self._job_pids is not None
        procs = self._nv.call("nvmlDeviceGetComputeRunningProcesses", dev.target.handle)
        pids = set(self._job_pids())
        mine = [p for p in procs if int(p.pid) in pids]
        if procs and not mine:  # not using this GPU yet, or another PID namespace (a container): unknown
            return {}
        used = float(sum(int(p.usedGpuMemory or 0) for p in mine))
        j = dev.target.index
        out = {f"gpu{j}_process_memory_used_bytes": used}
        if dev.total_bytes:
            out[f"gpu{j}_process_memory_used_percent"] = 100.0 * used / dev.total_bytes
        return out

    def _failed(self, dev: _Device, metric: str, exc: Exception) -> None:
        kind = classify(exc)
        if kind is ErrorKind.LOST:
            dev.lost = True
            logger.warning(
                "trainspect: %s stopped answering (NVML: %s); its GPU metrics are no longer recorded, training goes on",
                dev.target.describe(),
                exc,
            )
        elif kind in (ErrorKind.UNSUPPORTED, ErrorKind.NO_SAMPLES):
            dev.dropped.add(metric)
            logger.debug("trainspect: %s does not give %s: %s", dev.target.describe(), metric, exc)
        elif self._failures.failed((dev.target.index, metric)):
            dev.dropped.add(metric)
            logger.warning(
                "trainspect: reading %s of %s failed %d times in a row (last: %s); it is no longer recorded",
                metric,
                dev.target.describe(),
                self._failures.limit,
                exc,
            )

    def collect(self) -> None:
        """Read every metric of every visible device (errors are counted, never raised)."""
        out: dict[str, float] = {}
        for dev in self._devices:
            for metric in dev.metrics:
                if dev.lost or metric in dev.dropped or self._nv.closed:
                    continue
                try:
                    out.update(self._read(dev, metric))
                except NvmlClosed:
                    return
                except Exception as exc:  # NVMLError and anything else a driver may raise
                    self._failed(dev, metric, exc)
                else:
                    self._failures.ok((dev.target.index, metric))
        self._last = out

    def aggregate(self) -> dict[str, float]:
        """The last reading (utilisation: averaged over the period since the previous reading)."""
        return dict(self._last)

    def close(self) -> None:
        """Shut NVML down, after a reading in progress returns (idempotent)."""
        self._nv.close()
