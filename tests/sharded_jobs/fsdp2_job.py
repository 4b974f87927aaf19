"""FSDP2 (``fully_shard``) on 2 ranks; the model is registered before it is sharded (its parameters change)."""

from __future__ import annotations

import torch
import torch.distributed as dist
from _common import Expected, Net, args, finish, hook, train_dtensor
from torch.distributed.fsdp import fully_shard

import trainspect as ts


def main() -> None:
    opts = args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = Net()
    reductions = ts.ReductionConfig(
        reductions=["mean", "min", "max", "variance"],
        abs_reductions=["mean", "max"],
        norms=["l2"],
        save_raw_tensor=True,
    )
    # include_workers is left at its default ("one"): a sharded model is recorded by every rank all the same
    h = hook(opts.out, include_workers="one", reduction_config=reductions if opts.option == "reductions" else None)
    h.register_module(model)
    fully_shard(model.a)
    fully_shard(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = Expected()
    train_dtensor(model, opt, expected)
    finish(h, expected, opts.out)


if __name__ == "__main__":
    main()
