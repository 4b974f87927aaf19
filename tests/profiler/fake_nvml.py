"""A fake NVML (the functions of pynvml that trainspect calls) describing GPUs, MIG instances and failures."""

from __future__ import annotations

import threading
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

GIB = 2**30


class FakeNVMLError(Exception):
    """pynvml's NVMLError: the NVML return code is ``value``."""

    def __init__(self, value: int) -> None:
        super().__init__(f"NVML error {value}")
        self.value = value


GPU_IS_LOST, NOT_SUPPORTED, NOT_FOUND, UNKNOWN, LIBRARY_NOT_FOUND = 15, 3, 6, 999, 12


@dataclass
class FakeMig:
    uuid: str
    gi: int
    ci: int
    used: int = 1 * GIB
    total: int = 10 * GIB


@dataclass
class FakeGpu:
    uuid: str
    bus: str
    capability: tuple[int, int] = (8, 0)
    cores: int | None = 6912
    clock: int = 1410
    util: float = 50.0
    used: int = 2 * GIB
    total: int = 40 * GIB
    migs: list[FakeMig] = field(default_factory=list)
    procs: list[tuple[int, int]] = field(default_factory=list)  # (pid, bytes)
    samples: list[tuple[int, int]] = field(default_factory=list)  # (timestamp us, percent)


