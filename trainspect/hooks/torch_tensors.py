"""Moving PyTorch tensors to the host: reductions on the device, one copy per saved tensor, one wait per device.

Devices, by :func:`device_kind`:

* ``cpu``: NumPy copies, nothing to wait for.
* ``cuda``: non-blocking copies into pinned memory on the tensor's device's current stream; :func:`record_fence`
  records one CUDA event per such stream after them, and :func:`materialize` waits for those events only (never
  ``torch.cuda.synchronize``, which waits for every stream of the current device only). The PyTorch hook reads a step's
  copies one step later (``Hook._end_step``), so the training thread does not wait for the GPU.
* any other accelerator (``mps``, ``xpu``, …): blocking copies (``Tensor.cpu()``), reductions in float32 (MPS has no
  float64); ``torch.cuda`` is never touched for them.

A sharded tensor (a DTensor, or a ``(local piece, Shard)`` pair from :mod:`~trainspect.hooks.torch_params`) is
staged as its local piece: the raw value is the piece, and the reductions asked for become the piece's
:data:`~trainspect.shard.PARTIAL_KEYS` statistics (one stacked tensor, one host copy, no collective), from which the
reader combines the full tensor's. No tensor subclass is ever copied with ``.numpy()``: a DTensor is read through
``to_local()``, any other subclass with its own dispatch raises
:class:`~trainspect.hooks.torch_placements.Unrecordable`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainspect.hooks.save_plan import TensorPlan
from trainspect.hooks.torch_placements import Unrecordable, dtensor_piece, is_dtensor
from trainspect.reductions import device_table
from trainspect.shard import PARTIAL_KEYS, Shard
from trainspect.step import ReductionKey

__all__ = [
    "Staged",
    "stage",
    "batchable",
    "stage_batch",
    "materialize",
    "record_fence",
    "device_kind",
    "reduction_dtype",
    "snapshot",
    "combine",
    "HostScalar",
    "partials_dict",
]


@dataclass
class Staged:
    """A tensor's pending host copy and device-side reductions."""

    name: str
    plan: TensorPlan
    raw: np.ndarray | torch.Tensor | None
    reductions: np.ndarray | torch.Tensor | None
    shape: tuple[int, ...]
    stream: Any = None
    """The CUDA stream the copies into ``raw`` / ``reductions`` were issued on (may still run); None: done."""
    shard: Shard | None = None
    """Where this local piece sits in the full tensor (None: it is the full tensor)."""
    partials: np.ndarray | torch.Tensor | None = None
    """A sharded piece's statistics after ``count`` (:data:`~trainspect.shard.PARTIAL_KEYS` order), being copied."""


_OPS: dict[str, Any] = device_table(
    {  # the device implementations of trainspect.reductions.NAMES
        "min": lambda x: x.min(),
        "max": lambda x: x.max(),
        "mean": lambda x: x.mean(),
        "std": lambda x: x.std(unbiased=False),
        "variance": lambda x: x.var(unbiased=False),
        "sum": lambda x: x.sum(),
        "prod": lambda x: x.prod(),
        "l1": lambda x: x.abs().sum(),
        "l2": lambda x: torch.linalg.vector_norm(x.reshape(-1), 2),
    }
)


_NUMPY_DTYPES = frozenset(
    {
        torch.float16,
        torch.float32,
        torch.float64,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.uint8,
        torch.bool,
        torch.complex64,
        torch.complex128,
    }
)


_SCALAR_DTYPES: dict[torch.dtype, np.dtype] = {
    torch.float32: np.dtype(np.float32),
    torch.float64: np.dtype(np.float64),
    torch.float16: np.dtype(np.float16),
    torch.bfloat16: np.dtype(np.float32),
    torch.int64: np.dtype(np.int64),
    torch.int32: np.dtype(np.int32),
    torch.int16: np.dtype(np.int16),
    torch.int8: np.dtype(np.int8),
    torch.uint8: np.dtype(np.uint8),
    torch.bool: np.dtype(np.bool_),
}
"""Dtypes whose CPU scalars :func:`snapshot` takes (a Python scalar is exact for each; bfloat16 as float32)."""


HostScalar = tuple[float | int | bool, np.dtype]
"""A CPU scalar tensor's value as a Python scalar with its NumPy dtype (taken by :func:`snapshot`)."""


def snapshot(t: torch.Tensor) -> HostScalar | torch.Tensor:
    """A loss's value now (a later in-place change does not reach it): a host scalar, or a detached copy.

    A CPU 0-d tensor of a dtype a Python scalar holds exactly becomes one (cheaper than a NumPy copy on the training
    thread, see ``Collector.add_scalars``); any other tensor a detached copy (a device's is read later). The scalar is
    read with ``tolist()``, which returns what ``item()`` does for a CPU 0-d tensor without releasing the GIL
    (``item()`` does, and the writer thread waiting for it takes it: ~0.3 µs per loss in place).
    """
    if t.is_cpu and t.dim() == 0:
        dtype = _SCALAR_DTYPES.get(t.dtype)
        if dtype is not None:
            return t.tolist(), dtype  # type: ignore[return-value]  # a 0-d tensor: a scalar, not a list
    return t.detach().clone()


