"""A small real PyTorch training loop for the object-store tests (also run as a script by the two-node test)."""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import torch

import trainspect as ts
from trainspect.torch import Hook


class Net(torch.nn.Module):
    def __init__(self, width: int = 16) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(8, width)
        self.fc2 = torch.nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class Job:
    """A model, its optimizer and a hook recording every step into ``out`` (a URL)."""

    def __init__(self, out: str, width: int = 16, seed: int = 0, **hook_kwargs: Any) -> None:
        torch.manual_seed(seed)
        self.model = Net(width)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)
        hook_kwargs.setdefault("save_config", ts.SaveConfig(save_interval=1))
        hook_kwargs.setdefault("include_collections", ["weights", "gradients", "losses"])
        self.hook = Hook(out, **hook_kwargs)
        self.hook.register_module(self.model)
        self.hook.register_loss(torch.nn.MSELoss())
        self.weights: list[np.ndarray] = []  # fc1.weight as each step saw it
        self.losses: list[float] = []

    def train(self, steps: int) -> None:
        for _ in range(steps):
            x = torch.randn(32, 8)
            self.weights.append(self.model.fc1.weight.detach().numpy().copy())
            self.opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self.model(x), x[:, :1] * 2)
            loss.backward()
            self.opt.step()
            self.losses.append(float(loss.detach()))


if __name__ == "__main__":  # python _train.py URL STEPS: one rank of a job (RANK, WORLD_SIZE from the environment)
    job = Job(sys.argv[1], include_workers="all")
    job.train(int(sys.argv[2]))
    job.hook.close()
