"""Where the first NaN/Inf came from: real small models whose origin is known, each trained under a hook.

Each case builds the problem into one place (a layer, a step) and asserts the finding names that module or
parameter and that step; the ExplodingTensor verdict (live and offline) carries it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

import trainspect as ts
from trainspect.mlflow_plugin.keys import run_tags
from trainspect.rules import ExplodingTensor
from trainspect.rules.engine import load_verdicts
from trainspect.store.nan_origins import read_origins
from trainspect.tb_plugin.rules_view import verdict_detail


def _train(
    out: Path,
    model: nn.Module,
    batches: list[torch.Tensor],
    lr: float = 0.01,
    rules: object = "default",
    loss_fn: object = None,
    immediate: bool | None = None,
) -> ts.torch.Hook:
    hook = ts.torch.Hook(str(out), rules=rules)
    hook.register_module(model)
    hook._nan.immediate = immediate
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    for x in batches:
        pred = model(x)
        loss = loss_fn(pred) if loss_fn is not None else pred.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    hook.close()
    return hook


def _forward(out: Path) -> dict:
    found = [o for o in read_origins(out) if o["pass"] == "forward"]
    assert len(found) == 1, found
    return found[0]


def _exploding(out: Path) -> dict:
    verdicts = json.loads((out / "rules" / "verdicts.json").read_text())  # the live verdicts the hook wrote
    (v,) = [v for v in verdicts["verdicts"] if v["rule"] == "ExplodingTensor"]
    return v


class LogFeatures(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.log(x)


class Block(nn.Module):
    """Two linears; the block's own code divides by the row sum between them."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(4, 4), nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.fc1(x) / x.sum(1, keepdim=True))


def _positive(steps: int, bad_step: int, zero: bool = True) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    batches = [torch.rand(8, 4, generator=g) + 0.5 for _ in range(steps)]
    if zero:
        batches[bad_step][3, 2] = 0.0
    else:
        batches[bad_step][3] = torch.tensor([1.0, -1.0, 2.0, -2.0])
    return batches


