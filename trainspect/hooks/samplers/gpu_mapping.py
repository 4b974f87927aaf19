"""Which NVML devices the job's CUDA devices are: ``CUDA_VISIBLE_DEVICES`` resolved as CUDA resolves it.

NVML numbers GPUs in PCI bus order; CUDA numbers them fastest first unless ``CUDA_DEVICE_ORDER=PCI_BUS_ID``,
and ``CUDA_VISIBLE_DEVICES`` indices refer to CUDA's numbering. The rules (docs/profiler.md, "Which GPU is
gpuN"):

* CUDA's device list is built from NVML data: ``PCI_BUS_ID`` sorts by PCI bus id; the default
  ``FASTEST_FIRST`` sorts by theoretical FP32 throughput (CUDA cores x max SM clock) when NVML gives both for
  every GPU, else by compute capability, fastest first, ties in PCI order. This approximates CUDA's
  undocumented heuristic; on a host with one GPU model the two orders are the same.
* A GPU in MIG mode is one entry of that list, standing for its first MIG instance (a CUDA process sees one).
* Tokens: an integer indexes that list; ``GPU-<uuid>`` and ``MIG-<uuid>`` match a unique UUID prefix (as
  CUDA allows); ``MIG-GPU-<uuid>/<gi>/<ci>`` names a MIG instance by GPU instance and compute instance id.
  As CUDA does, parsing stops at the first token that names no device or repeats one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from trainspect.hooks.samplers.nvml_session import NvmlSession

__all__ = ["NvmlGpu", "MigInstance", "Target", "discover", "cuda_order", "resolve_visible"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MigInstance:
    """A MIG instance of a GPU."""

    handle: Any
    uuid: str
    gpu_instance: int = -1
    compute_instance: int = -1


@dataclass(frozen=True)
class NvmlGpu:
    """A physical GPU as NVML describes it."""

    index: int
    handle: Any
    uuid: str
    pci_bus_id: str = ""
    name: str = ""
    capability: tuple[int, int] = (0, 0)
    cores: int = 0
    max_sm_clock_mhz: int = 0
    mig: tuple[MigInstance, ...] = field(default=())

    @property
    def throughput(self) -> int:
        """CUDA cores x max SM clock (0 when NVML does not give both)."""
        return self.cores * self.max_sm_clock_mhz


@dataclass(frozen=True)
class Target:
    """One device the job sees, to be sampled as ``gpu{index}``."""

    index: int
    handle: Any
    uuid: str
    gpu: NvmlGpu
    mig: MigInstance | None = None

    def describe(self) -> str:
        """``gpu0 (NVML GPU-…, PCI 0000:3b:00.0)`` for messages."""
        what = f"MIG instance {self.uuid} of {self.gpu.uuid}" if self.mig else self.uuid
        pci = f", PCI {self.gpu.pci_bus_id}" if self.gpu.pci_bus_id else ""
        return f"gpu{self.index} ({what}{pci})"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _optional(nv: NvmlSession, name: str, *args: Any) -> Any:
    try:
        return nv.call(name, *args)
    except Exception:  # optional facts: unsupported on this driver or device
        return None


def _mig_instances(nv: NvmlSession, handle: Any) -> tuple[MigInstance, ...]:
    mode = _optional(nv, "nvmlDeviceGetMigMode", handle)
    if not mode or int(mode[0]) != nv.const("NVML_DEVICE_MIG_ENABLE", 1):
        return ()
    out = []
    for i in range(int(_optional(nv, "nvmlDeviceGetMaxMigDeviceCount", handle) or 0)):
        mig = _optional(nv, "nvmlDeviceGetMigDeviceHandleByIndex", handle, i)
        if mig is None:
            continue  # an empty slot
        gi = _optional(nv, "nvmlDeviceGetGpuInstanceId", mig)
        ci = _optional(nv, "nvmlDeviceGetComputeInstanceId", mig)
        uuid = _text(nv.call("nvmlDeviceGetUUID", mig))
        out.append(MigInstance(mig, uuid, -1 if gi is None else int(gi), -1 if ci is None else int(ci)))
    return tuple(out)


def discover(nv: NvmlSession) -> list[NvmlGpu]:
    """Every GPU NVML sees, in NVML order, with what the CUDA order and the UUID matching need.

    Raises:
        Exception: NVML cannot count the GPUs or read a handle or UUID.
    """
    gpus = []
    for i in range(int(nv.call("nvmlDeviceGetCount"))):
        handle = nv.call("nvmlDeviceGetHandleByIndex", i)
        pci = _optional(nv, "nvmlDeviceGetPciInfo", handle)
        cap = _optional(nv, "nvmlDeviceGetCudaComputeCapability", handle)
        gpus.append(
            NvmlGpu(
                index=i,
                handle=handle,
                uuid=_text(nv.call("nvmlDeviceGetUUID", handle)),
                pci_bus_id=_text(getattr(pci, "busId", "")) if pci is not None else "",
                name=_text(_optional(nv, "nvmlDeviceGetName", handle) or ""),
                capability=(int(cap[0]), int(cap[1])) if cap else (0, 0),
                cores=int(_optional(nv, "nvmlDeviceGetNumGpuCores", handle) or 0),
                max_sm_clock_mhz=int(
                    _optional(nv, "nvmlDeviceGetMaxClockInfo", handle, nv.const("NVML_CLOCK_SM", 1)) or 0
                ),
                mig=_mig_instances(nv, handle),
            )
        )
    return gpus


def cuda_order(gpus: list[NvmlGpu], device_order: str | None) -> list[NvmlGpu]:
    """The GPUs in CUDA's numbering (see the module docstring).

    Example:
        >>> slow = NvmlGpu(0, 0, "GPU-a", "0000:01:00.0", capability=(7, 5), cores=2560, max_sm_clock_mhz=1590)
        >>> fast = NvmlGpu(1, 1, "GPU-b", "0000:02:00.0", capability=(8, 0), cores=6912, max_sm_clock_mhz=1410)
        >>> [g.uuid for g in cuda_order([slow, fast], None)], [g.uuid for g in cuda_order([slow, fast], "PCI_BUS_ID")]
        (['GPU-b', 'GPU-a'], ['GPU-a', 'GPU-b'])
    """
    pci = sorted(gpus, key=lambda g: (g.pci_bus_id.lower(), g.index))
    if (device_order or "").strip().upper() == "PCI_BUS_ID":
        return pci
    if all(g.throughput for g in gpus):
        return sorted(pci, key=lambda g: (-g.throughput, (-g.capability[0], -g.capability[1])))
    return sorted(pci, key=lambda g: (-g.capability[0], -g.capability[1]))


def _by_uuid_prefix(token: str, candidates: list[tuple[str, Target]]) -> Target | None:
    matches = [t for uuid, t in candidates if uuid.lower().startswith(token.lower())]
    return matches[0] if len(matches) == 1 else None


def _legacy_mig(token: str, gpus: list[NvmlGpu]) -> Target | None:
    """``MIG-GPU-<uuid>/<gi>/<ci>``, the MIG naming of drivers before R470."""
    parts = token[len("MIG-") :].split("/")
    if len(parts) != 3 or not parts[1].isdigit() or not parts[2].isdigit():
        return None
    for gpu in gpus:
        if gpu.uuid.lower() == parts[0].lower():
            for mig in gpu.mig:
                if (mig.gpu_instance, mig.compute_instance) == (int(parts[1]), int(parts[2])):
                    return Target(-1, mig.handle, mig.uuid, gpu, mig)
    return None


def _whole(gpu: NvmlGpu) -> Target:
    """A CUDA device-list entry: the GPU, or its first MIG instance in MIG mode."""
    if gpu.mig:
        return Target(-1, gpu.mig[0].handle, gpu.mig[0].uuid, gpu, gpu.mig[0])
    return Target(-1, gpu.handle, gpu.uuid, gpu)


def _token_target(token: str, ordered: list[NvmlGpu], gpus: list[NvmlGpu]) -> Target | None:
    if token.isdigit():
        return _whole(ordered[int(token)]) if int(token) < len(ordered) else None
    upper = token.upper()
    if upper.startswith("MIG-GPU-"):
        return _legacy_mig(token, gpus)
    if upper.startswith("MIG-"):
        migs = [(m.uuid, Target(-1, m.handle, m.uuid, g, m)) for g in gpus for m in g.mig]
        return _by_uuid_prefix(token, migs)
    if upper.startswith("GPU-"):
        return _by_uuid_prefix(token, [(g.uuid, _whole(g)) for g in gpus])
    return None


def resolve_visible(spec: str | None, gpus: list[NvmlGpu], device_order: str | None = None) -> list[Target]:
    """The devices the job sees, numbered as CUDA numbers them (``gpu0`` first).

    Args:
        spec: ``CUDA_VISIBLE_DEVICES`` (``None``: every device, in CUDA order).
        gpus: :func:`discover`'s result.
        device_order: ``CUDA_DEVICE_ORDER``.
    """
    ordered = cuda_order(gpus, device_order)
    if spec is None:
        chosen = [_whole(g) for g in ordered]
    else:
        chosen = []
        for token in (t.strip() for t in spec.split(",")):
            target = _token_target(token, ordered, gpus)
            if target is None or any(t.uuid == target.uuid for t in chosen):
                break
            chosen.append(target)
    return [Target(j, t.handle, t.uuid, t.gpu, t.mig) for j, t in enumerate(chosen)]
