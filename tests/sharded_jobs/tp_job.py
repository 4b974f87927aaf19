"""Tensor parallelism (``parallelize_module``: ColwiseParallel, then RowwiseParallel) on a 2-rank mesh."""

from __future__ import annotations

import torch
import torch.distributed as dist
from _common import Expected, args, finish, hook, train_dtensor
from torch import nn
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(5, 8)
        self.down = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.tanh(self.up(x)))


def main() -> None:
    opts = args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    model = Mlp()
    mesh = init_device_mesh("cpu", (2,))
    parallelize_module(model, mesh, {"up": ColwiseParallel(), "down": RowwiseParallel()})
    h = hook(opts.out)
    h.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = Expected()
    train_dtensor(model, opt, expected, same=True)
    finish(h, expected, opts.out)


if __name__ == "__main__":
    main()