@pytest.mark.parametrize("immediate", [None, False], ids=["cpu", "deferred"])
def test_a_log_that_reaches_zero_is_named_with_its_step(tmp_path: Path, immediate: bool | None) -> None:
    model = nn.Sequential(LogFeatures(), nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    _train(tmp_path, model, _positive(6, bad_step=3), immediate=immediate)
    found = _forward(tmp_path)
    assert (found["module"], found["module_type"], found["step"], found["inputs_finite"]) == (
        "0",
        "LogFeatures",
        3,
        True,
    )
    assert found["propagated_by"][:1] == ["1"]  # the Linear after it passed it on, not blamed
    if immediate is None:
        assert (found["inf"], found["nan"], found["shape"], found["dtype"]) == (1, 0, [8, 4], "float32")
        assert found["saved"] == ["nan_origin/0/input_0", "nan_origin/0/output_0"]
        trial = ts.create_trial(str(tmp_path))
        assert bool(torch.isinf(torch.as_tensor(trial.tensor("nan_origin/0/output_0").value(3))).any())
        assert bool(torch.isfinite(torch.as_tensor(trial.tensor("nan_origin/0/input_0").value(3))).all())
    verdict = _exploding(tmp_path)
    assert verdict["status"] == "IssuesFound"
    said = "first produced by `0` (LogFeatures), output_0, forward pass of TRAIN step 3"
    assert said in verdict["message"]
    assert verdict["details"]["origin"][0]["module"] == "0"
    if immediate is None:  # shown everywhere: the report, `rules --json`, the TensorBoard Rules view, MLflow's tag
        assert said in (tmp_path / "report.html").read_text()
        cli = subprocess.run(
            [sys.executable, "-m", "trainspect.cli", "rules", str(tmp_path), "--json"],
            capture_output=True,
            text=True,
            check=False,
        )
        (offline,) = [v for v in json.loads(cli.stdout) if v["rule"] == "ExplodingTensor"]
        assert said in offline["message"] and offline["details"]["origin"][0]["module_type"] == "LogFeatures"
        detail = verdict_detail("run", load_verdicts(tmp_path), "ExplodingTensor")
        assert said in detail["message"] and detail["details"]["origin"][0]["step"] == 3
        assert said in run_tags(tmp_path)["trainspect.nan_origin"]


def test_a_value_made_by_a_modules_own_code_names_that_module(tmp_path: Path) -> None:
    model = nn.Sequential(Block(), nn.Linear(4, 1))
    _train(tmp_path, model, _positive(5, bad_step=2, zero=False))
    found = _forward(tmp_path)
    assert (found["module"], found["module_type"], found["step"]) == ("0", "Block", 2)
    assert "fc2" in found["output"] and found["propagated_by"][0] == "0.fc2"
    assert found["saved"][0] == "nan_origin/0/input_0"  # the block's own tensors, saved as it ended


class ZeroVarNorm(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x.mean(-1, keepdim=True)) / x.var(-1, keepdim=True).sqrt()


class TransformerBlock(nn.Module):
    def __init__(self, d: int = 8) -> None:
        super().__init__()
        self.norm1 = ZeroVarNorm()
        self.self_attn = nn.MultiheadAttention(d, 2, batch_first=True)
        self.ff = nn.Sequential(nn.Linear(d, 16), nn.ReLU(), nn.Linear(16, d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.self_attn(h, h, h, need_weights=False)[0]
        return x + self.ff(x)


class TinyTransformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([TransformerBlock(), TransformerBlock()])
        self.head = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return self.head(x).mean(1)


def test_a_division_by_a_zero_variance_in_a_transformer_block(tmp_path: Path) -> None:
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(4, 5, 8, generator=g) for _ in range(5)]
    batches[2][1, 3] = 0.25  # one token whose features are all equal: its variance is 0
    _train(tmp_path, TinyTransformer(), batches)
    found = _forward(tmp_path)
    assert (found["module"], found["module_type"], found["step"]) == ("layers.0.norm1", "ZeroVarNorm", 2)
    assert found["nan"] == 8 and found["inputs_finite"]
    assert "layers.0.self_attn" in found["propagated_by"]
    assert "`layers.0.norm1` (ZeroVarNorm)" in _exploding(tmp_path)["message"]


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sqrt(x * self.w)  # finite at 0; its gradient there is not


@pytest.mark.parametrize("immediate", [None, False], ids=["cpu", "deferred"])
def test_an_overflow_only_in_backward_names_the_gradient_and_a_finite_loss(tmp_path: Path, immediate: object) -> None:
    model = nn.Sequential(Scale(), nn.Linear(4, 1))
    _train(tmp_path, model, _positive(6, bad_step=3), immediate=immediate)
    (back,) = [o for o in read_origins(tmp_path) if o["pass"] == "backward"]
    assert (back["parameter"], back["module"], back["step"], back["loss_finite"]) == ("Sequential_0.w", "0", 3, True)
    assert not back["amp_skipped"] and (immediate is False or back["nan"] >= 1)
    forward = _forward(tmp_path)  # the optimizer applied the NaN: the next forward pass makes NaN in that module
    assert (forward["module"], forward["step"], forward["parameters"]) == ("0", 4, ["w"])
    message = _exploding(tmp_path)["message"]
    assert "gradient of `Sequential_0.w` (backward pass of TRAIN step 3; the loss was finite" in message


def test_an_exploding_learning_rate_names_the_first_module_whose_weights_broke(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 1))
    g = torch.Generator().manual_seed(2)
    batches = [torch.randn(8, 4, generator=g) for _ in range(6)]
    first_bad: list[tuple[int, str]] = []  # found independently: the first step whose forward uses broken weights

    def loss_fn(pred: torch.Tensor) -> torch.Tensor:
        return (pred - 1.0).pow(2).mean() * 1e10

    hook = ts.torch.Hook(str(tmp_path), rules="default")
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e30)  # the update overflows the weights; loss, gradients finite
    for step, x in enumerate(batches):
        broken = [name for name, m in model.named_children() for p in m.parameters() if not torch.isfinite(p).all()]
        if broken and not first_bad:
            first_bad.append((step, broken[0]))
        loss = loss_fn(model(x))
        opt.zero_grad()
        loss.backward()
        opt.step()
    hook.close()
    assert first_bad, "the learning rate did not explode the weights"
    found = _forward(tmp_path)
    assert (found["step"], found["module"]) == first_bad[0]
    assert found["module_type"] == "Linear" and found["parameters"] and found["inputs_finite"]
    assert "its parameter(s) weight" in _exploding(tmp_path)["message"]


