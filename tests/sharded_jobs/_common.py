"""What the sharded-training job scripts share: the model, the hook, the batches, and the values they expect.

Each script runs under ``torchrun`` (2 ranks, CPU, gloo), trains a small model for a few steps with a hook that
records weights and gradients every other step on every rank, and saves what the hook should have recorded (the full
weight before each step's forward pass, the gradient the optimizer applies) as ``expected_rank<r>.npz`` in the run
directory, computed by the script itself with the engine's own gather (``full_tensor()``, ``summon_full_params``,
``GatheredParameters``, ``safe_get_full_grad``).
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import numpy as np
import torch
from torch import nn

import trainspect as ts

STEPS = 4
SAVED = (0, 2)


class Net(nn.Module):
    """Three layers whose sizes shard unevenly over 2 ranks (7 rows: 4 + 3; 3 rows: 2 + 1)."""

    def __init__(self, sizes: tuple[int, ...] = (5, 7, 6, 3)) -> None:
        super().__init__()
        self.a = nn.Linear(sizes[0], sizes[1])
        self.b = nn.Linear(sizes[1], sizes[2])
        self.c = nn.Linear(sizes[2], sizes[3])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.tanh(self.b(torch.tanh(self.a(x)))))


def args() -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--option", default="")
    return parser.parse_args()


def rank() -> int:
    return int(os.environ.get("RANK", "0"))


def hook(out: str, include_workers: str = "all", **kwargs: Any) -> Any:
    return ts.torch.Hook(
        out,
        include_collections=["weights", "biases", "gradients", "losses"],
        include_workers=include_workers,
        save_config=ts.SaveConfig(save_interval=2),
        export_tensorboard=False,
        **kwargs,
    )


def batch(step: int, same: bool = False, features: int = 5) -> torch.Tensor:
    """This rank's batch at ``step`` (``same``: every rank's is the same, as tensor parallelism needs)."""
    gen = torch.Generator().manual_seed(1000 * step + (0 if same else 17 * (rank() + 1)))
    return torch.randn(4, features, generator=gen)


class Expected:
    """The values the hook should have recorded, saved as ``expected_rank<r>.npz`` (keys ``w/<step>/<name>``)."""

    def __init__(self) -> None:
        self.values: dict[str, np.ndarray] = {}

    def add(self, kind: str, step: int, values: dict[str, torch.Tensor]) -> None:
        if step in SAVED:
            for name, value in values.items():
                self.values[f"{kind}/{step}/{name}"] = value.detach().cpu().numpy().copy()

    def save(self, out: str) -> None:
        np.savez(os.path.join(out, f"expected_rank{rank()}.npz"), **self.values)


def train_dtensor(model: nn.Module, opt: torch.optim.Optimizer, expected: Expected, same: bool = False) -> None:
    """Train ``STEPS`` steps of a model whose parameters are DTensors, noting each step's full weights and gradients."""
    for step in range(STEPS):
        expected.add("w", step, {n: p.full_tensor() for n, p in model.named_parameters()})
        loss = model(batch(step, same=same)).pow(2).mean()
        loss.backward()
        expected.add("g", step, {n: p.grad.full_tensor() for n, p in model.named_parameters()})
        opt.step()
        opt.zero_grad()


def finish(trainspect_hook: Any, expected: Expected, out: str) -> None:
    """Close the hook, save what it should have recorded, end the process group."""
    import torch.distributed as dist

    trainspect_hook.close()
    expected.save(out)
    dist.destroy_process_group()
