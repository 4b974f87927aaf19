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
from trainspect.modes import ModeKeys
from trainspect.rules import (
    AllZero,
    CheckInputImages,
    Confusion,
    DeadRelu,
    ExplodingTensor,
    LiveRuleRunner,
    LossNotDecreasing,
    NLPSequenceRatio,
    Overfit,
    Overtraining,
    PoorWeightInitialization,
    SaturatedActivation,
    SimilarAcrossRuns,
    StalledTrainingRule,
    Status,
    StepData,
    TensorVariance,
    UnchangedTensor,
    VanishingGradient,
    WeightUpdateRatio,
    evaluate,
    tensor_pass,
)
from trainspect.rules.counts import RuleCounts, step_counts
from trainspect.rules.loss_not_decreasing import MAX_TREND_POINTS
from trainspect.rules.verdict import Verdict

# LossNotDecreasing (loss_not_decreasing.py, ``room > 0`` -> ``room >= 0`` in ``_extend_open``) has no test here:
# with no room left the mutant extends the trend points by ``steps[:0]``, an empty list, which changes nothing.
# Nor have these two mutants, which change nothing a user of the rules can see:
# - _dead_gradients.py ``last_nonzero is None or zero_since is None`` -> ``and`` in DeadGradients.describe: the rules
#   describe a gradient only when it is exactly zero at this step, after noting it, so either both are None (zero
#   since its first record) or both are set (non-zero, then zero); the one state where they differ (non-zero now)
#   is never described.
# - weight_update_ratio.py ``fresh: bool = False`` -> ``True``: every training step sets ``fresh`` before the only
#   place that reads it, so the default is never seen.


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


@pytest.mark.parametrize("level", [0.0, 1e-12])
def test_a_training_loss_of_exactly_zero_throughout_is_at_its_floor_not_stalled(level: float) -> None:
    # a solved task or a switched-off auxiliary loss cannot go down; a flat loss just above 0 still stalls
    verdict = run(LossNotDecreasing(num_steps=10), losses([level] * 60))
    assert (verdict.status is Status.ISSUES_FOUND) is (level != 0.0), verdict.message


def test_a_recorded_loss_of_exactly_zero_is_no_stall_and_one_that_is_not_always_zero_is(tmp_path: Path) -> None:
    # offline, a chunk's values between window boundaries are added in bulk: a nonzero one there counts too
    for name, value in (("zero", lambda i: 0.0), ("ones", lambda i: 0.0 if i % 10 == 0 else 1.0)):
        out = write_run(
            tmp_path / name, [record(i, [tensor("loss", np.float32(value(i)), ["losses"])]) for i in range(60)]
        )
        (verdict,) = evaluate(ts.create_trial(out), [LossNotDecreasing(num_steps=10)], write=False)
        assert (verdict.status is Status.ISSUES_FOUND) is (name == "ones"), (name, verdict.message)


def test_a_loss_flat_for_longer_than_the_trend_cap_keeps_bounded_memory() -> None:
    # a live rule watches a run of any length: the trend points of a loss that never went down are capped
    rule = LossNotDecreasing(num_steps=10)
    state = rule.init_state()
    for s in losses([1.0 + (0.01 if i % 2 else -0.01) for i in range(MAX_TREND_POINTS + 200)]):
        rule.check(state, s)
    track = state.tracks[("loss", int(ModeKeys.TRAIN))]
    assert not track.progressed and len(track.seen) == MAX_TREND_POINTS


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


# --- Overtraining: the training loss of two steps has their spread, not none ----------------------------------
def _one_train_step_rounds(train: list[float], val: list[float]) -> list[StepData]:
    """Rounds of 1 TRAIN step then 2 EVAL steps, and a last TRAIN step closing the last evaluation."""
    out: list[StepData] = []
    for t, v in zip(train, val, strict=True):
        out.append(step(len(out), [tensor("loss", np.float32(t), ["losses"])]))
        for _ in range(2):
            out.append(step(len(out), [tensor("loss", np.float32(v), ["losses"])], ModeKeys.EVAL))
    out.append(step(len(out), [tensor("loss", np.float32(train[-1]), ["losses"])]))
    return out


def test_a_training_loss_of_two_steps_falling_within_their_spread_has_not_improved() -> None:
    # the training losses 1 then 0.5: mean 0.75, s.e. 0.25; 1 - 0.75 is not 2 standard errors below the best's 1
    verdict = run(Overtraining(patience_validation=1), _one_train_step_rounds([1.0, 0.5], [1.0, 1.0]))
    assert verdict.status is Status.NO_ISSUES_FOUND, verdict.message
    assert "training loss 0.75 vs 1 at the best evaluation; the training loss did not improve" in verdict.message


def test_a_training_loss_falling_by_just_over_two_standard_errors_has_improved() -> None:
    # 4 TRAIN steps at 1, an evaluation (the best), 3 TRAIN steps at 0.5, an evaluation no better: the 7 training
    # losses fell from 1 by 0.214, 2.12 standard errors (0.101) of theirs
    data: list[StepData] = []
    for mode, loss, count in [
        ("TRAIN", 1.0, 4),
        ("EVAL", 1.0, 2),
        ("TRAIN", 0.5, 3),
        ("EVAL", 1.0, 2),
        ("TRAIN", 0.5, 1),
    ]:
        for _ in range(count):
            data.append(step(len(data), [tensor("loss", np.float32(loss), ["losses"])], ModeKeys[mode]))
    verdict = run(Overtraining(patience_validation=1), data)
    assert verdict.status is Status.ISSUES_FOUND and verdict.first_trigger_step == 11, verdict.message
    assert "training loss 0.7857 vs 1 at the best evaluation" in verdict.message