class AlwaysNaNGradient(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[:, 0] = 0.0
        return torch.sqrt(x * self.w)


def _amp_train(
    out: Path, model: nn.Module, scaler: torch.amp.GradScaler, steps: int, gain: float = 1.0, lr: float = 0.01
) -> None:
    hook = ts.torch.Hook(str(out), rules="default")
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    g = torch.Generator().manual_seed(0)
    for _ in range(steps):
        x = torch.rand(8, 4, generator=g) + 0.5
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean() * gain
        opt.zero_grad()
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()
    hook.close()


def test_amp_skipped_steps_that_recover_are_recorded_and_not_an_issue(tmp_path: Path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**127, backoff_factor=2.0**-100, growth_interval=1000)
    _amp_train(tmp_path, nn.Sequential(nn.Linear(4, 64), nn.ReLU(), nn.Linear(64, 1)), scaler, 12, gain=1e3, lr=1e-6)
    trial = ts.create_trial(str(tmp_path))
    skipped = trial.tensor("amp/skipped").steps()
    assert 1 <= len(skipped) < 12 and skipped[0] == 0
    assert trial.tensor("amp/scale").value(skipped[0]) == pytest.approx(2.0**127)
    assert _exploding(tmp_path)["status"] == "NoIssuesFound"
    offline = ts.rules.evaluate(str(tmp_path), [ExplodingTensor()], write=False)[0]
    assert offline.status.value == "NoIssuesFound"
    literal = ts.rules.evaluate(str(tmp_path), [ExplodingTensor(amp_skips_allowed=0)], write=False)[0]
    assert literal.status.value == "IssuesFound"  # smdebug's behaviour: every skipped step's inf gradients count


def test_amp_that_never_recovers_is_an_issue_naming_the_gradient(tmp_path: Path) -> None:
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    _amp_train(tmp_path, nn.Sequential(AlwaysNaNGradient(), nn.Linear(4, 1)), scaler, 16)
    verdict = _exploding(tmp_path)
    assert verdict["status"] == "IssuesFound"
    assert verdict["first_trigger_step"] == 10  # the 11th skipped step in a row (amp_skips_allowed=10)
    assert "GradScaler skipped 11 steps in a row" in verdict["message"]
    assert "gradient of `Sequential_0.w`" in verdict["message"] and "GradScaler skipped the step" in verdict["message"]


def test_a_healthy_run_finds_nothing_and_origin_off_looks_for_nothing(tmp_path: Path) -> None:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    _train(tmp_path / "ok", model, _positive(6, bad_step=0, zero=False)[1:])
    assert read_origins(tmp_path / "ok") == []
    assert _exploding(tmp_path / "ok")["status"] == "NoIssuesFound"
    hook = _train(
        tmp_path / "off",
        nn.Sequential(LogFeatures(), nn.Linear(4, 1)),
        _positive(5, bad_step=2),
        rules=[ExplodingTensor(origin=False)],
    )
    assert read_origins(tmp_path / "off") == [] and not hook._nan.handles
    assert _exploding(tmp_path / "off")["status"] == "IssuesFound"


class ArgMax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.argmax(1)


def test_the_finder_holds_no_module_output_past_its_module(tmp_path: Path) -> None:
    import gc
    import weakref

    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), ArgMax())
    seen: list[weakref.ref] = []
    model[0].register_forward_hook(lambda m, a, out: seen.append(weakref.ref(out)))
    hook = ts.torch.Hook(str(tmp_path), rules="default")
    hook.register_module(model)
    with torch.no_grad():
        for x in _positive(3, bad_step=0, zero=False):
            model.eval()(x)  # a model whose output is no float (an argmax): nothing to end a pass with
            gc.collect()
            assert seen[-1]() is None  # the Linear's output is gone: nobody (the finder) keeps it
    assert len(seen) == 3
    hook.close()
