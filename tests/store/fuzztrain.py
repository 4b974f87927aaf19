"""The small real run the mutation fuzz damages: ``python fuzztrain.py OUT_DIR``.

A tiny torch MLP trained 14 steps with weights, gradients and losses saved every step, the default rules, and the
profiler on (100 ms system samples, an operator window at step 2, a Python profile at steps 4-5).
"""

from __future__ import annotations

import sys
import time

import torch

import trainspect as ts
from trainspect.profiler import FrameworkProfile, ProfileRange


def train(out: str, steps: int = 14) -> None:
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 6), torch.nn.ReLU(), torch.nn.Linear(6, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    windows = FrameworkProfile(detailed=ProfileRange(2, 1), dataloader=None, python=ProfileRange(4, 2))
    config = ts.ProfilerConfig(system_monitor_interval_millis=100, framework_profile_params=windows)
    with ts.torch.Hook(
        out,
        include_collections=["weights", "biases", "gradients", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
        rules="default",
        profiler_config=config,
        export_tensorboard=False,
    ) as hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        x, y = torch.randn(16, 4), torch.randint(0, 3, (16,))
        for _step in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            time.sleep(0.03)  # long enough for a few system samples


if __name__ == "__main__":
    train(sys.argv[1])
