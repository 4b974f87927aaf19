"""Zero script change: autolog() and `trainspect run` on unmodified training code."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import trainspect as ts
from trainspect.hooks import zcc

ROOT = Path(__file__).resolve().parent.parent


def _train(steps: int, module_loss: bool) -> list[float]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    crit = nn.CrossEntropyLoss()
    x, y = torch.randn(32, 6), torch.randint(0, 3, (32,))
    seen = []
    for _ in range(steps):
        opt.zero_grad()
        out = model(x)
        loss = crit(out, y) if module_loss else F.cross_entropy(out, y)
        loss.backward()
        opt.step()
        seen.append(loss.item())
    return seen


@pytest.mark.parametrize("module_loss", [False, True])
def test_autolog_records_functional_and_module_losses_once(tmp_path: Path, module_loss: bool) -> None:
    logger = ts.autolog(out_dir=tmp_path / "run")
    assert logger is not None
    try:
        expected = _train(12, module_loss)
    finally:
        logger.close()
    trial = ts.create_trial(tmp_path / "run")
    # the loss module's (or functional loss's) output, and the loss .backward() was called on (the same here)
    assert trial.tensor_names() == ["CrossEntropyLoss_output_0", "loss"]
    for name in trial.tensor_names():
        loss = trial.tensor(name)
        assert loss.steps(ts.modes.TRAIN) == list(range(12))
        got = [loss.value(s, ts.modes.TRAIN).item() for s in range(12)]
        np.testing.assert_allclose(got, expected, rtol=1e-6)
    assert getattr(F.cross_entropy, "__wrapped__", None) is None


def test_autolog_records_weights_when_configured(tmp_path: Path) -> None:
    logger = ts.autolog(
        out_dir=tmp_path / "run", include_collections=["weights", "losses"], save_config=ts.SaveConfig(save_interval=5)
    )
    assert logger is not None
    try:
        _train(11, module_loss=False)
    finally:
        logger.close()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor("Sequential_0.weight").steps(ts.modes.TRAIN) == [0, 5, 10]


class _Vae(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc, self.dec = nn.Linear(8, 2), nn.Linear(2, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dec(self.enc(x))


def test_a_submodule_called_on_its_own_is_not_a_second_model(tmp_path: Path) -> None:
    # pytorch/examples' VAE samples with model.decode(z) after each epoch: no new model, no extra step
    logger = ts.autolog(
        out_dir=tmp_path / "run", include_collections=["weights", "losses"], save_config=ts.SaveConfig(save_interval=1)
    )
    assert logger is not None
    model = _Vae()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    try:
        for _ in range(3):
            opt.zero_grad()
            F.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 8)).backward()
            opt.step()
            with torch.no_grad():
                model.dec(torch.randn(5, 2))
    finally:
        logger.close()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor_names(collection="weights") == ["_Vae_dec.weight", "_Vae_enc.weight"]
    assert trial.steps(ts.modes.TRAIN) == [0, 1, 2]


class _WithLoss(nn.Module):
    """A model that computes its loss inside its forward pass with a loss module (as Hugging Face models do)."""

    def __init__(self) -> None:
        super().__init__()
        self.body, self.crit = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3)), nn.CrossEntropyLoss()
        self.globals_inside: list[int] = []

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        from torch.nn.modules import module as module_mod

        self.globals_inside.append(len(module_mod._global_forward_pre_hooks) + len(module_mod._global_forward_hooks))
        if x.shape[0] == 1:
            raise ValueError("bad batch")
        return self.crit(self.body(x), y)


def test_a_model_runs_without_the_global_hooks_and_its_loss_module_is_recorded(tmp_path: Path) -> None:
    from torch.nn.modules import module as module_mod

    before = len(module_mod._global_forward_pre_hooks) + len(module_mod._global_forward_hooks)
    logger = ts.autolog(out_dir=tmp_path / "run")
    assert logger is not None
    torch.manual_seed(0)
    model = _WithLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 6), torch.randint(0, 3, (16,))
    seen = []
    try:
        for _ in range(4):
            opt.zero_grad()
            loss = model(x, y)
            loss.backward()
            opt.step()
            seen.append(loss.item())
        with pytest.raises(ValueError):
            model(x[:1], y[:1])  # a forward pass that raises puts the global hooks back too
        assert len(module_mod._global_forward_pre_hooks) + len(module_mod._global_forward_hooks) == before + 2
        # one module hook: autolog's global hooks report the model's passes to the hook (none of the hook's own)
        assert len(model._forward_pre_hooks) == 0 and len(model._forward_hooks) == 1
    finally:
        logger.close()
    # the global pre-hook finds the model at its first forward pass and takes the global hooks out for every pass
    assert model.globals_inside == [before] * 5
    assert len(module_mod._global_forward_pre_hooks) + len(module_mod._global_forward_hooks) == before
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor_names() == ["CrossEntropyLoss_output_0", "loss"]
    for name in trial.tensor_names():
        assert [float(v) for v in trial.tensor(name).values(ts.modes.TRAIN).values()] == seen


def test_trainspect_disable_turns_autolog_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSPECT_DISABLE", "1")
    assert ts.autolog(out_dir=tmp_path / "run") is None
    assert not (tmp_path / "run").exists()
    assert not zcc._ACTIVE


def test_trainspect_run_with_config_and_disable(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import torch, torch.nn.functional as F
        torch.manual_seed(0)
        m = torch.nn.Linear(4, 2); opt = torch.optim.SGD(m.parameters(), lr=0.1)
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        for _ in range(10):
            opt.zero_grad(); F.cross_entropy(m(x), y).backward(); opt.step()
    """)
    )
    config = tmp_path / "cfg.json"
    config.write_text(
        '{"HookParameters": {"SAVE_INTERVAL": "3"}, "CollectionConfigurations": [{"CollectionName": "weights"}]}'
    )
    exe = str(Path(sys.executable).parent / "trainspect")
    out = tmp_path / "run"
    proc = subprocess.run(
        [exe, "run", "--out", str(out), "--config", str(config), "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    trial = ts.create_trial(out)
    assert trial.tensor("Linear_weight").steps(ts.modes.TRAIN) == [0, 3, 6, 9]
    assert trial.tensor("CrossEntropyLoss_output_0").steps(ts.modes.TRAIN) == list(range(10))

    off = tmp_path / "off"
    env = {"TRAINSPECT_DISABLE": "1", "PATH": "/usr/bin:/bin"}
    proc = subprocess.run(
        [exe, "run", "--out", str(off), "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    assert not off.exists()


def test_trainspect_run_passes_the_exit_code_through(tmp_path: Path) -> None:
    script = tmp_path / "fail.py"
    script.write_text("raise SystemExit(3)\n")
    exe = str(Path(sys.executable).parent / "trainspect")
    proc = subprocess.run(
        [exe, "run", "--out", str(tmp_path / "r"), "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 3


def test_trainspect_disable_turns_the_manual_hook_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSPECT_DISABLE", "1")
    out = tmp_path / "run"
    hook = ts.torch.Hook(out, include_collections=["weights", "losses"], rules="default")
    model = nn.Linear(3, 2)
    hook.register_module(model)
    hook.register_loss(nn.MSELoss())
    model(torch.ones(1, 3)).sum().backward()
    hook.close()
    assert not out.exists()
    assert model._forward_pre_hooks == {}