def combine(values: list[HostScalar | torch.Tensor]) -> tuple[HostScalar | torch.Tensor, torch.Tensor | None]:
    """One step's value of a loss from its micro-batch values: (their mean, the values as a 1-d tensor).

    One value is returned as it is (no micro-batch tensor); so is the last of values that are not all scalars.
    """
    if len(values) == 1 or not all(isinstance(v, tuple) or v.numel() == 1 for v in values):
        return values[-1], None
    scalars = [v for v in values if isinstance(v, tuple)]
    if len(scalars) == len(values):
        dtype = scalars[0][1] if scalars[0][1].kind == "f" else np.dtype(np.float64)
        host = np.array([v[0] for v in scalars], dtype=dtype)
        return (host.mean().item(), host.dtype), torch.from_numpy(host)
    tensors = [torch.as_tensor(v[0]) if isinstance(v, tuple) else v.reshape(()) for v in values]
    device = (
        next(t.device for t in tensors if t.device.type != "cpu")
        if any(t.device.type != "cpu" for t in tensors)
        else torch.device("cpu")
    )
    micro = torch.stack([t.to(device) for t in tensors])
    return (micro if micro.is_floating_point() else micro.to(reduction_dtype(device.type))).mean(), micro


def device_kind(t: torch.Tensor) -> str:
    """The kind of device a tensor lives on: ``"cpu"``, ``"cuda"``, ``"mps"``, ``"xpu"``, … (``device.type``).

    Everything device-specific in capture branches on this (a stable function: GPU checks call it too).
    """
    return t.device.type


def reduction_dtype(kind: str) -> torch.dtype:
    """The dtype reductions are computed and copied in on a device kind: float64, float32 where not supported."""
    return torch.float64 if kind in ("cpu", "cuda") else torch.float32


