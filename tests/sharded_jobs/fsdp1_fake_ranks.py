"""Classic FSDP's flat parameters split back into the original ones, for each rank of 2, without a real job.

A "fake" process group (``torch.testing``'s: no communication) lets one process build rank 0's and then rank 1's
FSDP model, which shards the flat parameter locally; for each rank and ``use_orig_params`` the views trainspect makes
are printed as JSON lines: name, kind, offset, piece, and whether the piece equals the original parameter's slice.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: N817
from torch.testing._internal.distributed.fake_pg import FakeStore

sys.path.insert(0, str(Path(__file__).parent))
from _common import Net  # noqa: E402

from trainspect.hooks.torch_params import parameter_views  # noqa: E402


def views(rank: int, orig: bool) -> list[dict[str, object]]:
    dist.init_process_group("fake", rank=rank, world_size=2, store=FakeStore())
    torch.manual_seed(0)
    net = Net()
    full = {n: p.detach().clone() for n, p in net.named_parameters()}
    net.a = FSDP(net.a, use_orig_params=orig, device_id=torch.device("cpu"))
    model = FSDP(net, use_orig_params=orig, device_id=torch.device("cpu"))
    out = []
    for view in parameter_views(model, lambda name, why: out.append({"warning": name, "why": why})):
        piece, shard = view.weight()
        start = shard.offsets[0]
        ref = full[view.name.split("_", 1)[1]].reshape(-1)[start : start + piece.numel()]
        equal = bool(torch.equal(ref, piece))
        out.append(
            {
                "rank": rank,
                "orig": orig,
                "name": view.name,
                "layout": shard.layout,
                "start": start,
                "size": piece.numel(),
                "global": list(shard.global_shape),
                "equal": equal,
            }
        )
    dist.destroy_process_group()
    return out


if __name__ == "__main__":
    for orig in (False, True):
        for rank in (0, 1):
            for line in views(rank, orig):
                print(json.dumps(line))
