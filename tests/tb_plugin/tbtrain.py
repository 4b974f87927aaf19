"""A small real training job for the plugin tests: ``python tbtrain.py OUT_DIR``.

Records losses, rules="default" and the profiler (100 ms system samples, a torch.profiler window), then
evaluates every applicable rule offline (``trainspect rules``) so that profiler verdicts exist too.
"""

from __future__ import annotations

import contextlib
import io
import sys
import time

import torch

import trainspect as ts
from trainspect.cli import main as cli_main
from trainspect.profiler import FrameworkProfile


def train(out: str, steps: int = 60) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss_fn = torch.nn.CrossEntropyLoss()
    config = ts.ProfilerConfig(system_monitor_interval_millis=100, framework_profile_params=FrameworkProfile())
    with ts.torch.Hook(out, rules="default", profiler_config=config) as hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        x, y = torch.randn(256, 8), torch.randint(0, 2, (256,))
        for _step in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            time.sleep(0.02)  # a data-loading pause; keeps the job longer than a few system samples


if __name__ == "__main__":
    train(sys.argv[1])
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        cli_main(["rules", sys.argv[1], "--json"])
