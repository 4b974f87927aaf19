"""Fixtures of the report tests: synthetic run directories and one real (small) torch run."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import synth_run  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"


@pytest.fixture(scope="session")
def synthetic_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two nodes with 4 cores and 2 GPUs each, 1000 steps, a triggered tensor rule."""
    run = tmp_path_factory.mktemp("synth") / "run"
    return synth_run.write_run(
        run,
        seconds=240,
        interval_s=0.5,
        cores=4,
        gpus=2,
        nodes=2,
        steps=1000,
        step_s=0.2,
        verdicts=synth_run.sample_verdicts(),
    )


@pytest.fixture(scope="session")
def torch_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real (small) torch training run with rules and the profiler at 100 ms; the hook writes the report."""
    import torch

    import trainspect as ts
    from trainspect.rules import LossNotDecreasing, VanishingGradient

    out = tmp_path_factory.mktemp("torch") / "run"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(512, 16), torch.randint(0, 4, (512,)))
    loader = torch.utils.data.DataLoader(data, batch_size=16)
    hook = ts.torch.Hook(
        str(out),
        rules=[VanishingGradient(), LossNotDecreasing()],
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for _ in range(3):
            for x, y in loader:
                opt.zero_grad()
                loss_fn(model(x), y).backward()
                opt.step()
                time.sleep(0.03)  # a few system samples (100 ms) per epoch
    return out


@pytest.fixture(scope="session")
def nan_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch run whose learning rate is far too high: the loss overflows to Inf/NaN within ~20 steps."""
    import torch

    import trainspect as ts
    from trainspect.rules import ExplodingTensor, LossNotDecreasing

    out = tmp_path_factory.mktemp("nan") / "nan_run"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.5)
    loss_fn = torch.nn.MSELoss()
    x, y = torch.randn(64, 8) * 10, torch.randn(64, 1)
    hook = ts.torch.Hook(
        str(out),
        save_config=ts.SaveConfig(save_interval=1),
        rules=[ExplodingTensor(), LossNotDecreasing(num_steps=5)],
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for _ in range(40):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            time.sleep(0.01)
    return out
