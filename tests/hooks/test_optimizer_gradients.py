"""Which gradient is recorded (issue 27, 3), in one process: read at optimizer.step(), or hooked without one.

The multi-rank cases (DDP's all-reduce, ``no_sync``, ``local_gradients``, FSDP, DeepSpeed) are in
tests/test_sharded_e2e.py.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import trainspect as ts
from trainspect import hook_settings
from trainspect.hook_config import hook_kwargs_from_dict

GRAD = "gradient/Linear_weight"


def _hook(out: Path, **kwargs) -> ts.torch.Hook:
    return ts.torch.Hook(
        out,
        include_collections=["gradients", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
        export_tensorboard=False,
        **kwargs,
    )


def _data(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(step)
    return torch.randn(6, 3, generator=gen), torch.randn(6, 1, generator=gen)


def test_a_loop_without_an_optimizer_still_records_gradients(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    seen = []
    with _hook(tmp_path / "run") as hook:
        hook.register_module(model)
        for step in range(3):
            x, y = _data(step)
            nn.functional.mse_loss(model(x), y).backward()
            seen.append(model.weight.grad.clone())
            with torch.no_grad():  # manual SGD
                for p in model.parameters():
                    p -= 0.1 * p.grad
                    p.grad = None
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor(GRAD).steps() == [0, 1, 2]
    for step, grad in enumerate(seen):
        np.testing.assert_array_equal(trial.tensor(GRAD).value(step), grad.numpy())


@pytest.mark.parametrize("local", [False, True])
def test_gradient_accumulation_records_the_accumulated_gradient_read_at_optimizer_step(tmp_path: Path, local) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    applied = []
    with _hook(tmp_path / "run", local_gradients=local) as hook:
        hook.register_module(model)
        for step in range(3):
            for micro in range(3):
                x, y = _data(10 * step + micro)
                nn.functional.mse_loss(model(x), y).backward()
            applied.append(model.weight.grad.clone())
            opt.step()
            opt.zero_grad()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.steps() == [0, 1, 2]  # one step per optimizer step
    for step, grad in enumerate(applied):
        np.testing.assert_allclose(trial.tensor(GRAD).value(step), grad.numpy(), rtol=1e-6)


def test_with_grad_scaler_the_recorded_gradient_is_unscaled_and_a_skipped_step_is_recorded(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    applied = []
    with _hook(tmp_path / "run") as hook:
        hook.register_module(model)
        for step in range(3):
            x, y = _data(step)
            if step == 1:
                x = x.clone()
                x[0, 0] = float("inf")  # an overflowing step: the scaler skips optimizer.step()
            scaler.scale(nn.functional.mse_loss(model(x), y)).backward()
            scaler.unscale_(opt)
            applied.append(model.weight.grad.clone())
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor(GRAD).steps() == [0, 1, 2]
    for step in (0, 2):  # unscaled: what the optimizer applied, not 1024 times it
        np.testing.assert_allclose(trial.tensor(GRAD).value(step), applied[step].numpy(), rtol=1e-6)
    assert not np.isfinite(trial.tensor(GRAD).value(1)).all()  # the skipped step's gradient, as the scaler saw it


def test_local_gradients_is_a_hook_argument_a_json_hook_parameter_and_a_trainspect_run_default(tmp_path) -> None:
    assert ts.torch.Hook(tmp_path / "a", dry_run=True).local_gradients is False
    assert ts.torch.Hook(tmp_path / "b", dry_run=True, local_gradients=True).local_gradients is True
    doc = {"LocalPath": str(tmp_path / "c"), "HookParameters": {"local_gradients": "true"}}
    assert hook_kwargs_from_dict(doc)["local_gradients"] is True
    assert hook_settings.defaults("pytorch")["local_gradients"] is False
    with pytest.raises(ts.exceptions.ConfigError, match="local_gradients"):
        hook_kwargs_from_dict({"LocalPath": str(tmp_path / "d"), "HookParameters": {"local_gradients": "maybe"}})


def test_an_optimizer_step_with_a_closure_records_the_gradient_the_closure_computed(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    applied = []
    with _hook(tmp_path / "run") as hook:
        hook.register_module(model)
        for step in range(3):
            x, y = _data(step)

            def closure(x: torch.Tensor = x, y: torch.Tensor = y) -> torch.Tensor:
                opt.zero_grad()
                loss = nn.functional.mse_loss(model(x), y)
                loss.backward()
                applied.append(model.weight.grad.clone())
                return loss

            opt.step(closure)  # the gradient exists only once step() has called the closure
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor(GRAD).steps() == [0, 1, 2]
    for step, grad in enumerate(applied):
        np.testing.assert_array_equal(trial.tensor(GRAD).value(step), grad.numpy())
