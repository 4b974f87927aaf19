"""``torch.multiprocessing.spawn`` DDP on CPU/gloo, shaped like pytorch/examples' ddp-tutorial-series multigpu.py.

    python spawn_ddp.py OUT EXPECTED --world 2 --steps 8 --hook {after-init,before-init,inner,parent,none} --port P

Each rank writes the losses it computed to ``EXPECTED/rank<r>.json``. ``--hook none``: no trainspect call (run it
under ``trainspect run``). ``--hook inner``: the model is registered before DDP wraps it. ``--hook parent``: the
parent process builds the hook and registers the model, which ``mp.spawn`` pickles to each rank (the hook travels as
its ticket). Like the tutorial, ``destroy_process_group`` is imported by name and the hook is never
closed by the script. ``--end killed``: as Ray Train ends its workers, ``torch.distributed.destroy_process_group()``
then ``os._exit(0)`` (no exit handler runs); ``--end killed-by-name``: the same through the name imported above.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.distributed import destroy_process_group, init_process_group
from torch.nn.parallel import DistributedDataParallel as DDP


def _hook(args: argparse.Namespace) -> object:
    import trainspect as ts

    return ts.torch.Hook(args.out, include_workers="all", include_collections=["losses"])


def main(rank: int, world: int, args: argparse.Namespace, parents: torch.nn.Module | None = None) -> None:
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    hook = _hook(args) if args.hook == "before-init" else None
    init_process_group(backend="gloo", rank=rank, world_size=world)
    if args.hook in ("after-init", "inner"):
        hook = _hook(args)
    torch.manual_seed(0)
    inner = torch.nn.Linear(20, 1) if parents is None else parents
    if args.hook == "inner":
        hook.register_module(inner)  # type: ignore[union-attr]
    model = DDP(inner)
    if hook is not None and args.hook != "inner":
        hook.register_module(model)  # type: ignore[attr-defined]
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(args.steps):
        source, target = torch.randn(16, 20, generator=gen), torch.randn(16, 1, generator=gen)
        opt.zero_grad()
        loss = F.mse_loss(model(source), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    (Path(args.expected) / f"rank{rank}.json").write_text(json.dumps(losses))
    if args.end == "killed":
        torch.distributed.destroy_process_group()
        os._exit(0)
    destroy_process_group()
    if args.end == "killed-by-name":
        os._exit(0)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("expected")
    parser.add_argument("--world", type=int, default=2)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument(
        "--hook", default="after-init", choices=["after-init", "before-init", "inner", "parent", "none"]
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--end", default="exit", choices=["exit", "killed", "killed-by-name"])
    args = parser.parse_args()
    registered = None
    if args.hook == "parent":
        torch.manual_seed(0)
        registered = torch.nn.Linear(20, 1)
        _hook(args).register_module(registered)  # type: ignore[attr-defined]
    mp.spawn(main, args=(args.world, args, registered), nprocs=args.world)
