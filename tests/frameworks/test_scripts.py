"""A pytorch/examples-style script (no optimizer, torch.save(model)) and a SageMaker Debugger script in smdebug's
idiom, each under ``trainspect run`` unchanged and with a hook of its own (issue 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from framework_support import EVERY_STEP, SCRIPTS, trainspect_run

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.rules.engine import evaluate


def _check_torch_save(out: Path, saw: dict[str, Any]) -> None:
    trial = ts.create_trial(out)
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(10))  # no optimizer object: one step per forward
    assert trial.steps(mode=ModeKeys.EVAL) == list(range(4))
    assert saw["loaded_equal"] and saw["loaded_hooks"] == 0  # torch.save(model) leaves trainspect behind
    for name in ("loss", "CrossEntropyLoss_output_0"):
        got = [float(v) for v in trial.tensor(name).values(mode=ModeKeys.TRAIN).values()]
        assert got == pytest.approx(saw["train_losses"], rel=1e-6)
    evals = trial.tensor("CrossEntropyLoss_output_0").values(mode=ModeKeys.EVAL)
    assert [float(v) for v in evals.values()] == pytest.approx(saw["eval_losses"], rel=1e-6)
    assert trial.tensor("loss").steps(mode=ModeKeys.EVAL) == []  # no backward pass in evaluation
    for step in range(10):
        grad = trial.tensor("gradient/Sequential_2.bias").value(step, mode=ModeKeys.TRAIN)
        np.testing.assert_allclose(grad, saw["grads"][step], rtol=1e-6)  # clipped in place: as the update used it
    verdict = evaluate(trial, [ts.rules.VanishingGradient()], write=False)[0]
    assert verdict.datapoints > 0 and verdict.status.value == "NoIssuesFound"


def test_torch_save_script_with_a_manual_hook(tmp_path: Path) -> None:
    from torch_save_train import main

    out = tmp_path / "run"
    hook = ts.torch.Hook(out, include_collections=["losses", "gradients"], save_config=ts.SaveConfig(save_interval=1))

    def register(model: Any, criterion: Any) -> None:
        hook.register_module(model)
        hook.register_loss(criterion)

    try:
        saw = main(tmp_path / "result.json", on_model=register)
    finally:
        hook.close()
    _check_torch_save(out, saw)


def test_torch_save_script_unchanged_under_trainspect_run(tmp_path: Path) -> None:
    out, saw = trainspect_run(tmp_path, "torch_save_train.py", EVERY_STEP)
    _check_torch_save(out, saw)


SAGEMAKER_CONFIG = {
    "S3OutputPath": "s3://bucket/debug-output",
    "LocalPath": "",
    "HookParameters": {"save_interval": "1"},
    "CollectionConfigurations": [{"CollectionName": "gradients"}, {"CollectionName": "losses"}],
}


def _check_sagemaker(out: Path, saw: dict[str, Any], job_hook: bool) -> None:
    trial = ts.create_trial(out)
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(8))
    assert trial.steps(mode=ModeKeys.EVAL) == list(range(4))
    got = [float(v) for v in trial.tensor("CrossEntropyLoss_output_0").values(mode=ModeKeys.TRAIN).values()]
    assert got == pytest.approx(saw["train_losses"], rel=1e-6)
    if job_hook:  # trainspect run's hook also records the backpropagated loss as `loss`
        assert [float(v) for v in trial.tensor("loss").values(mode=ModeKeys.TRAIN).values()] == pytest.approx(got)
    else:  # a bare smdebug hook records the registered loss module's output once, as smdebug does
        assert "loss" not in trial.tensor_names()
    evals = trial.tensor("CrossEntropyLoss_output_0").values(mode=ModeKeys.EVAL)
    assert [float(v) for v in evals.values()] == pytest.approx(saw["eval_losses"], rel=1e-6)
    for step in range(8):
        grad = trial.tensor("gradient/Net_fc2.bias").value(step, mode=ModeKeys.TRAIN)
        np.testing.assert_allclose(grad, saw["grads"][step], rtol=1e-6)
    # save_scalar after each evaluation joins the last EVAL step; it opens none
    assert trial.tensor("scalar/val_accuracy").steps(mode=ModeKeys.EVAL) == [1, 3]
    verdict = evaluate(trial, [ts.rules.LossNotDecreasing(num_steps=2, mode="TRAIN")], write=False)[0]
    assert verdict.datapoints > 0 and verdict.status.value in ("NoIssuesFound", "IssuesFound")


def test_sagemaker_script_with_its_own_hook(tmp_path: Path) -> None:
    config, out = tmp_path / "debughookconfig.json", tmp_path / "run"
    config.write_text(json.dumps({**SAGEMAKER_CONFIG, "LocalPath": str(out)}))
    # as on SageMaker: the script's own smdebug hook, from the config SageMaker writes; no trainspect run
    code = (
        "import sys, runpy, trainspect.smdebug_compat as c; c.install(); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    env = {
        **os.environ,
        "SMDEBUG_CONFIG_FILE_PATH": str(config),
        "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2]), os.environ.get("PYTHONPATH", "")]),
    }
    result = tmp_path / "result.json"
    proc = subprocess.run(
        [sys.executable, "-c", code, str(SCRIPTS / "sagemaker_train.py"), str(result)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check_sagemaker(out, json.loads(result.read_text()), job_hook=False)


def test_sagemaker_script_unchanged_under_trainspect_run(tmp_path: Path) -> None:
    out, saw = trainspect_run(tmp_path, "sagemaker_train.py", {**SAGEMAKER_CONFIG, "LocalPath": str(tmp_path / "run")})
    _check_sagemaker(out, saw, job_hook=True)