def _reduce(t: torch.Tensor, name: str, absolute: bool, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    x = t.detach()
    if not x.is_floating_point():
        x = x.to(dtype)
    if absolute:
        x = x.abs()
    return _OPS[name](x)


def _host_copy(t: torch.Tensor, engine_owned: bool = False) -> np.ndarray | torch.Tensor:
    """A host copy: a NumPy array, or for a CUDA tensor a pinned tensor being filled asynchronously.

    ``engine_owned``: the tensor's storage belongs to a sharding engine that may resize it later (FSDP frees and
    re-allocates storages), so no NumPy array is ever made over it (that makes a storage non-resizable).
    """
    x = t.detach()
    kind = device_kind(x)
    if kind == "cpu" and x.dtype in _NUMPY_DTYPES and x.layout == torch.strided and not x.is_conj():
        if engine_owned:
            return x.clone(memory_format=torch.contiguous_format).numpy()
        return x.numpy().copy()  # the common case (losses, CPU weights) in as few calls as possible
    if kind == "cpu" and engine_owned:
        x = x.clone()
    if x.dtype == torch.bfloat16:
        x = x.float()
    if x.layout != torch.strided:
        x = x.to_dense()
    if x.is_conj():
        x = x.resolve_conj()
    if kind == "cpu":
        return x.numpy().copy()
    if kind != "cuda":
        return x.to("cpu", copy=True).numpy()  # blocking: no stream or event API is assumed for other devices
    out = _pinned_empty(x.shape, x.dtype)
    out.copy_(x, non_blocking=True)
    return out


def _pinned_empty(shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
    """Page-locked host memory for a non-blocking copy from a CUDA device."""
    return torch.empty(shape, dtype=dtype, pin_memory=True)


def _plain(tensor: torch.Tensor) -> torch.Tensor:
    """``tensor`` as a plain tensor (a Parameter's or a data-only subclass's), never a subclass with its own dispatch.

    Raises:
        Unrecordable: a tensor subclass that dispatches its own operations (not a DTensor: those are pieces).
    """
    if type(tensor).__torch_dispatch__ is not torch.Tensor.__torch_dispatch__:
        raise Unrecordable(f"a {type(tensor).__name__} (a tensor subclass trainspect cannot copy)")
    x = tensor.detach()
    return x if type(x) is torch.Tensor else x.as_subclass(torch.Tensor)


def _partials(x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A non-empty piece's statistics after ``count``, in :data:`~trainspect.shard.PARTIAL_KEYS` order, stacked."""
    x = x.detach().reshape(-1).to(dtype)
    a = x.abs()
    total, abs_total = x.sum(), a.sum()
    n = x.numel()
    return torch.stack(
        [
            total,
            x.square().sum(),
            (x - total / n).square().sum(),
            x.min(),
            x.max(),
            abs_total,
            (a - abs_total / n).square().sum(),
            a.min(),
            a.max(),
            x.prod(),
        ]
    )


def partials_dict(staged: Staged) -> dict[str, float] | None:
    """A staged piece's partial statistics (copies done), keyed by :data:`~trainspect.shard.PARTIAL_KEYS`."""
    if staged.shard is None or staged.partials is None:
        return None
    values = staged.partials.tolist()
    return {"count": float(np.prod(staged.shape)), **dict(zip(PARTIAL_KEYS[1:], values, strict=True))}


def stage(name: str, tensor: Any, plan: TensorPlan, shard: Shard | None = None) -> Staged | None:
    """Start copying what ``plan`` asks of ``tensor`` to the host (non-blocking on CUDA); None if not a tensor.

    ``shard``: ``tensor`` is a local piece of a sharded tensor (a DTensor is one by itself). An empty piece is not
    staged: the other ranks hold every element.

    Raises:
        Unrecordable: a tensor subclass that cannot be copied, or a DTensor placement with no Shard description.
    """
    if not isinstance(tensor, torch.Tensor):
        return None
    if type(tensor) is not torch.Tensor:
        if shard is None and is_dtensor(tensor):
            piece = dtensor_piece(tensor)
            if piece is None:
                return None
            tensor, shard = piece
        tensor = _plain(tensor)
    if shard is not None:
        return _stage_piece(name, tensor, plan, shard)
    kind = device_kind(tensor)
    reds = None
    if plan.reductions and tensor.numel() > 0:
        dtype = reduction_dtype(kind)
        vals = [_reduce(tensor, n, a, dtype).to(dtype) for n, a in plan.reductions]
        reds = _host_copy(torch.stack(vals))
    raw = _host_copy(tensor) if plan.raw else None
    stream = torch.cuda.current_stream(tensor.device) if kind == "cuda" else None
    return Staged(name, plan, raw, reds, tuple(tensor.shape), stream)


_BATCHED_DTYPES = _NUMPY_DTYPES - {torch.complex64, torch.complex128}  # no conjugate bit to resolve
_PLAIN_TYPES = (torch.Tensor, torch.nn.Parameter)


def batchable(tensor: Any, plan: TensorPlan, shard: Shard | None) -> bool:
    """Whether :func:`stage_batch` copies ``tensor``: a plain CPU tensor saved raw only (no reductions, no piece)."""
    return (
        shard is None
        and not plan.reductions
        and type(tensor) in _PLAIN_TYPES
        and tensor.is_cpu
        and tensor.dtype in _BATCHED_DTYPES
        and tensor.layout == torch.strided
    )


def stage_batch(items: list[tuple[str, torch.Tensor, TensorPlan]]) -> list[Staged]:
    """Stage many :func:`batchable` tensors: one copy per dtype (a ``torch.cat``), not one per tensor.

    Each value is a C-contiguous NumPy view of that copy, the same elements as :func:`stage`'s own copy (a saving
    step of a model with many small tensors costs the training thread a few calls per tensor).
    """
    by_dtype: dict[torch.dtype, list[int]] = {}
    for i, (_, tensor, _) in enumerate(items):
        by_dtype.setdefault(tensor.dtype, []).append(i)
    out: list[Any] = [None] * len(items)
    for indices in by_dtype.values():
        tensors = [items[i][1] for i in indices]
        with torch.no_grad():
            host = torch.cat([t.reshape(-1) for t in tensors]).numpy()
        start = 0
        for i, tensor in zip(indices, tensors, strict=True):
            name, _, plan = items[i]
            shape = tuple(tensor.shape)
            end = start + tensor.numel()
            out[i] = Staged(name, plan, host[start:end].reshape(shape), None, shape)
            start = end
    return out


def _stage_piece(name: str, piece: torch.Tensor, plan: TensorPlan, shard: Shard) -> Staged | None:
    """Stage a local piece: its raw value, and its partial statistics in place of reductions."""
    if piece.numel() == 0:
        return None
    kind = device_kind(piece)
    partials = None
    if plan.reductions and not piece.is_complex():
        partials = _host_copy(_partials(piece, reduction_dtype(kind)))
    raw = _host_copy(piece, engine_owned=True) if plan.raw else None
    stream = torch.cuda.current_stream(piece.device) if kind == "cuda" else None
    return Staged(name, plan, raw, None, tuple(piece.shape), stream, shard, partials)


def record_fence(staged: list[Staged]) -> list[Any]:
    """One CUDA event per stream (so per device) with copies in flight, recorded after them; none in flight: []."""
    streams = {s.stream: None for s in staged if s.stream is not None}
    events = []
    for stream in streams:
        event = torch.cuda.Event()
        event.record(stream)
        events.append(event)
    return events


def materialize(
    staged: list[Staged], fence: list[Any] | None = None
) -> list[tuple[Staged, np.ndarray | None, dict[ReductionKey, float]]]:
    """Wait for the copies in flight (the events of ``fence``, else of a fence recorded now), return host values."""
    if fence is None and any(s.stream is not None for s in staged):
        fence = record_fence(staged)
    for event in fence or ():
        event.synchronize()  # this device's copies only: never a global torch.cuda.synchronize()
    out = []
    for s in staged:
        raw, reductions = s.raw, s.reductions
        value = raw.numpy() if isinstance(raw, torch.Tensor) else raw
        reds: dict[ReductionKey, float] = {}
        if reductions is not None:
            reds = dict(zip(s.plan.reductions, reductions.tolist(), strict=True))
        out.append((s, value, reds))
    return out
