"""Hugging Face Trainer: a tiny BERT from a config, gradient_accumulation_steps=2, evaluate() (issue 15)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from framework_support import EVERY_STEP, trainspect_run, with_manual_hook

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.rules.engine import evaluate


def _check(out: Path, saw: dict[str, Any]) -> None:
    trial = ts.create_trial(out)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]  # max_steps=3 optimizer steps of 2 micro-batches
    assert trial.steps(mode=ModeKeys.EVAL) == [0, 1]  # 8 samples, batches of 4
    loss = trial.tensor("loss")
    # the Trainer's loss of each optimizer step, as it logs it (rounded to 4 digits there)
    got = [float(loss.value(s, mode=ModeKeys.TRAIN)) for s in range(3)]
    np.testing.assert_allclose(got, saw["logged_losses"], atol=1e-3)
    for step in range(3):
        assert trial.tensor("loss_micro_batches").value(step, mode=ModeKeys.TRAIN).shape == (2,)
        grad = trial.tensor("gradient/BertForSequenceClassification_classifier.bias").value(step, mode=ModeKeys.TRAIN)
        np.testing.assert_allclose(grad, saw["grads"][step], rtol=1e-5, atol=1e-7)
    verdict = evaluate(trial, [ts.rules.ExplodingTensor()], write=False)[0]
    assert verdict.datapoints > 0 and verdict.status.value == "NoIssuesFound"


def test_hf_trainer_with_a_manual_hook(tmp_path: Path) -> None:
    _check(*with_manual_hook(tmp_path, "hf_trainer_train"))


def test_hf_trainer_unchanged_under_trainspect_run(tmp_path: Path) -> None:
    out, saw = trainspect_run(tmp_path, "hf_trainer_train.py", EVERY_STEP)
    _check(out, saw)
