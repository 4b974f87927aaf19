"""Helpers of the MLflow tests: a free port and a real small torch training run."""

from __future__ import annotations

import socket
import time
from pathlib import Path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def train(out: Path, mlflow_run: object = None, epochs: int = 2, rules: bool = True) -> None:
    """A real small torch training run with rules and the profiler at 100 ms."""
    import torch

    import trainspect as ts
    from trainspect.rules import LossNotDecreasing, VanishingGradient

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(256, 16), torch.randint(0, 4, (256,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    hook = ts.torch.Hook(str(out), rules=[VanishingGradient(), LossNotDecreasing()] if rules else None,
                         profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
                         mlflow_run=mlflow_run)  # fmt: skip
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for _ in range(epochs):
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                time.sleep(0.03)  # a few system samples (100 ms) per epoch