class FakeNvml:
    """Stand-in for the ``pynvml`` module; handles are ``("gpu", i)`` or ``("mig", i, k)``.

    ``fail[(name, handle)]`` is a callable returning an exception to raise (or ``None``) per call;
    ``calls`` lists every call made after ``nvmlInit``; a GPU whose index is in ``lost`` answers "GPU is lost".
    """

    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_DEVICE_MIG_ENABLE = 1
    NVML_GPU_UTILIZATION_SAMPLES = 1

    def __init__(self, gpus: list[FakeGpu], init_error: Exception | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.fail: dict[tuple[str, Any], Callable[[], Exception | None]] = {}
        self.calls: list[tuple[str, Any]] = []
        self.shutdowns = 0
        self.lost: set[int] = set()
        self.after_shutdown: list[str] = []
        self.delay_s = 0.0
        self._lock = threading.Lock()

    # --- plumbing ---------------------------------------------------------------------------------------
    def _enter(self, name: str, handle: Any = None) -> None:
        if self.shutdowns:
            self.after_shutdown.append(name)
        self.calls.append((name, handle))
        if isinstance(handle, tuple) and handle[1] in self.lost:
            raise FakeNVMLError(GPU_IS_LOST)
        rule = self.fail.get((name, handle)) or self.fail.get((name, None))
        exc = rule() if rule else None
        if exc is not None:
            raise exc
        if self.delay_s:
            threading.Event().wait(self.delay_s)
            if self.shutdowns:
                self.after_shutdown.append(name + " (shut down while inside)")

    def _gpu(self, h: Any) -> FakeGpu:
        return self.gpus[h[1]]

    def _mig(self, h: Any) -> FakeMig:
        return self.gpus[h[1]].migs[h[2]]

    def module(self) -> types.ModuleType:
        """This fake as a module, for ``sys.modules['pynvml']``."""
        mod = types.ModuleType("pynvml")
        for name in dir(self):
            if name.startswith(("nvml", "NVML")):
                setattr(mod, name, getattr(self, name))
        return mod

    # --- NVML ---------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> Any:
        self._enter("nvmlDeviceGetHandleByIndex")
        return ("gpu", i)

    def nvmlDeviceGetUUID(self, h: Any) -> bytes:
        self._enter("nvmlDeviceGetUUID", h)
        return (self._mig(h).uuid if h[0] == "mig" else self._gpu(h).uuid).encode()

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        self._enter("nvmlDeviceGetPciInfo", h)
        return types.SimpleNamespace(busId=self._gpu(h).bus.encode())

    def nvmlDeviceGetName(self, h: Any) -> str:
        self._enter("nvmlDeviceGetName", h)
        return f"Fake GPU {h[1]}"

    def nvmlDeviceGetCudaComputeCapability(self, h: Any) -> tuple[int, int]:
        self._enter("nvmlDeviceGetCudaComputeCapability", h)
        return self._gpu(h).capability

    def nvmlDeviceGetNumGpuCores(self, h: Any) -> int:
        self._enter("nvmlDeviceGetNumGpuCores", h)
        cores = self._gpu(h).cores
        if cores is None:
            raise FakeNVMLError(NOT_SUPPORTED)
        return cores

    def nvmlDeviceGetMaxClockInfo(self, h: Any, kind: int) -> int:
        self._enter("nvmlDeviceGetMaxClockInfo", h)
        return self._gpu(h).clock

    def nvmlDeviceGetMigMode(self, h: Any) -> tuple[int, int]:
        self._enter("nvmlDeviceGetMigMode", h)
        on = int(bool(self._gpu(h).migs))
        return on, on

    def nvmlDeviceGetMaxMigDeviceCount(self, h: Any) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount", h)
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: Any, k: int) -> Any:
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex", h)
        if k >= len(self._gpu(h).migs):
            raise FakeNVMLError(NOT_FOUND)
        return ("mig", h[1], k)

    def nvmlDeviceGetGpuInstanceId(self, h: Any) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId", h)
        return self._mig(h).gi

    def nvmlDeviceGetComputeInstanceId(self, h: Any) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId", h)
        return self._mig(h).ci

    def nvmlDeviceGetSamples(self, h: Any, kind: int, since: int) -> tuple[int, list[Any]]:
        self._enter("nvmlDeviceGetSamples", h)
        if h[0] == "mig":
            raise FakeNVMLError(NOT_SUPPORTED)
        fresh = [(t, v) for t, v in self._gpu(h).samples if t > since]
        if not fresh:
            raise FakeNVMLError(NOT_FOUND)
        return 1, [types.SimpleNamespace(timeStamp=t, sampleValue=types.SimpleNamespace(uiVal=v)) for t, v in fresh]

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        self._enter("nvmlDeviceGetUtilizationRates", h)
        if h[0] == "mig":
            raise FakeNVMLError(NOT_SUPPORTED)
        return types.SimpleNamespace(gpu=self._gpu(h).util, memory=0)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        self._enter("nvmlDeviceGetMemoryInfo", h)
        dev = self._mig(h) if h[0] == "mig" else self._gpu(h)
        return types.SimpleNamespace(used=dev.used, total=dev.total, free=dev.total - dev.used)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        self._enter("nvmlDeviceGetPowerUsage", h)
        if h[0] == "mig":
            raise FakeNVMLError(NOT_SUPPORTED)
        return 100_000 + 1000 * h[1]

    def nvmlDeviceGetTemperature(self, h: Any, kind: int) -> int:
        self._enter("nvmlDeviceGetTemperature", h)
        if h[0] == "mig":
            raise FakeNVMLError(NOT_SUPPORTED)
        return 60 + h[1]

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        self._enter("nvmlDeviceGetComputeRunningProcesses", h)
        procs = self._gpu(h).procs if h[0] == "gpu" else []
        return [types.SimpleNamespace(pid=p, usedGpuMemory=b) for p, b in procs]


def t4(bus: str, uuid: str, **kw: Any) -> FakeGpu:
    """A Tesla T4 (compute capability 7.5, 2560 cores, 1590 MHz)."""
    return FakeGpu(uuid, bus, capability=(7, 5), cores=2560, clock=1590, **kw)


def a100(bus: str, uuid: str, **kw: Any) -> FakeGpu:
    """An A100 (compute capability 8.0, 6912 cores, 1410 MHz)."""
    return FakeGpu(uuid, bus, capability=(8, 0), cores=6912, clock=1410, **kw)
