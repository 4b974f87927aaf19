"""The idioms of smdebug's own PyTorch tests and examples, answered by the compatibility layer (issue 15).

Each test writes the script the way smdebug's users do (functional losses through ``record_tensor_value``, a
collection named in ``include_collections`` and defined afterwards, reading the run right after the loop without
closing the hook, ``from smdebug.pytorch.hook import *``, configs in smdebug's older spelling) and checks what was
recorded against values taken directly from the training loop.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_smdebug_compat import smdebug_modules  # noqa: F401  (the fixture)
from torch import nn

pytestmark = pytest.mark.usefixtures("smdebug_modules")


class _ConvNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, 3)
        self.relu0 = nn.ReLU()
        self.fc = nn.Linear(4 * 6 * 6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.log_softmax(self.fc(self.relu0(self.conv1(x)).flatten(1)), dim=1)


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(0)
    return [(torch.rand(8, 1, 8, 8, generator=gen), torch.randint(0, 3, (8,), generator=gen)) for _ in range(n)]


def test_a_functional_loss_given_to_record_tensor_value_is_a_loss_at_every_step(tmp_path):
    import smdebug.pytorch as smd
    from smdebug.trials import create_trial

    model = _ConvNet()
    hook = smd.Hook(out_dir=str(tmp_path / "run"), save_config=smd.SaveConfig(save_interval=1))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    seen = []
    for x, y in _batches(5):
        opt.zero_grad()
        loss = F.nll_loss(model(x), y)
        hook.record_tensor_value("nll_loss", tensor_value=loss)
        seen.append(loss.item())
        loss.backward()
        opt.step()
    hook.close()
    smd.del_hook()

    trial = create_trial(str(tmp_path / "run"))
    assert "nll_loss_output_0" in trial.collection("losses").tensor_names
    loss = trial.tensor("nll_loss_output_0")
    assert loss.steps() == [0, 1, 2, 3, 4]
    assert [float(loss.value(s)) for s in loss.steps()] == pytest.approx(seen, rel=1e-6)
    with pytest.raises(TypeError, match="torch.Tensor"):
        hook.record_tensor_value("nll_loss", tensor_value=1.0)


def test_a_registered_loss_module_is_the_only_record_of_the_backpropagated_loss(tmp_path):
    import smdebug.pytorch as smd
    from smdebug.trials import create_trial

    model, criterion = _ConvNet(), nn.NLLLoss()
    hook = smd.Hook(out_dir=str(tmp_path / "run"), save_config=smd.SaveConfig(save_interval=1))
    hook.register_module(model)
    hook.register_loss(criterion)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _batches(3):
        opt.zero_grad()
        criterion(model(x), y).backward()
        opt.step()
    hook.close()
    trial = create_trial(str(tmp_path / "run"))
    assert trial.tensor_names() == ["NLLLoss_output_0"]
    assert trial.tensor("NLLLoss_output_0").steps() == [0, 1, 2]


def test_a_collection_defined_after_the_hook_and_a_read_before_close(tmp_path):
    from smdebug.pytorch import ReductionConfig, SaveConfig
    from smdebug.pytorch.hook import Hook
    from smdebug.trials import create_trial

    out = str(tmp_path / "run")
    hook = Hook(
        out_dir=out,
        save_config=SaveConfig(save_steps=[0, 1, 2]),
        include_collections=["weights", "ReluIn"],
        reduction_config=ReductionConfig(reductions=["max", "mean"]),
    )
    hook.get_collection("ReluIn").include(["relu0_input"])
    hook.get_collection("ReluIn").save_config = SaveConfig(save_steps=[3, 4])
    hook.get_collection("ReluIn").reduction_config = ReductionConfig(reductions=["min"], abs_reductions=["max"])
    model = _ConvNet()
    relu_inputs: list[np.ndarray] = []
    model.relu0.register_forward_hook(lambda m, args, out: relu_inputs.append(args[0].detach().numpy().copy()))
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in _batches(8):
        opt.zero_grad()
        F.nll_loss(model(x), y).backward()
        opt.step()

    trial = create_trial(out)  # no hook.close(): smdebug's scripts read the run right after the loop
    assert trial.steps() == [0, 1, 2, 3, 4]  # losses follow the hook's save steps, as in smdebug
    relu_in = trial.tensor("relu0_input_0")
    assert relu_in.steps() == [0, 3, 4]  # save_steps=[3, 4] keeps the default interval's step 0, as smdebug does
    assert relu_in.reduction_value(3, "min", abs=False) == pytest.approx(float(relu_inputs[3].min()))
    assert relu_in.reduction_value(4, "max", abs=True) == pytest.approx(float(np.abs(relu_inputs[4]).max()))
    weight = trial.tensor("_ConvNet_conv1.weight")
    assert weight.reduction_value(1, "max", abs=False) is not None
    assert not trial.job_ended
    hook._cleanup()
    trial.refresh()
    assert trial.job_ended


def test_the_module_paths_of_smdebugs_tests_and_its_older_config_spelling(tmp_path, monkeypatch):
    from smdebug.core.json_config import CONFIG_FILE_PATH_ENV_STR
    from smdebug.pytorch.collection import CollectionKeys
    from smdebug.pytorch.hook import Hook
    from smdebug.pytorch.singleton_utils import get_hook

    assert CONFIG_FILE_PATH_ENV_STR == "SMDEBUG_CONFIG_FILE_PATH"
    config = {
        "S3Path": "s3://bucket/prefix",
        "LocalPath": str(tmp_path / "run"),
        "HookParameters": {"save_all": False, "save_steps": "0, 1"},
        "CollectionConfiguration": [
            {"CollectionName": CollectionKeys.WEIGHTS},
            {"CollectionName": "fc", "CollectionParameters": {"include_regex": "fc_*"}},
        ],
    }
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    monkeypatch.setenv(CONFIG_FILE_PATH_ENV_STR, str(path))
    hook = Hook.create_from_json_file()
    assert get_hook() is hook
    assert set(hook.get_collections()) >= {"weights", "fc"}
    assert hook.get_collection("fc").include_regex == ["fc_*"]
    hook.close()
