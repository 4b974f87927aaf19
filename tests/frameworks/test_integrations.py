"""Trainer integrations over the public step API: Lightning's callback, Hugging Face's, accelerate's loss (issue 33)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lightning as L  # noqa: N812
import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import trainspect as ts
from trainspect.lightning import TrainspectCallback
from trainspect.modes import ModeKeys

torch.set_num_threads(1)


class Regressor(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = ((self(x) - y) ** 2).mean()  # no loss module, no functional loss: only the backward tap sees it
        self.losses.append(loss.item())
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        torch.nn.functional.l1_loss(self(x), y)  # a functional loss: recorded at the EVAL step

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self(batch[0])

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.05)


def _loader(n: int, seed: int) -> DataLoader:
    gen = torch.Generator().manual_seed(seed)
    return DataLoader(TensorDataset(torch.randn(n, 4, generator=gen), torch.randn(n, 1, generator=gen)), batch_size=2)


def _trainer(tmp_path: Path, callbacks: list[Any], accumulate: int) -> L.Trainer:
    return L.Trainer(
        accelerator="cpu",
        max_epochs=1,
        accumulate_grad_batches=accumulate,
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        enable_checkpointing=False,
        num_sanity_val_steps=0,
        default_root_dir=tmp_path / "lightning",
        callbacks=callbacks,
    )


def test_lightning_steps_are_its_optimizer_steps_with_the_loss_training_step_returned(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Regressor()
    hook = ts.torch.Hook(tmp_path / "run", include_collections=["losses"], save_config=ts.SaveConfig(save_interval=1))
    hook.register_module(model)
    mine = TrainspectCallback(hook)
    trainer = _trainer(tmp_path, [mine], accumulate=3)
    theirs = [c for c in trainer.callbacks if isinstance(c, TrainspectCallback) and c is not mine]
    assert len(theirs) == 1  # the entry point's, one per Trainer
    trainer.fit(model, _loader(14, 1), _loader(4, 2))  # 7 batches: optimizer steps after 3, 6 and 7
    hook.close()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    windows = [model.losses[0:3], model.losses[3:6], model.losses[6:7]]
    for step, window in enumerate(windows):  # Lightning divided each by 3 before backward: multiplied back
        assert float(trial.tensor("loss").value(step, mode=ModeKeys.TRAIN)) == pytest.approx(np.mean(window), 1e-6)
    assert trial.steps(mode=ModeKeys.EVAL) == [0, 1]  # two validation batches
    assert hook._driver.driven >= {ModeKeys.TRAIN, ModeKeys.EVAL}
    assert mine.hook is None and theirs[0].hook is None  # unbound at teardown
    assert hook.loss_divisor == 1.0


def test_a_hook_made_after_the_trainer_is_driven_by_the_entry_points_callback(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = Regressor()
    trainer = _trainer(tmp_path, [], accumulate=2)
    hook = ts.torch.Hook(
        tmp_path / "run", include_collections=["losses", "biases"], save_config=ts.SaveConfig(save_interval=1)
    )
    hook.register_module(model.net)  # a submodule of the trainer's module
    trainer.fit(model, _loader(8, 1))
    trainer.predict(model, _loader(6, 3))
    hook.close()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.steps(mode=ModeKeys.PREDICT) == [0, 1, 2]
    assert float(trial.tensor("loss").value(1, mode=ModeKeys.TRAIN)) == pytest.approx(
        np.mean(model.losses[2:4]), rel=1e-6
    )


def test_without_a_hook_the_callback_does_nothing_and_looks_once_per_loop(tmp_path: Path, monkeypatch) -> None:
    from trainspect.hooks.integrations import _lightning_driver

    looked = []
    monkeypatch.setattr(_lightning_driver, "hook_for", lambda module: looked.append(module))
    model = Regressor()
    trainer = _trainer(tmp_path, [], accumulate=1)
    trainer.fit(model, _loader(12, 1))  # 6 training batches
    (callback,) = [c for c in trainer.callbacks if isinstance(c, TrainspectCallback)]
    assert callback.hook is None and len(model.losses) == 6
    assert len(looked) == 2  # at setup and when the training loop started, not per batch


def test_accelerate_gradient_accumulation_records_the_scripts_loss(tmp_path: Path) -> None:
    from accelerate import Accelerator

    torch.manual_seed(0)
    accelerator = Accelerator(cpu=True, gradient_accumulation_steps=2)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = ts.torch.Hook(tmp_path, include_collections=["losses"], save_config=ts.SaveConfig(save_interval=1))
    hook.register_module(model)
    model, opt, loader = accelerator.prepare(model, opt, _loader(12, 4))
    losses = []
    for x, y in loader:
        with accelerator.accumulate(model):
            loss = ((model(x) - y) ** 2).mean()
            losses.append(loss.item())
            accelerator.backward(loss)  # divides by 2 inside
            opt.step()  # steps every second micro-batch
            opt.zero_grad()
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    for step in range(3):
        np.testing.assert_allclose(
            trial.tensor("loss_micro_batches").value(step, mode=ModeKeys.TRAIN), losses[2 * step : 2 * step + 2], 1e-6
        )
