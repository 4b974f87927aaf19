"""Tensor and loss rules at edges the other rule tests leave open (found by a mutation-testing pass).

Each test pins one behaviour a user sees: a parameter's allowed range, the threshold drawn in a verdict's chart,
what a NoData message asks to record, the improvement that counts exactly at ``delta``, which limits judge a
user-selected activation, a moved weight without a gradient of its own, and the training loss a chunk of a
recorded run leaves for VanishingGradient's converged-loss exemption.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from rules_synth import checks, record, run, step, tensor, write_run

import trainspect as ts
from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys
from trainspect.rules import (
    AllZero,
    NLPSequenceRatio,
    Overtraining,
    PoorWeightInitialization,
    SaturatedActivation,
    Status,
    TensorVariance,
    VanishingGradient,
    WeightUpdateRatio,
    evaluate,
    tensor_pass,
)

# LossNotDecreasing (loss_not_decreasing.py, ``room > 0`` -> ``room >= 0`` in ``_extend_open``) has no test here:
# with no room left the mutant extends the trend points by ``steps[:0]``, an empty list, which changes nothing.


# --- AllZero: the share of zeros is a percentage ------------------------------------------------------------
def test_all_zero_accepts_a_threshold_of_100_percent_and_refuses_more() -> None:
    rule = AllZero(tensor_regex="r", threshold=100)
    assert checks(rule, [step(0, [tensor("r", [0.0, 0.0])])])[0].triggered
    with pytest.raises(ConfigError, match=r"threshold=101 is out of range; allowed: >= 0 and <= 100"):
        AllZero(tensor_regex="r", threshold=101)


# --- the threshold drawn in a verdict's chart ---------------------------------------------------------------
def test_nlp_sequence_ratio_charts_the_first_tokens_threshold() -> None:
    seq = np.array([[0, 0, 1, 2]])  # token 0: 50 %
    rule = NLPSequenceRatio(token_values="0,5", token_thresholds_percent="60,10")
    verdict = run(rule, [step(0, [tensor("e", seq, ["input_sequence"])])])
    assert verdict.status is Status.NO_ISSUES_FOUND and "(threshold 60%)" in verdict.message
    (series,) = verdict.series
    assert series.threshold == 60.0


def test_tensor_variance_charts_the_max_threshold_else_the_min_threshold() -> None:
    data = [step(0, [tensor("w", None, variance=1.0)])]
    (both,) = run(TensorVariance(tensor_regex="w", min_threshold=0.5, max_threshold=2.0), data).series
    assert both.threshold == 2.0
    only_min = run(TensorVariance(tensor_regex="w", min_threshold=0.5), data)
    assert only_min.status is Status.NO_ISSUES_FOUND and "(thresholds min 0.5, max n/a)" in only_min.message
    assert only_min.series[0].threshold == 0.5


# --- what the rules ask to record: module inputs ------------------------------------------------------------
def test_nlp_sequence_ratio_without_token_ids_asks_for_the_inputs_of_embedding_modules() -> None:
    verdict = run(NLPSequenceRatio(), [])
    assert verdict.status is Status.NO_DATA
    assert verdict.message.endswith("the inputs of Embedding modules")
    (req,) = NLPSequenceRatio().requirements()
    assert req.module_types == ("Embedding",) and req.module_inputs and not req.module_outputs


def test_poor_weight_initialization_asks_the_hook_for_the_relu_inputs_its_message_names() -> None:
    verdict = run(PoorWeightInitialization(), [])
    assert verdict.status is Status.NO_DATA and "the inputs of ReLU modules" in verdict.message
    act = PoorWeightInitialization(steps=4).requirements()[0]
    assert (act.collection, act.module_types, act.module_inputs, act.module_outputs) == (
        "relu_input",
        ("ReLU",),
        True,
        False,
    )


# --- Overtraining: an evaluation improves by more than delta -------------------------------------------------
def _rounds(train: list[float], val: list[float]) -> list:
    """Rounds of 3 TRAIN steps then 2 EVAL steps, and a last TRAIN step that closes the last evaluation."""
    out, n = [], 0
    for t, v in zip(train, val, strict=True):
        for mode, loss, count in ((ModeKeys.TRAIN, t, 3), (ModeKeys.EVAL, v, 2)):
            for _ in range(count):
                out.append(step(n, [tensor("loss", np.float32(loss), ["losses"])], mode))
                n += 1
    out.append(step(n, [tensor("loss", np.float32(train[-1]), ["losses"])], ModeKeys.TRAIN))
    return out


def test_an_evaluation_better_by_exactly_delta_is_no_improvement() -> None:
    exactly = [c for c in checks(Overtraining(delta=0.5), _rounds([1.0, 1.0], [1.0, 0.5])) if c is not None]
    assert [c.value for c in exactly] == [0.0, 1.0]
    assert "validation loss 0.5 (EVAL steps 8-9), best 1 (steps 3-4); 1 evaluation(s) without" in exactly[1].detail
    beyond = [c for c in checks(Overtraining(delta=0.5), _rounds([1.0, 1.0], [1.0, 0.49])) if c is not None]
    assert [c.value for c in beyond] == [0.0, 0.0]
    assert "best 0.49 (steps 8-9); 0 evaluation(s) without improvement > 0.5" in beyond[1].detail


def test_a_stalled_validation_loss_with_a_flat_training_loss_is_called_converged() -> None:
    # patience 1: the second evaluation, no better, stalls; too few evaluations since the best for a trend line
    res = [c for c in checks(Overtraining(patience_validation=1), _rounds([1.0, 1.0], [1.0, 1.0])) if c is not None]
    assert [(c.value, c.triggered) for c in res] == [(0.0, False), (1.0, False)]
    assert res[1].detail.endswith(
        "; the training loss did not improve meanwhile either: converged (or stalled), not overtrained"
    )
    assert run(Overtraining(patience_validation=1), _rounds([1.0, 1.0], [1.0, 1.0])).status is Status.NO_ISSUES_FOUND


# --- SaturatedActivation: a user-selected tensor is judged by the limits its name says ----------------------
def test_a_selected_tensor_named_sigmoid_gets_the_sigmoid_limits_and_any_other_the_tanh_limits() -> None:
    x = np.full((4, 2), 12.0)  # saturates a tanh (|x| > 9.4999), not a sigmoid (-23 < x < 16.99999)
    rule = SaturatedActivation(collection_names="acts")
    sigmoid = checks(rule, [step(0, {"any": [tensor("enc.Sigmoid_gate", x, ["acts"])]})])[0]
    assert not sigmoid.triggered and sigmoid.detail == "0% of units saturated in enc.Sigmoid_gate (threshold 50%)"
    tanh = checks(rule, [step(0, {"any": [tensor("enc.cell", x, ["acts"])]})])[0]
    assert tanh.triggered and tanh.detail == "100% of units saturated in enc.cell (threshold 50%)"


# --- WeightUpdateRatio: a weight that moved without a gradient of its own is a copy, not frozen ---------------
def _with_buffer(buffer: list[list[float]]) -> list:
    """A trained weight (with its gradient) beside a weight without a gradient of its own, step by step."""
    data = []
    for s, b in enumerate(buffer):
        weights = [tensor("net.weight", np.array([1.0, 2.0 + s]), ["weights"]), tensor("avg.weight", b, ["weights"])]
        grads = [tensor("gradient/net.weight", None, ["gradients"], abs_mean=0.1)]
        data.append(step(s, {"main": weights, "grad": grads}))
    return data


def test_a_weight_without_a_gradient_that_moved_a_little_is_not_frozen_when_it_then_stands_still() -> None:
    moved = run(WeightUpdateRatio(), _with_buffer([[3.0, 4.0], [3.0, 4.5], [3.0, 4.5]]))  # ratio 0.1, then 0
    assert moved.status is Status.NO_ISSUES_FOUND, moved.message
    assert "not counted: avg.weight (moved without a gradient of its own: an EMA or averaged copy)" in moved.message
    still = run(WeightUpdateRatio(), _with_buffer([[3.0, 4.0]] * 3))
    assert still.status is Status.ISSUES_FOUND and still.tensors == ("avg.weight",)
    assert "frozen? avg.weight (steps 0-2)" in still.message


# --- VanishingGradient: a chunk of losses without gradients leaves its latest training loss ------------------
def test_the_latest_loss_of_a_chunk_without_gradients_decides_whether_the_loss_has_converged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tensor_pass, "CHUNK_STEPS", 3)  # steps 0-2 (losses only) are judged as one chunk

    def judge(last_loss: float) -> ts.rules.Verdict:
        losses = [record(i, [tensor("loss", np.float32(v), ["losses"])]) for i, v in enumerate([2.0, 1.0, last_loss])]
        tiny = record(3, [tensor("gradient/w", None, ["gradients"], abs_mean=1e-9)])  # no loss at this step
        out = write_run(tmp_path / f"run-{last_loss}", [*losses, tiny])
        (verdict,) = evaluate(ts.create_trial(out), [VanishingGradient()], write=False)
        return verdict

    converged = judge(0.0019)  # below 1e-3 x the first loss (2.0)
    assert converged.status is Status.NO_ISSUES_FOUND, converged.message
    assert "not counted: gradient/w (loss 0.0019 has converged)" in converged.message
    not_yet = judge(0.0021)
    assert not_yet.status is Status.ISSUES_FOUND and not_yet.first_trigger_step == 3
    assert not_yet.tensors == ("gradient/w",)