# --- Overtraining: the trend of the evaluations since the best falls by its own slope -----------------------
def test_evaluations_falling_by_less_than_delta_hold_overtraining_back_with_their_slope_per_evaluation() -> None:
    val = [1.0, 0.99, 0.98, 0.97, 0.96]  # none better than the best (1.0) by more than delta 0.1
    rounds = train_eval_rounds([1.0, 0.8, 0.6, 0.4, 0.2], val)
    verdict = run(Overtraining(delta=0.1, patience_validation=2), rounds)
    assert verdict.status is Status.NO_ISSUES_FOUND, verdict.message
    assert "not overtrained: the last 4 evaluations still fall by 0.01 per evaluation" in verdict.message


# --- CheckInputImages: ``regex`` selects tensors outside the input_image collection --------------------------
def test_check_input_images_judges_a_tensor_its_regex_names_outside_the_input_image_collection(
    tmp_path: Path,
) -> None:
    images = np.full((4, 3, 2, 2), 100.0)  # NCHW, far from normalised
    out = write_run(tmp_path / "run", [record(0, [tensor("Net_input_0", images, ["inputs"])])])
    rule = CheckInputImages(regex=["Net_input_0"], threshold_samples=4)
    (verdict,) = evaluate(ts.create_trial(out), [rule], write=False)
    assert verdict.status is Status.ISSUES_FOUND, verdict.message
    assert "tensors matching 'Net_input_0'" in rule.describe_inputs()


# --- ExplodingTensor: a tensor saved as reductions only is judged by its min, max and mean --------------------
def test_a_non_finite_min_max_or_mean_reduction_alone_makes_a_tensor_exploding() -> None:
    finite = {"min": 0.0, "max": 1.0, "mean": 0.5, "abs_min": 0.0, "abs_max": 1.0, "abs_mean": 0.5}
    for bad in ("min", "max", "mean"):
        rec = tensor("w", None, ["weights"], **{**finite, bad: float("inf")})
        (res,) = checks(ExplodingTensor(), [step(0, [rec])])
        assert res is not None and res.triggered, bad
        assert res.detail == "NaN/Inf values in w (threshold: none allowed)" and res.tensors == ("w",)
    (clean,) = checks(ExplodingTensor(), [step(0, [tensor("w", None, ["weights"], **finite)])])
    assert clean is not None and not clean.triggered


# --- NLPSequenceRatio: a record without token ids is not counted --------------------------------------------
def test_nlp_sequence_ratio_skips_token_records_saved_without_values_or_empty() -> None:
    reductions_only = tensor("e", None, ["input_sequence"], mean=1.0)
    empty = tensor("e", np.zeros((0, 4), dtype=np.int64), ["input_sequence"])
    verdict = run(NLPSequenceRatio(), [step(0, [reductions_only]), step(1, [empty])])
    assert verdict.status is Status.NO_DATA, verdict.message


# --- Overfit: a training loss of exactly zero leaves no scale to call the evaluation broken ------------------
def test_overfit_with_a_zero_training_loss_does_not_call_the_evaluation_broken() -> None:
    res = [c for c in checks(Overfit(), train_eval_rounds([0.0, 0.0], [1.0, 1.0])) if c is not None]
    assert res and not any(c.triggered for c in res)
    assert all("broken" not in c.detail for c in res), [c.detail for c in res]


# --- StalledTrainingRule: a threshold below one second -------------------------------------------------------
def test_stalled_training_accepts_a_threshold_below_one_second_and_refuses_a_negative_one() -> None:
    data = [step(i, [], wall=w) for i, w in enumerate([0.0, 0.4, 1.0])]  # gaps 0.4 s, then 0.6 s
    res = checks(StalledTrainingRule(threshold=0.5), data)
    assert res[0] is None and [(c.value, c.triggered) for c in res[1:] if c is not None] == [
        (pytest.approx(0.4), False),
        (pytest.approx(0.6), True),
    ]
    with pytest.raises(ConfigError, match=r"threshold=-1 is out of range; allowed: >= 0$"):
        StalledTrainingRule(threshold=-1)


# --- UnchangedTensor: every saved value of the window is compared with the latest ----------------------------
def test_unchanged_tensor_needs_all_saved_values_equal_not_just_the_first_and_last() -> None:
    back = [[1.0, 2.0], [1.0, 3.0], [1.0, 2.0]]  # changed, then back: not unchanged
    late = [[1.0, 2.0], [1.0, 2.0], [1.0, 3.0]]  # changed only at the latest step
    data = [step(s, [tensor("back", back[s]), tensor("late", late[s])]) for s in range(3)]
    last = checks(UnchangedTensor(tensor_regex="back|late"), data)[-1]
    assert last is not None and not last.triggered and last.detail.startswith("0 of 2 tensor(s) unchanged")
    pair = [step(s, [tensor("w", [1.0, float(s)])]) for s in range(2)]  # a window of 2: the earlier one counts
    moved = checks(UnchangedTensor(tensor_regex="w", num_steps=2), pair)[-1]
    assert moved is not None and not moved.triggered


# --- step counts of a damaged trial: a mode whose steps cannot be read is left out ---------------------------
def test_a_mode_whose_steps_cannot_be_read_is_left_out_of_the_step_counts() -> None:
    class _Damaged:
        def steps(self, mode: ModeKeys) -> list[int]:
            if mode is ModeKeys.EVAL:
                raise OSError("damaged index")
            return [0, 1, 2] if mode is ModeKeys.TRAIN else []

    assert step_counts(_Damaged()) == {"TRAIN": 3}
