"""SageMaker Debugger scripts run unchanged: ``import smdebug.pytorch as smd`` answered by trainspect (issue 15)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import trainspect as ts

SMDEBUG_SCRIPT = textwrap.dedent(
    """
    # A training script in smdebug's idiom, as the SageMaker examples write them.
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import smdebug.pytorch as smd
    from smdebug import modes
    from smdebug.core.collection import CollectionKeys
    from smdebug.profiler.utils import str2bool

    torch.manual_seed(0)
    torch.set_num_threads(1)

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(8, 16)
            self.fc2 = nn.Linear(16, 3)

        def forward(self, x):
            return self.fc2(F.relu(self.fc1(x)))

    def main():
        model = Net()
        hook = smd.Hook.create_from_json_file()
        hook.register_hook(model)
        loss_fn = nn.CrossEntropyLoss()
        hook.register_loss(loss_fn)
        assert smd.get_hook() is hook
        assert str2bool("True") is True and str2bool("false") is False
        assert hook.get_collection(CollectionKeys.WEIGHTS).name == "weights"
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(64, 8), torch.randint(0, 3, (64,))
        for epoch in range(2):
            hook.set_mode(modes.TRAIN)
            model.train()
            for i in range(0, 64, 16):
                opt.zero_grad()
                loss = loss_fn(model(x[i:i + 16]), y[i:i + 16])
                loss.backward()
                opt.step()
            hook.set_mode(smd.modes.EVAL)
            model.eval()
            with torch.no_grad():
                acc = (model(x).argmax(1) == y).float().mean().item()
            hook.save_scalar("epoch_accuracy", acc, sm_metric=True)
        print("trained", flush=True)

    if __name__ == "__main__":
        main()
    """
)


def _sagemaker_config(tmp_path: Path) -> Path:
    config = {
        "S3OutputPath": "s3://my-bucket/debug-output",
        "LocalPath": str(tmp_path / "opt_ml_output_tensors"),
        "HookParameters": {"save_interval": "2"},
        "CollectionConfigurations": [
            {"CollectionName": "weights"},
            {"CollectionName": "gradients", "CollectionParameters": {"save_interval": "3"}},
        ],
    }
    path = tmp_path / "debughookconfig.json"
    path.write_text(json.dumps(config))
    return path


def test_a_sagemaker_script_runs_unchanged_under_trainspect_run(tmp_path):
    (tmp_path / "train.py").write_text(SMDEBUG_SCRIPT)
    out = tmp_path / "run"
    env = {**os.environ, "SMDEBUG_CONFIG_FILE_PATH": str(_sagemaker_config(tmp_path))}
    proc = subprocess.run(
        [sys.executable, "-m", "trainspect.cli", "run", "--out", str(out), "--", sys.executable, "train.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "trained" in proc.stdout
    assert not (tmp_path / "opt_ml_output_tensors").exists()  # one run directory: trainspect run's
    assert not (tmp_path / "runs").exists()
    trial = ts.create_trial(str(out))
    assert trial.steps(mode=ts.modes.TRAIN) == list(range(8))
    assert trial.tensor("Net_fc1.weight").steps(mode=ts.modes.TRAIN) == [0, 2, 4, 6]
    assert trial.tensor("gradient/Net_fc1.weight").steps(mode=ts.modes.TRAIN) == [0, 3, 6]
    assert trial.tensor("CrossEntropyLoss_output_0").steps(mode=ts.modes.TRAIN) == list(range(8))
    assert "scalar/epoch_accuracy" in trial.tensor_names()
    manifest = json.loads((out / "trainspect.json").read_text())
    assert manifest["config"]["sagemaker"] == {"S3OutputPath": "s3://my-bucket/debug-output"}


def test_a_script_that_builds_its_own_hook_under_trainspect_run_gets_one_run(tmp_path):
    script = textwrap.dedent(
        """
        import torch, trainspect as ts
        torch.set_num_threads(1)
        model = torch.nn.Linear(4, 2)
        hook = ts.torch.Hook("my_own_dir", include_collections=["weights", "losses"],
                             save_config=ts.SaveConfig(save_interval=1))
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(4):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
            opt.step()
        hook.close()
        """
    )
    (tmp_path / "train.py").write_text(script)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainspect.cli", "run", "--out", str(out), "--", sys.executable, "train.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    assert "RunDirectoryInUse" not in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "my_own_dir").exists()
    trial = ts.create_trial(str(out))
    assert trial.steps() == [0, 1, 2, 3]
    assert trial.tensor("Linear_weight").steps() == [0, 1, 2, 3]  # the script's settings
    assert trial.tensor("CrossEntropyLoss_output_0").steps() == [0, 1, 2, 3]  # functional loss, from autolog


@pytest.fixture
def smdebug_modules():
    """Answer ``smdebug`` imports with trainspect for one test."""
    from trainspect import smdebug_compat

    assert smdebug_compat.install()
    yield
    smdebug_compat.uninstall()


def test_explicit_opt_in_and_the_trial_api(tmp_path, smdebug_modules):
    import smdebug.pytorch as smd
    from smdebug.rules.rule_invoker import invoke_rule
    from smdebug.trials import create_trial

    model = torch.nn.Linear(4, 2)
    hook = smd.Hook(
        out_dir=str(tmp_path / "run"),
        include_collections=["weights", "losses"],
        save_config=smd.SaveConfig(save_interval=1),
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        opt.zero_grad()
        model(torch.ones(2, 4)).sum().backward()
        opt.step()
    hook.close()
    trial = create_trial(str(tmp_path / "run"), range_steps=(0, 10), parallel=True)
    assert trial.steps() == [0, 1, 2]

    from smdebug.rules import invoke_rule as same

    assert same is invoke_rule

    from smdebug.rules import Rule

    class WeightsChange(Rule):
        def invoke_at_step(self, step):
            return (
                step > 0
                and not (
                    self.base_trial.tensor("Linear_weight").value(step)
                    == self.base_trial.tensor("Linear_weight").value(step - 1)
                ).all()
            )

    assert invoke_rule(WeightsChange(trial), start_step=0) == 2


def test_an_unsupported_call_names_itself_and_the_nearest_equivalent(smdebug_modules):
    from trainspect.smdebug_compat import SmdebugNotSupported

    with pytest.raises(SmdebugNotSupported, match=r"smdebug\.pytorch\.register_block .*MXNet"):
        from smdebug.pytorch import register_block  # noqa: F401
    with pytest.raises(ModuleNotFoundError):
        import smdebug.mxnet  # noqa: F401


def test_the_real_smdebug_wins_when_installed(tmp_path, monkeypatch):
    fake = tmp_path / "site" / "smdebug"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("REAL = True\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    from trainspect import smdebug_compat

    assert smdebug_compat.install() is False
    assert not smdebug_compat.installed()


def test_a_sagemaker_config_key_is_accepted_and_an_unknown_one_refused(tmp_path):
    from trainspect.exceptions import ConfigError
    from trainspect.hook_config import hook_kwargs_from_dict

    kwargs = hook_kwargs_from_dict(
        {
            "LocalPath": str(tmp_path),
            "S3OutputPath": "s3://b/p",
            "RuleConfigurations": [{"RuleParameters": {"rule_to_invoke": "ExplodingTensor", "only_nan": "True"}}],
        }
    )
    assert [type(r).__name__ for r in kwargs["rules"]] == ["ExplodingTensor"]
    with pytest.raises(ConfigError, match="(?i)s3outputpathh"):
        hook_kwargs_from_dict({"LocalPath": str(tmp_path), "S3OutputPathh": "s3://b/p"})


def test_a_subclassed_smdebug_hook_records_module_outputs_and_their_gradients(tmp_path, smdebug_modules):
    # the pattern of SageMaker's iterative-pruning example: forward_hook + module_maps + backward_hook + _write_*
    import smdebug.pytorch as smd

    class OutputsAndGradients(smd.Hook):
        def forward_hook(self, module, inputs, outputs):
            name = self.module_maps[module]
            if isinstance(module, torch.nn.Conv2d):
                outputs.register_hook(self.backward_hook(f"{name}_{module._get_name()}_output"))
            if isinstance(module, torch.nn.BatchNorm2d):
                self._write_outputs(f"{name}.running_mean", module.running_mean)
            self._write_outputs(name, outputs)
            self.last_saved_step = self.step

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 4, 3),
        torch.nn.BatchNorm2d(4),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(4 * 6 * 6, 2),
    )
    hook = OutputsAndGradients(out_dir=str(tmp_path / "run"), save_config=smd.SaveConfig(save_interval=2))
    hook.register_hook(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 1, 8, 8), torch.randint(0, 2, (8,))
    for _ in range(5):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
    assert hook.last_saved_step == 4
    hook.close()
    trial = ts.create_trial(str(tmp_path / "run"))
    grad = trial.tensor("gradient/0_Conv2d_output")
    assert grad.steps() == [0, 2, 4] and grad.value(4).shape == (8, 4, 6, 6)
    assert trial.tensor("1.running_mean_output_0").value(2).shape == (4,)
    assert trial.tensor("4_output_0").steps() == [0, 2, 4]


def test_a_custom_rule_written_for_smdebug_runs_unchanged(tmp_path, smdebug_modules):
    """The imports and the lifecycle of an smdebug custom rule (set_required_tensors, invoke_at_step, the raise)."""
    import smdebug.pytorch as smd
    from smdebug.exceptions import RuleEvaluationConditionMet, TensorUnavailable
    from smdebug.rules.rule import Rule
    from smdebug.rules.rule_invoker import invoke_rule
    from smdebug.trials import create_trial

    model = torch.nn.Linear(4, 2)
    hook = smd.Hook(
        out_dir=str(tmp_path / "run"),
        include_collections=["weights", "losses"],
        save_config=smd.SaveConfig(save_interval=1),
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(6):
        opt.zero_grad()
        loss = model(torch.ones(2, 4)).sum() * (10.0 if step == 4 else 1.0)
        loss.backward()
        opt.step()
    hook.close()
    trial = create_trial(str(tmp_path / "run"))

    class BigWeightChange(Rule):
        def __init__(self, base_trial, threshold=0.5):
            super().__init__(base_trial, action_str="")
            self.threshold = float(threshold)

        def set_required_tensors(self, step):
            if step > 0:
                self.req_tensors.add("Linear_weight", steps=[step - 1, step])

        def invoke_at_step(self, step):
            if step == 0:
                return False
            w = self.base_trial.tensor("Linear_weight")
            return float(abs(w.value(step) - w.value(step - 1)).max()) > self.threshold

    rule = BigWeightChange(trial)
    assert rule.rule_name == "BigWeightChange" and rule.trials == [trial]
    assert invoke_rule(rule, start_step=0) == 1  # the step after the tenfold gradient
    with pytest.raises(RuleEvaluationConditionMet, match="BigWeightChange at step 5") as met:
        invoke_rule(BigWeightChange(trial), start_step=0, raise_eval_cond=True)
    assert met.value.step == 5 and not met.value.end_of_rule
    assert rule.req_tensors.get_tensor_steps("Linear_weight") == [4, 5]

    class ReadsAMissingTensor(Rule):
        def set_required_tensors(self, step):
            self.req_tensors.add("no_such_tensor", steps=[step])

        def invoke_at_step(self, step):
            raise AssertionError("never reached: the missing tensor skips every step")

    with pytest.raises(TensorUnavailable):
        ReadsAMissingTensor(trial).invoke(0)
    assert invoke_rule(ReadsAMissingTensor(trial)) == 0
