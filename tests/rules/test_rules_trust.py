"""Issue 13: bad rule parameters are refused in one line; rules add what they need without taking anything away."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from rules_synth import write_run
from test_rules_cli import cli
from test_rules_engine import healthy_records

import trainspect as ts
from trainspect.config import SaveConfig
from trainspect.exceptions import ConfigError, TensorUnavailableForStep
from trainspect.rules import (
    DeadRelu,
    LossNotDecreasing,
    Overfit,
    Overtraining,
    SaturatedActivation,
    TensorVariance,
    VanishingGradient,
)


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda: LossNotDecreasing(num_steps=1.5), "LossNotDecreasing: parameter num_steps=1.5: expected int >= 1"),
        (lambda: LossNotDecreasing(num_steps="1.5"), "LossNotDecreasing: parameter num_steps='1.5'"),
        (
            lambda: Overtraining(patience_validation=-3),
            "Overtraining: parameter patience_validation=-3 is out of range",
        ),
        (
            lambda: DeadRelu(threshold_layer=150),
            "DeadRelu: parameter threshold_layer=150 is out of range; allowed: >= 0",
        ),
        (lambda: Overfit(ratio_threshold="-0.1"), "Overfit: parameter ratio_threshold='-0.1' is out of range"),
        (lambda: VanishingGradient(converged_loss_ratio=2), "VanishingGradient: parameter converged_loss_ratio=2"),
        (lambda: SaturatedActivation(threshold_tanh_min=5, threshold_tanh_max=-5), "allowed: min < max"),
        (lambda: TensorVariance(tensor_regex="w", min_threshold=2, max_threshold=1), "allowed: min <= max"),
    ],
)
def test_meaningless_parameters_are_refused_in_one_line(make, needle):
    with pytest.raises(ConfigError) as err:
        make()
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_cli_refuses_bad_values_and_parameters_of_rules_it_does_not_run(tmp_path):
    run = write_run(tmp_path / "run", healthy_records())
    code, _, err = cli(str(run), "--param", "LossNotDecreasing.num_steps=1.5")
    assert code == 2 and "LossNotDecreasing.num_steps='1.5': expected int >= 1" in err
    code, _, err = cli(str(run), "--param", "DeadRelu.threshold_layer=20")  # no ReLU outputs recorded
    assert code == 2 and "--param DeadRelu.threshold_layer: DeadRelu is not run here (inputs not recorded" in err
    code, out, _ = cli(str(run), "--param", "VanishingGradient.threshold=1e-9")
    assert code == 0, out  # a healthy run: no rule finds an issue


def test_hook_with_an_unknown_rule_name_lists_the_valid_ones(tmp_path):
    with pytest.raises(ConfigError, match="unknown rule 'NotARule'; valid rules: VanishingGradient, ExplodingTensor"):
        ts.torch.Hook(tmp_path / "a", rules=["NotARule"])
    hook = ts.torch.Hook(tmp_path / "b", rules=["VanishingGradient", {"name": "LossNotDecreasing"}])
    assert [type(r).__name__ for r in hook._extras.rules] == ["VanishingGradient", "LossNotDecreasing"]
    with pytest.raises(ConfigError, match=r"rules\[0\]=3: expected a Rule"):
        ts.torch.Hook(tmp_path / "c", rules=[3])


def _train(out, **hook_kw):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ts.torch.Hook(out, save_config=SaveConfig(save_interval=2), **hook_kw) as hook:
        hook.register_module(model)
        hook.register_loss(loss_fn := torch.nn.CrossEntropyLoss())
        for _ in range(4):
            opt.zero_grad()
            loss_fn(model(torch.randn(8, 4)), torch.randint(0, 2, (8,))).backward()
            opt.step()
    return ts.create_trial(out)


def test_rules_keep_the_raw_tensors_and_histograms_of_a_collection_the_user_included(tmp_path):
    name = "gradient/Sequential_0.weight"
    mine = _train(tmp_path / "mine", rules="default", include_collections=["gradients"])
    grad = mine.tensor(name)
    assert grad.value(2).shape == (8, 4)  # the raw tensor the user asked for
    assert np.isclose(grad.reduction_value(2, "mean", abs=True), np.abs(grad.value(2)).mean())  # the rule's need
    planner = ts.torch.Hook(tmp_path / "plan", rules="default", include_collections=["gradients"]).collector.planner
    planner.begin_step(ts.modes.ModeKeys.TRAIN, 0)
    plan = planner.plan(name)
    assert plan.raw and plan.histogram and ("mean", True) in plan.reductions
    rules_only = _train(tmp_path / "rules", rules="default")
    assert rules_only.tensor(name).reduction_value(2, "mean", abs=True) is not None  # added for the rule
    with pytest.raises(TensorUnavailableForStep):
        rules_only.tensor(name).value(2)  # not asked for by the user: reductions only


def test_activations_join_their_collections_by_module_type_under_save_all(tmp_path):
    trial = _train(tmp_path / "all", save_all=True)
    assert trial.tensor_names(collection="relu_output") == ["1_output_0"]
    assert trial.tensor_names(collection="relu_input") == ["1_input_0"]
    assert "Sequential_0.weight" in trial.tensor_names(collection="weights")
    assert DeadRelu().name in {
        v.rule for v in ts.rules.evaluate(trial, [DeadRelu()], write=False) if v.status.value == "NoIssuesFound"
    }


# --- the noise-aware defaults on synthetic series ---------------------------------------------------------
def _run(rule, data):
    from trainspect.rules.tally import Tally

    tally = Tally(rule)
    for d in data:
        tally.feed(d)
    tally.end()
    return tally.verdict(finished=True)


def _losses(values, mode=None):
    from rules_synth import step, tensor

    from trainspect.modes import ModeKeys

    return [step(i, [tensor("loss", np.float32(v), ["losses"])], mode or ModeKeys.TRAIN) for i, v in enumerate(values)]


def test_loss_not_decreasing_is_quiet_on_a_noisy_plateau_and_catches_a_rise():
    rng = np.random.default_rng(0)
    falling_then_flat = [max(0.5, 2.0 - 0.03 * i) + abs(rng.standard_cauchy()) * 0.02 for i in range(300)]
    assert _run(LossNotDecreasing(), _losses(falling_then_flat)).status.value == "NoIssuesFound"
    assert _run(LossNotDecreasing(literal=True), _losses(falling_then_flat)).status.value == "IssuesFound"
    rising = falling_then_flat[:150] + [v + 0.02 * i for i, v in enumerate(falling_then_flat[150:])]
    v = _run(LossNotDecreasing(), _losses(rising))
    assert v.status.value == "IssuesFound" and "above the best" in v.message
    nan = _run(LossNotDecreasing(), _losses([1.0, 0.9, float("nan")]))
    assert nan.status.value == "IssuesFound" and nan.first_trigger_step == 2


def test_vanishing_gradient_leaves_out_zero_bias_and_converged_gradients_but_not_real_ones():
    from rules_synth import step, tensor

    def at(n, grads, loss):
        recs = [tensor(name, None, ["gradients"], abs_mean=v) for name, v in grads.items()]
        return step(n, {"main": recs, "loss": [tensor("loss", np.float32(loss), ["losses"])]})

    healthy = {"gradient/fc.weight": 1e-3, "gradient/fc.bias": 1e-9, "gradient/key.bias": 0.0}
    v = _run(VanishingGradient(), [at(i, healthy, 1.0) for i in range(3)])
    assert v.status.value == "NoIssuesFound" and "gradient/fc.bias (bias gradient tiny" in v.message
    converged = {"gradient/fc.weight": 1e-9}
    assert _run(VanishingGradient(), [at(0, {"gradient/fc.weight": 1e-2}, 1.0), at(1, converged, 1e-6)]).triggers == 0
    deep = {"gradient/0.weight": 1e-9, "gradient/0.bias": 1e-9, "gradient/9.weight": 1e-2}
    v = _run(VanishingGradient(), [at(i, deep, 1.3) for i in range(3)])
    assert v.triggers == 3 and set(v.tensors) == {"gradient/0.weight", "gradient/0.bias"}
    assert _run(VanishingGradient(literal=True), [at(i, healthy, 1.0) for i in range(3)]).triggers == 3


def test_overfit_needs_a_rising_validation_loss_not_a_static_gap():
    from rules_synth import step, tensor

    from trainspect.modes import ModeKeys

    def phases(vals):
        out, n = [], 0
        for val in vals:
            for _ in range(5):
                out.append(step(n, [tensor("loss", np.float32(0.5), ["losses"])], ModeKeys.TRAIN))
                n += 1
            for b in range(3):
                out.append(step(n, [tensor("loss", np.float32(val + 0.1 * b), ["losses"])], ModeKeys.EVAL))
                n += 1
        return out

    assert _run(Overfit(), phases([1.0, 0.95, 1.0, 0.97])).status.value == "NoIssuesFound"  # static gap
    v = _run(Overfit(), phases([1.0, 0.9, 1.1, 1.3]))
    assert v.status.value == "IssuesFound" and "rising" in v.message and v.triggers == 2
    assert _run(Overfit(literal=True), phases([1.0, 0.95, 1.0, 0.97])).triggers == 4


def test_overfit_says_when_validation_and_training_losses_look_like_different_units():
    """pytorch/examples' MNIST sums its test loss over each batch and averages its training loss."""
    from rules_synth import step, tensor

    from trainspect.modes import ModeKeys

    def phases(train, vals):
        out, n = [], 0
        for val in vals:
            for _ in range(5):
                out.append(step(n, [tensor("loss", np.float32(train), ["losses"])], ModeKeys.TRAIN))
                n += 1
            out.append(step(n, [tensor("loss", np.float32(val), ["losses"])], ModeKeys.EVAL))
            n += 1
        return out

    summed = _run(Overfit(), phases(2.2, [1170.0, 1104.0, 1090.0]))
    assert summed.status.value == "NoIssuesFound" and "different units" in summed.message
    assert "531.8x the training loss" in summed.message
    same_units = _run(Overfit(), phases(0.5, [0.6, 0.55, 0.56]))
    assert same_units.status.value == "NoIssuesFound" and "different units" not in same_units.message
