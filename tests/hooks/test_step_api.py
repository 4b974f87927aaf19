"""The public step API: ``hook.begin_step(mode)`` / ``hook.end_step()`` drive a mode's steps (issue 33).

A custom loop (or a trainer integration) that marks its steps gets exactly those steps; the modes it does not drive
stay inferred from the framework's events.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

import trainspect as ts
from trainspect.modes import ModeKeys


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))


def _hook(out: Path) -> ts.torch.Hook:
    return ts.torch.Hook(
        out, include_collections=["losses", "gradients", "weights"], save_config=ts.SaveConfig(save_interval=1)
    )


def test_driven_steps_are_the_loops_steps_whatever_the_forward_and_optimizer_events(tmp_path: Path) -> None:
    model, loss_fn = _model(), nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = _hook(tmp_path)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    seen = []
    for _ in range(3):
        hook.begin_step("train")
        losses = []
        for _ in range(3):  # three forward passes, two optimizer steps: still one driven step
            x, y = torch.randn(5, 4), torch.randn(5, 1)
            loss = loss_fn(model(x), y)
            losses.append(loss.item())
            opt.zero_grad()
            loss.backward()
        opt.step()
        opt.step()
        seen.append(losses)
        hook.end_step()
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    for step, losses in enumerate(seen):
        micro = trial.tensor("MSELoss_micro_batches").value(step, mode=ModeKeys.TRAIN)
        np.testing.assert_allclose(micro, losses, rtol=1e-6)
        assert float(trial.tensor("MSELoss_output_0").value(step, mode=ModeKeys.TRAIN)) == pytest.approx(
            np.mean(losses), rel=1e-6
        )
    assert trial.tensor("gradient/Sequential_0.weight").steps(mode=ModeKeys.TRAIN) == [0, 1, 2]


def test_a_mode_not_driven_stays_inferred(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = _hook(tmp_path)
    hook.register_module(model)
    for _ in range(2):
        hook.begin_step(ModeKeys.TRAIN)
        model.train()
        model(torch.randn(3, 4)).pow(2).mean().backward()
        opt.step()
        hook.end_step()
        model.eval()
        with torch.no_grad():
            for _ in range(3):  # each evaluation forward pass is an EVAL step (inferred)
                model(torch.randn(3, 4))
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.steps(mode=ModeKeys.EVAL) == list(range(6))


def test_end_step_then_save_scalar_joins_the_last_step_and_a_loss_between_steps_joins_the_next(tmp_path: Path) -> None:
    model, loss_fn = _model(), nn.L1Loss()
    hook = _hook(tmp_path)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    hook.begin_step("train")
    model(torch.randn(2, 4)).sum().backward()
    hook.end_step()
    hook.save_scalar("lr", 0.5)  # between steps: the step that just ended
    early = loss_fn(model(torch.ones(2, 4)), torch.zeros(2, 1))  # computed before the next step begins
    hook.begin_step("train")
    hook.end_step()
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.tensor("scalar/lr").steps() == [0]
    assert float(trial.tensor("L1Loss_output_0").value(1, mode=ModeKeys.TRAIN)) == pytest.approx(early.item())


def test_a_mode_that_names_no_mode_is_the_callers_error_and_the_hook_stays_enabled(tmp_path: Path) -> None:
    hook = _hook(tmp_path)
    hook.register_module(_model())
    with pytest.raises(ValueError, match="allowed: TRAIN, EVAL"):
        hook.begin_step("trian")
    with pytest.raises(ValueError):
        hook.set_mode("bogus")
    assert not hook.disabled
    hook.begin_step("eval")
    hook.end_step()
    hook.close()
    assert ts.create_trial(tmp_path).steps(mode=ModeKeys.EVAL) == [0]


def test_keras_hook_has_the_same_step_api(tmp_path: Path) -> None:
    import keras

    hook = ts.keras.Hook(str(tmp_path), include_collections=["losses"], save_config=ts.SaveConfig(save_interval=1))
    hook.set_model(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    for _ in range(2):
        hook.begin_step("predict")
        hook.save_scalar("seen", 1.0)
        hook.end_step()
    hook.close()
    assert ts.create_trial(tmp_path).steps(mode=ModeKeys.PREDICT) == [0, 1]
