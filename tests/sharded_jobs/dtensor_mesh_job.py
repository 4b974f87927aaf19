"""DTensor placements on a 1-d (4) and a 2-d (2 x 2) mesh of 4 ranks: each rank's piece as trainspect places it.

For every case the full tensor is distributed with ``distribute_tensor``; the rank saves the full tensor (from
``full_tensor()``), its local piece and the Shard ``dtensor_piece`` gives, for the test to check against each other.
"""

from __future__ import annotations

import json
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Partial, Replicate, Shard, distribute_tensor

from trainspect.hooks.torch_placements import Unrecordable, dtensor_piece

CASES = [
    ((4,), (7, 5), (Shard(0),)),
    ((4,), (3, 5), (Shard(0),)),  # the last rank's piece is empty
    ((4,), (7, 6), (Shard(1),)),
    ((4,), (5,), (Replicate(),)),
    ((2, 2), (7, 5), (Shard(0), Shard(1))),
    ((2, 2), (9, 4), (Shard(0), Shard(0))),
    ((2, 2), (7, 5), (Replicate(), Shard(0))),
    ((2, 2), (6, 5), (Shard(1), Replicate())),
    ((2, 2), (3, 3), (Partial(), Replicate())),
    ((2, 2), (5, 3), (Shard(0), Partial())),  # not supported: Unrecordable
]


def main() -> None:
    out = sys.argv[1]
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    arrays: dict[str, np.ndarray] = {}
    meta = []
    for i, (mesh_shape, shape, placements) in enumerate(CASES):
        mesh = init_device_mesh("cpu", mesh_shape)
        full = torch.arange(float(np.prod(shape))).reshape(shape) + 100 * i
        if any(isinstance(p, Partial) for p in placements):  # each rank a share of the sum along the Partial dim
            share = (mesh.get_coordinate()[placements.index(Partial())] + 1) / 3
            dt = DTensor.from_local(full * share, mesh, placements, run_check=False)
        else:
            dt = distribute_tensor(full, mesh, [Replicate()] * len(mesh_shape)).redistribute(mesh, placements)
        arrays[f"{i}/full"] = dt.full_tensor().numpy()
        try:
            piece = dtensor_piece(dt)
        except Unrecordable as exc:
            meta.append({"case": i, "unrecordable": str(exc)})
            continue
        assert piece is not None
        local, shard = piece
        arrays[f"{i}/local"] = local.numpy().copy()
        meta.append({"case": i, "shard": shard.to_dict()})
    np.savez(os.path.join(out, f"rank{rank}.npz"), **arrays)
    with open(os.path.join(out, f"rank{rank}.json"), "w") as f:
        json.dump(meta, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
