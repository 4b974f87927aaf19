"""PyTorch Lightning: fit with accumulate_grad_batches=2, validate, predict, checkpoint save/restore (issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from framework_support import EVERY_STEP, trainspect_run, with_manual_hook

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.rules.engine import evaluate


def _check(out: Path, saw: dict[str, Any]) -> None:
    trial = ts.create_trial(out)
    # 2 epochs x 6 batches, 2 micro-batches per optimizer step: 6 TRAIN steps; 2 x 2 + 2 EVAL; 3 PREDICT
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(6))
    assert trial.steps(mode=ModeKeys.EVAL) == list(range(6))
    assert trial.steps(mode=ModeKeys.PREDICT) == [0, 1, 2]
    assert saw["predictions"] == 3 and saw["restored_equal"] and "final.ckpt" in saw["checkpoints"]
    micro = np.array(saw["train_losses"]).reshape(6, 2)
    loss = trial.tensor("loss")  # training_step's loss, not Lightning's loss / accumulate_grad_batches
    assert loss.steps(mode=ModeKeys.TRAIN) == list(range(6))
    for step in range(6):
        np.testing.assert_allclose(
            trial.tensor("loss_micro_batches").value(step, mode=ModeKeys.TRAIN), micro[step], rtol=1e-6
        )
        assert float(loss.value(step, mode=ModeKeys.TRAIN)) == pytest.approx(micro[step].mean(), rel=1e-6)
        grad = trial.tensor("gradient/Regressor_net.2.bias").value(step, mode=ModeKeys.TRAIN)
        np.testing.assert_allclose(grad, saw["grads"][step], rtol=1e-6)
    # validation_step's functional loss, recorded with a manual hook too
    assert trial.tensor("MSELoss_output_0").steps(mode=ModeKeys.EVAL) == list(range(6))
    verdict = evaluate(trial, [ts.rules.LossNotDecreasing(num_steps=2, mode="TRAIN")], write=False)[0]
    assert verdict.datapoints > 0 and verdict.status.value in ("NoIssuesFound", "IssuesFound")
    assert "loss" in trial.tensor_names(collection="losses")


def test_lightning_with_a_manual_hook(tmp_path: Path) -> None:
    _check(*with_manual_hook(tmp_path, "lightning_train"))


def test_lightning_unchanged_under_trainspect_run(tmp_path: Path) -> None:
    out, saw = trainspect_run(tmp_path, "lightning_train.py", EVERY_STEP)
    _check(out, saw)
