"""Data-parallel training on CPU (gloo) with trainspect: one run directory for every rank.

    torchrun --standalone --nproc_per_node 2 examples/ddp_train.py --out runs/ddp --steps 50

Each rank writes its own tensor and framework files (``worker_<rank>``), one system monitor runs per node, and the
manifest lists the workers. ``--include-workers all`` records tensors on every rank (default: rank 0 only).
"""

from __future__ import annotations

import argparse
import os
import signal

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainspect as ts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="runs/ddp")
    parser.add_argument("--steps", type=int, default=50)
    parser.add_argument("--include-workers", default="all", choices=["one", "all"])
    parser.add_argument("--profile", action="store_true", help="record system and framework metrics")
    parser.add_argument("--kill-rank", type=int, default=-1, help="(tests) this rank dies with SIGKILL ...")
    parser.add_argument("--kill-at", type=int, default=10, help="(tests) ... at this step")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    # The end-of-job barrier runs on a group of its own. A gloo barrier keeps the collectives still in flight on its
    # group until gloo's worker thread releases it; DDP's all-reduces, started inside backward(), carry that backward
    # pass's Python context, and a release that comes after the interpreter began to exit makes PyTorch abort the
    # process ("terminate called without an active exception"); README, "Distributed training".
    end_of_job = dist.new_group(backend="gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(rank)
    x, y = torch.randn(256, 16, generator=gen), torch.randint(0, 4, (256,), generator=gen)
    profiler = ts.ProfilerConfig(system_monitor_interval_millis=200) if args.profile else None
    hook = ts.torch.Hook(
        args.out,
        include_collections=["losses", "gradients"],
        save_config=ts.SaveConfig(save_interval=5),
        include_workers=args.include_workers,
        profiler_config=profiler,
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    for step in range(args.steps):
        idx = torch.randint(0, 256, (32,), generator=gen)
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
        if rank == args.kill_rank and step == args.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    hook.close()
    dist.barrier(group=end_of_job)  # every rank's run files are complete before rank 0 reads the run
    dist.destroy_process_group()
    if rank == 0:
        trial = ts.create_trial(args.out)
        print(f"run directory {args.out}: workers {trial.workers()}, {len(trial.steps())} steps")


if __name__ == "__main__":
    main()
