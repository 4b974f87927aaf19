"""Where a DTensor's local piece sits in its full tensor: DTensor placements as a :class:`~trainspect.shard.Shard`.

FSDP2 (``fully_shard``) and tensor parallelism (``parallelize_module``) make parameters DTensors: each rank holds
``to_local()`` of a tensor laid out over a device mesh by one placement per mesh dimension. :func:`dtensor_piece`
returns that local piece with its Shard, computed from the rank's mesh coordinate alone (no collective):

* ``Shard(d)`` splits dimension ``d`` the way ``torch.chunk`` does (chunks of ``ceil(n / k)``, the last ones
  shorter or empty); several mesh dimensions sharding the same tensor dimension split it again, in mesh order.
* ``Replicate()``: every rank along that mesh dimension holds the same piece; those whose coordinate is not 0 record
  a ``replica``.
* ``Partial("sum")``: the full tensor is the element-wise sum of the ranks' pieces (layout ``partial_sum``).
* Anything else (``_StridedShard``, a ``Partial`` of another reduction, ``Partial`` beside ``Shard``) has no
  description here: :class:`Unrecordable` says which, and the tensor is not recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from trainspect.shard import Shard

__all__ = ["Unrecordable", "Placement", "block_layout", "dtensor_piece", "is_dtensor", "placements_of"]

_DTensor: Any = None
try:  # torch.distributed is not built into every torch (some mobile and Windows builds)
    from torch.distributed.tensor import DTensor as _DTensor
except ImportError:  # pragma: no cover - every build the tests run on has it
    pass


class Unrecordable(ValueError):
    """A tensor that trainspect cannot read or place (a message naming why); it is skipped with one warning."""


Placement = tuple[str, int]
"""A placement trainspect understands: ``("shard", dim)``, ``("replicate", 0)`` or ``("partial", 0)`` (a sum)."""


def is_dtensor(t: Any) -> bool:
    """Whether ``t`` is a ``torch.distributed.tensor.DTensor``."""
    return _DTensor is not None and isinstance(t, _DTensor)


def placements_of(placements: Sequence[Any]) -> tuple[Placement, ...]:
    """DTensor placements in :data:`Placement` form.

    Raises:
        Unrecordable: a placement with no such form (``_StridedShard``, a ``Partial`` that is not a sum).
    """
    out: list[Placement] = []
    for p in placements:
        kind = type(p).__name__
        if kind == "Shard":  # not isinstance: _StridedShard is a Shard subclass with another layout
            out.append(("shard", int(p.dim)))
        elif kind == "Replicate":
            out.append(("replicate", 0))
        elif kind == "Partial" and getattr(p, "reduce_op", "sum") == "sum":
            out.append(("partial", 0))
        else:
            raise Unrecordable(f"placement {p} is not supported")
    return tuple(out)


def _chunk(length: int, chunks: int, index: int) -> tuple[int, int]:
    """(start, size) of chunk ``index`` of ``torch.chunk(range(length), chunks)`` (size 0 past the last one)."""
    size = -(-length // chunks) if length else 0
    start = min(size * index, length)
    return start, max(0, min(length, start + size) - start)


def block_layout(
    global_shape: Sequence[int], mesh_shape: Sequence[int], coordinate: Sequence[int], placements: Sequence[Placement]
) -> tuple[tuple[int, ...], tuple[int, ...], bool, bool]:
    """Where the piece of the rank at ``coordinate`` sits: (offsets, local shape, replica, partial sum).

    Args:
        global_shape: the full tensor's shape.
        mesh_shape: the device mesh's shape (one size per mesh dimension).
        coordinate: this rank's coordinate in the mesh.
        placements: one :data:`Placement` per mesh dimension.

    Raises:
        Unrecordable: ``partial`` beside ``shard`` (no layout describes a partial block).

    Example:
        >>> block_layout((7, 3), (2,), (1,), [("shard", 0)])
        ((4, 0), (3, 3), False, False)
    """
    ndim = len(global_shape)
    offsets, sizes = [0] * ndim, list(global_shape)
    replica = partial = sharded = False
    for size, coord, (kind, dim) in zip(mesh_shape, coordinate, placements, strict=True):
        if kind == "shard":
            d = dim % ndim if ndim else 0
            start, sizes[d] = _chunk(sizes[d], size, coord)
            offsets[d] += start
            sharded = True
        elif kind == "replicate":
            replica = replica or coord != 0
        else:
            partial = True
    if partial and sharded:
        raise Unrecordable("a Partial placement beside Shard is not supported")
    return tuple(offsets), tuple(sizes), replica, partial


def dtensor_piece(t: Any) -> tuple[torch.Tensor, Shard] | None:
    """A DTensor's local piece and its Shard; None when this rank holds none of it (not in its mesh).

    Raises:
        Unrecordable: a placement :func:`placements_of` does not describe, or a local piece whose shape is not the
            one the placements give.
    """
    mesh = t.device_mesh
    coordinate = mesh.get_coordinate()
    if coordinate is None:
        return None
    text = f"DTensor mesh {tuple(mesh.shape)} [{', '.join(str(p) for p in t.placements)}]"
    try:
        placements = placements_of(t.placements)
        offsets, local_shape, replica, partial = block_layout(tuple(t.shape), tuple(mesh.shape), coordinate, placements)
    except Unrecordable as exc:
        raise Unrecordable(f"{exc} ({text})") from None
    local = t.to_local()
    if tuple(local.shape) != local_shape:
        raise Unrecordable(f"local piece {tuple(local.shape)} is not the {local_shape} its placements give ({text})")
    layout = "partial_sum" if partial else "block"
    return local, Shard(tuple(t.shape), offsets, layout, replica, text)
