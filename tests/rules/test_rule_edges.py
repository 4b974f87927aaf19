"""Tensor and loss rules at edges the other rule tests leave open (found by a mutation-testing pass).

Each test pins one behaviour a user sees: a parameter's allowed range, the threshold drawn in a verdict's chart,
what a NoData message asks to record, the improvement that counts exactly at ``delta``, which limits judge a
user-selected activation, a moved weight without a gradient of its own, and the training loss a chunk of a
recorded run leaves for VanishingGradient's converged-loss exemption.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from rules_synth import checks, losses, record, run, step, tensor, train_eval_rounds, write_run

import trainspect as ts
from trainspect.exceptions import ConfigError
from trainspect.rules import (
    AllZero,
    Confusion,
    DeadRelu,
    ExplodingTensor,
    LiveRuleRunner,
    LossNotDecreasing,
    NLPSequenceRatio,
    Overtraining,
    PoorWeightInitialization,
    SaturatedActivation,
    SimilarAcrossRuns,
    Status,
    TensorVariance,
    VanishingGradient,
    WeightUpdateRatio,
    evaluate,
    tensor_pass,
)
from trainspect.rules.counts import RuleCounts
from trainspect.rules.verdict import Verdict

# LossNotDecreasing (loss_not_decreasing.py, ``room > 0`` -> ``room >= 0`` in ``_extend_open``) has no test here:
# with no room left the mutant extends the trend points by ``steps[:0]``, an empty list, which changes nothing.


# --- AllZero: the share of zeros is a percentage ------------------------------------------------------------
def test_all_zero_accepts_a_threshold_of_100_percent_and_refuses_more() -> None:
    rule = AllZero(tensor_regex="r", threshold=100)
    assert checks(rule, [step(0, [tensor("r", [0.0, 0.0])])])[0].triggered
    with pytest.raises(ConfigError, match=r"threshold=101 is out of range; allowed: >= 0 and <= 100"):
        AllZero(tensor_regex="r", threshold=101)


def test_confusion_accepts_a_single_category_and_refuses_none() -> None:
    labels, preds = tensor("labels", np.array([0, 0, 1])), tensor("predictions", np.array([0, 1, 1]))
    one = checks(Confusion(category_no=1), [step(0, {"labels": [labels], "predictions": [preds]})])[0]
    assert one.value == 1.0 and not one.triggered
    with pytest.raises(ConfigError, match=r"category_no=0 is out of range; allowed: >= 1$"):
        Confusion(category_no=0)


def test_dead_relu_accepts_an_inactivity_threshold_below_1_percent() -> None:
    acts = np.array([[0.0, 1.0], [0.0, 2.0]])  # unit 0 never active: dead under any threshold above 0 %
    (res,) = checks(DeadRelu(tensor_regex="r", threshold_inactivity=0.5), [step(0, [tensor("r", acts)])])
    assert res.value == 50.0 and res.detail == "50% of units dead in r (threshold 50%)"
    with pytest.raises(ConfigError, match=r"threshold_inactivity=-1 is out of range; allowed: >= 0 and <= 100"):
        DeadRelu(threshold_inactivity=-1)


def test_tensor_variance_accepts_a_max_threshold_below_1() -> None:
    (res,) = checks(TensorVariance(tensor_regex="w", max_threshold=0.5), [step(0, [tensor("w", None, variance=1.0)])])
    assert res.triggered and res.detail.endswith("(thresholds min n/a, max 0.5)")
    with pytest.raises(ConfigError, match=r"max_threshold=-1 is out of range; allowed: >= 0$"):
        TensorVariance(max_threshold=-1)


def test_saturated_activation_refuses_equal_lower_and_upper_limits() -> None:
    with pytest.raises(ConfigError, match=r"threshold_tanh_min=1.0 and threshold_tanh_max=1.0; allowed: min < max"):
        SaturatedActivation(threshold_tanh_min=1, threshold_tanh_max=1)


# --- ExplodingTensor: which records count as empty, and a value saved with only some reductions --------------
def test_a_nan_reduction_of_a_tensor_with_a_unit_axis_is_exploding_and_of_an_empty_one_is_not() -> None:
    nan_max = tensor("w", None, ["weights"], max=float("nan"), min=0.0)
    unit = checks(ExplodingTensor(), [step(0, [dataclasses.replace(nan_max, shape=(1, 3))])])[0]
    assert unit.triggered and unit.detail == "NaN/Inf values in w (threshold: none allowed)"
    empty = checks(ExplodingTensor(), [step(0, [dataclasses.replace(nan_max, shape=(0, 3))])])[0]
    assert not empty.triggered


def test_a_saved_value_with_only_its_max_or_min_reduction_is_judged_from_the_value() -> None:
    for only in ({"max": 2.0}, {"min": 1.0}):  # the other reduction was not saved
        rec = tensor("w", np.array([1.0, np.nan, 2.0]), ["weights"], **only)
        (res,) = checks(ExplodingTensor(), [step(0, [rec])])
        assert res.triggered and res.tensors == ("w",)


# --- PoorWeightInitialization (literal): layers whose inputs all have zero variance do not differ ------------
def test_literal_poor_weight_initialization_rates_all_zero_input_variances_as_ratio_1() -> None:
    acts = [tensor(f"{n}/relu_input", None, ["relu_input"], variance=0.0) for n in ("a", "b")]
    (res,) = checks(PoorWeightInitialization(literal=True), [step(0, {"act": acts})])
    assert res.value == 1.0 and not res.triggered
    assert res.detail == "step 0: layer input variance ratio 1 (threshold 10)"


# --- SimilarAcrossRuns is offline only: a live runner judges it at close, against the other run --------------
def test_a_live_runner_compares_similar_across_runs_with_the_other_run_at_close(tmp_path: Path) -> None:
    mine = [record(i, [tensor("w", np.full(3, float(i)), ["weights"])]) for i in range(3)]
    theirs = [record(i, [tensor("w", np.full(3, float(i) + (i == 2)), ["weights"])]) for i in range(3)]
    other = write_run(tmp_path / "other", theirs)
    runner = LiveRuleRunner([SimilarAcrossRuns(other_trials=other)], write_run(tmp_path / "run", mine), write=False)
    for r in mine:
        runner.submit(r)
    (verdict,) = runner.close()
    assert verdict.status is Status.ISSUES_FOUND and verdict.first_trigger_step == 2, verdict.message


# --- what a rule that could not look needed, in the run's one-line count -------------------------------------
def test_a_long_need_is_cut_to_60_characters_ending_with_an_ellipsis() -> None:
    need = "needs " + "x" * 100
    (counted,) = RuleCounts.of([Verdict("A", Status.NO_DATA, message="no data: this rule " + need)]).no_data
    assert counted == ("A", need[:59] + "…")


# --- LossNotDecreasing: a drop within the two windows' noise is no progress ---------------------------------
def test_a_loss_dropping_less_than_two_standard_errors_of_both_windows_stalls() -> None:
    # steps alternate 0.1 above and below the level: each window's s.e. is 0.083, the drop after window 1 is 0.1
    vals = [1.0 + (0.1 if i % 2 else -0.1) - (0.1 if i >= 10 else 0.0) for i in range(51)]
    verdict = run(LossNotDecreasing(num_steps=10), losses(vals))
    assert verdict.status is Status.ISSUES_FOUND and verdict.first_trigger_step == 50
    assert "not below the first window (1 at steps 0-9) by 0.1% and 2 standard errors" in verdict.message


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
def test_an_evaluation_better_by_exactly_delta_is_no_improvement() -> None:
    exactly = [c for c in checks(Overtraining(delta=0.5), train_eval_rounds([1.0, 1.0], [1.0, 0.5])) if c is not None]
    assert [c.value for c in exactly] == [0.0, 1.0]
    assert "validation loss 0.5 (EVAL steps 8-9), best 1 (steps 3-4); 1 evaluation(s) without" in exactly[1].detail
    beyond = [c for c in checks(Overtraining(delta=0.5), train_eval_rounds([1.0, 1.0], [1.0, 0.49])) if c is not None]
    assert [c.value for c in beyond] == [0.0, 0.0]
    assert "best 0.49 (steps 8-9); 0 evaluation(s) without improvement > 0.5" in beyond[1].detail


def test_a_stalled_validation_loss_with_a_flat_training_loss_is_called_converged() -> None:
    # patience 1: the second evaluation, no better, stalls; too few evaluations since the best for a trend line
    res = [
        c
        for c in checks(Overtraining(patience_validation=1), train_eval_rounds([1.0, 1.0], [1.0, 1.0]))
        if c is not None
    ]
    assert [(c.value, c.triggered) for c in res] == [(0.0, False), (1.0, False)]
    assert res[1].detail.endswith(
        "; the training loss did not improve meanwhile either: converged (or stalled), not overtrained"
    )
    assert (
        run(Overtraining(patience_validation=1), train_eval_rounds([1.0, 1.0], [1.0, 1.0])).status
        is Status.NO_ISSUES_FOUND
    )


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


def test_check_input_images_refuses_the_batch_axis_as_the_channel_axis() -> None:
    from trainspect.rules import CheckInputImages

    assert CheckInputImages(channel=3).channel == 3  # NHWC
    with pytest.raises(ConfigError, match=r"channel=0 is out of range; allowed: >= 1$"):
        CheckInputImages(channel=0)  # axis 0 is the batch: it would never judge an image
