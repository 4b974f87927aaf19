"""(tests) A DDP job on CPU/gloo in which one rank is slow: in compute, in its data loader, or not at all.

    torchrun --standalone --nproc_per_node 2 tests/profiler/straggler_job.py --out DIR --slow loader --slow-rank 1

Every rank waits ``--base-ms`` in its model's forward (the device's work, equal on every rank) and loads its batches
from a DataLoader. ``--slow sleep`` adds ``--extra-ms`` to the slow rank's forward, ``--slow compute`` has it
multiply matrices for about as long (real extra compute), ``--slow loader`` makes its dataset sleep that long per
batch. ``--batchnorm`` adds a BatchNorm layer, so DDP broadcasts buffers in every forward pass (a collective in the
forward pass).
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset

import trainspect as ts


class _Work(nn.Module):
    """Waits (the device's share of the step) and, on the slow rank, does extra work."""

    def __init__(self, base_s: float, extra_s: float, real: bool) -> None:
        super().__init__()
        self.base_s, self.extra_s, self.real = base_s, extra_s, real
        self.operand = torch.randn(128, 128)
        self.rounds = _rounds_for(extra_s, self.operand) if real and extra_s > 0 else 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(self.base_s)
        if self.rounds:
            acc = self.operand
            for _ in range(self.rounds):
                acc = torch.tanh(acc @ self.operand)
            x = x + 0.0 * acc.mean()
        elif self.extra_s:
            time.sleep(self.extra_s)
        return x


def _rounds_for(seconds: float, operand: torch.Tensor) -> int:
    """How many 128x128 products take about ``seconds`` here, measured once (more under load: slower still)."""
    start, n = time.perf_counter(), 0
    acc = operand
    while time.perf_counter() - start < 0.05:
        acc = torch.tanh(acc @ operand)
        n += 1
    return max(1, int(n * seconds / 0.05))


class _Batches(Dataset):
    """Whole batches (``batch_size=None``); sleeps ``delay_s`` per batch."""

    def __init__(self, rank: int, n: int, delay_s: float) -> None:
        gen = torch.Generator().manual_seed(rank)
        self.x, self.y = torch.randn(n, 32, 16, generator=gen), torch.randint(0, 4, (n, 32), generator=gen)
        self.delay_s = delay_s

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.delay_s:
            time.sleep(self.delay_s)
        return self.x[i], self.y[i]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--slow", default="none", choices=["none", "sleep", "compute", "loader"])
    parser.add_argument("--slow-rank", type=int, default=1)
    parser.add_argument("--base-ms", type=float, default=20.0)
    parser.add_argument("--extra-ms", type=float, default=150.0)
    parser.add_argument("--batchnorm", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    end_of_job = dist.new_group(backend="gloo")  # see examples/ddp_train.py
    rank = dist.get_rank()
    slow = rank == args.slow_rank
    extra = args.extra_ms / 1000.0 if slow and args.slow in ("sleep", "compute") else 0.0
    torch.manual_seed(0)
    layers = [nn.Linear(16, 32), _Work(args.base_ms / 1000.0, extra, args.slow == "compute"), nn.ReLU()]
    layers += [nn.BatchNorm1d(32)] if args.batchnorm else []
    model = DistributedDataParallel(nn.Sequential(*layers, nn.Linear(32, 4)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    delay = args.extra_ms / 1000.0 if slow and args.slow == "loader" else 0.0
    loader = DataLoader(_Batches(rank, args.steps, delay), batch_size=None, shuffle=False)
    hook = ts.torch.Hook(args.out, include_collections=["losses"], profiler_config=ts.ProfilerConfig())
    hook.register_module(model)
    for x, y in loader:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    hook.close()
    dist.barrier(group=end_of_job)  # see examples/ddp_train.py
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
