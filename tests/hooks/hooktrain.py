"""A tiny model trained for real, recording its own weights, gradients and losses to compare with captures."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

torch.set_num_threads(1)

LOSS = "CrossEntropyLoss_output_0"
BACKWARD = "loss"  # the loss .backward() was called on, recorded beside the registered loss module's
PARAMS = ("0.weight", "0.bias", "2.weight", "2.bias")


def tname(param: str) -> str:
    """The tensor name the hook gives a parameter of the Sequential model."""
    return f"Sequential_{param}"


@dataclass
class Recorded:
    """What the test itself saw at one step."""

    mode: str
    weights: dict[str, np.ndarray]
    loss: float
    grads: dict[str, np.ndarray] = field(default_factory=dict)
    lr: float | None = None


class Tiny:
    """An MLP 4-6-3 with SGD (momentum) and fixed data."""

    def __init__(self, seed: int = 0, lr: float = 0.1, momentum: float = 0.9) -> None:
        torch.manual_seed(seed)
        self.model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
        self.opt = torch.optim.SGD(self.model.parameters(), lr=lr, momentum=momentum)
        self.loss_fn = torch.nn.CrossEntropyLoss()
        gen = torch.Generator().manual_seed(seed + 1)
        self.x = torch.randn(8, 4, generator=gen)
        self.y = torch.randint(0, 3, (8,), generator=gen)
        self.log: list[Recorded] = []

    def register(self, hook: object) -> None:
        hook.register_module(self.model)  # type: ignore[attr-defined]
        hook.register_loss(self.loss_fn)  # type: ignore[attr-defined]

    def _weights(self) -> dict[str, np.ndarray]:
        return {n: p.detach().clone().numpy() for n, p in self.model.named_parameters()}

    def train(self, steps: int, between: object = None) -> None:
        for _ in range(steps):
            weights = self._weights()
            self.opt.zero_grad()
            loss = self.loss_fn(self.model(self.x), self.y)
            loss.backward()
            grads = {n: p.grad.detach().clone().numpy() for n, p in self.model.named_parameters() if p.grad is not None}
            lr = self.opt.param_groups[0]["lr"]
            if callable(between):
                between()
            self.opt.step()
            self.log.append(Recorded("TRAIN", weights, loss.item(), grads, lr))

    def evaluate(self, steps: int) -> None:
        with torch.no_grad():
            for _ in range(steps):
                weights = self._weights()
                loss = self.loss_fn(self.model(self.x), self.y)
                self.log.append(Recorded("EVAL", weights, loss.item()))
