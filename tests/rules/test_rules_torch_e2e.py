"""End to end with real PyTorch training through the hook: live rules, StopTraining, verdict files."""

from __future__ import annotations

import pytest
import torch

import trainspect as ts
from trainspect.rules import (
    DeadRelu,
    ExplodingTensor,
    LossNotDecreasing,
    Status,
    VanishingGradient,
    evaluate,
    load_verdicts,
)

torch.set_num_threads(1)


def data(n: int = 128):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 8, generator=g)
    y = x @ torch.linspace(-1, 1, 8).unsqueeze(1) + 0.5
    return x, y


def train(model, out, rules, lr, steps, optim=torch.optim.SGD, interval=1):
    x, y = data()
    loss_fn = torch.nn.MSELoss()
    opt = optim(model.parameters(), lr=lr)
    hook = ts.torch.Hook(str(out), save_config=ts.SaveConfig(save_interval=interval), rules=rules)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    done = 0
    try:
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            done += 1
    finally:
        hook.close()
    return done


def _live(run):
    """The verdicts of the hook's own rules (the report adds the other applicable rules at close)."""
    return [v for v in load_verdicts(run) if v.source == "live"]


def mlp(*sizes, act=torch.nn.ReLU):
    torch.manual_seed(0)
    layers = []
    for a, b in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [torch.nn.Linear(a, b), act()]
    return torch.nn.Sequential(*layers[:-1])


def test_diverging_run_stops_training_and_reports_nan(tmp_path):
    rules = [ExplodingTensor(actions=["StopTraining"]), LossNotDecreasing(num_steps=2)]
    with pytest.raises(ts.TrainingStopped) as stopped:
        train(mlp(8, 32, 1), tmp_path / "run", rules, lr=1e4, steps=200)
    assert stopped.value.rule == "ExplodingTensor"
    verdicts = {v.rule: v for v in load_verdicts(tmp_path / "run")}
    assert verdicts["ExplodingTensor"].status is Status.ISSUES_FOUND
    assert verdicts["LossNotDecreasing"].status is Status.ISSUES_FOUND
    stop_step = verdicts["ExplodingTensor"].first_trigger_step
    assert stop_step is not None and stop_step < 20  # the loop did not run on to 200 steps
    trial = ts.create_trial(str(tmp_path / "run"))
    assert max(trial.steps()) <= stop_step + 3  # stopped within the lag allowance
    offline = {v.rule: v for v in evaluate(trial, [ExplodingTensor(), LossNotDecreasing(num_steps=2)], write=False)}
    assert offline["ExplodingTensor"].first_trigger_step == stop_step
    assert offline["LossNotDecreasing"].status is Status.ISSUES_FOUND


def test_deep_sigmoid_network_has_vanishing_gradients(tmp_path):
    model = mlp(8, *[16] * 12, 1, act=torch.nn.Sigmoid)
    train(model, tmp_path / "run", [VanishingGradient()], lr=0.1, steps=5)
    (v,) = _live(tmp_path / "run")
    assert v.status is Status.ISSUES_FOUND and v.triggers == 5
    assert any(name.startswith("gradient/") and name.endswith("0.weight") for name in v.tensors)


def test_healthy_mlp_leaves_default_rules_quiet(tmp_path):
    train(mlp(8, 32, 32, 1), tmp_path / "run", "default", lr=1e-2, steps=60, optim=torch.optim.Adam, interval=5)
    verdicts = _live(tmp_path / "run")
    assert [v.rule for v in verdicts] == ["VanishingGradient", "ExplodingTensor", "LossNotDecreasing"]
    assert [v.status for v in verdicts] == [Status.NO_ISSUES_FOUND] * 3, [v.message for v in verdicts]
    assert verdicts[2].datapoints >= 4
    others = [v for v in load_verdicts(tmp_path / "run") if v.source == "report"]  # judged at close, whole run
    assert others and not [v.rule for v in others if v.status is Status.ISSUES_FOUND]


def test_dead_relu_inputs_are_recorded_from_the_requirement(tmp_path):
    model = mlp(8, 32, 1)
    with torch.no_grad():
        model[0].bias.fill_(-100.0)  # every unit of the ReLU layer is dead
    train(model, tmp_path / "run", [DeadRelu()], lr=1e-3, steps=3)
    (v,) = _live(tmp_path / "run")
    assert v.status is Status.ISSUES_FOUND and v.triggers == 3, v.message
