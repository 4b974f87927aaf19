"""One DDP job (run under torchrun): prints rank 0's median step time, with or without trainspect."""

from __future__ import annotations

import argparse
import statistics
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

import trainspect as ts


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default="")
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    end_of_job = dist.new_group(backend="gloo")  # see examples/ddp_train.py: no barrier on DDP's group at exit
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 10)))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    batches = [(torch.randn(64, 784), torch.randint(0, 10, (64,))) for _ in range(16)]
    hook = None
    if args.out:
        hook = ts.torch.Hook(args.out)
        hook.register_module(model)
        hook.register_loss(loss_fn)
    times = []
    for step in range(args.steps):
        x, y = batches[step % 16]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        times.append(time.perf_counter() - t0)
    if hook is not None:
        hook.close()
    dist.barrier(group=end_of_job)
    if dist.get_rank() == 0:
        print(f"STEP_MEDIAN {statistics.median(times[20:]):.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
