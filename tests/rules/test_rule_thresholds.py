"""Each tensor rule's threshold at its boundary: the value exactly at the threshold, and just past it.

Every rule documents whether reaching its threshold triggers (AllZero: ``>=``) or only passing it (most: ``>``);
these tests pin that, and the figures the verdict's message states (the observed value, the threshold, the counts).
"""

from __future__ import annotations

import numpy as np
import pytest
from rules_synth import checks, run, step, tensor, train_eval_rounds

from trainspect.modes import ModeKeys
from trainspect.rules import (
    AllZero,
    CheckInputImages,
    ClassImbalance,
    Confusion,
    DeadRelu,
    ExplodingTensor,
    LossNotDecreasing,
    NLPSequenceRatio,
    Overfit,
    Overtraining,
    PoorWeightInitialization,
    SaturatedActivation,
    SimilarAcrossRuns,
    StalledTrainingRule,
    Status,
    TensorVariance,
    UnchangedTensor,
    WeightUpdateRatio,
)


def _one(rule, *tensors, roles: str = "main", mode: ModeKeys = ModeKeys.TRAIN):  # noqa: ANN001, ANN202
    (res,) = checks(rule, [step(0, {roles: list(tensors)}, mode)])
    return res


# --- AllZero: reaching the share triggers -------------------------------------------------------------------
def test_all_zero_triggers_at_the_share_and_says_it() -> None:
    rule = AllZero(tensor_regex="r", threshold=50)
    at = _one(rule, tensor("r", [0, 0, 1, 2]))
    assert at.triggered and at.value == 50.0 and at.tensors == ("r",)
    assert at.detail == "50% zeros in r (threshold 50%)"
    below = _one(rule, tensor("r", [0, 1, 1, 1, 1, 1, 1, 1, 1, 1]), tensor("s", [0, 0, 0, 1, 1, 1, 1, 1, 1, 1]))
    assert not below.triggered and below.value == 30.0 and below.detail == "30% zeros in s (threshold 50%)"
    assert _one(AllZero(tensor_regex="r"), tensor("r", [0.0, 0.0])).triggered  # the default: all zeros
    assert not _one(AllZero(tensor_regex="r"), tensor("r", [0.0, 1e-30])).triggered


# --- DeadRelu, SaturatedActivation: passing the share triggers ----------------------------------------------
def test_dead_relu_counts_units_below_the_inactivity_and_triggers_past_the_layer_share() -> None:
    # 4 samples x 4 units: unit 0 never active, unit 1 active once (25 %), units 2 and 3 always
    x = np.array([[0, 1, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1], [0, 0, 1, 1]], dtype=np.float32)
    quarter = _one(DeadRelu(threshold_inactivity=25.0, threshold_layer=25.0), tensor("relu_output_0", x))
    assert quarter.value == 25.0 and not quarter.triggered  # unit 1, active 25 %, is not dead; 25 % is not past 25
    assert quarter.detail == "25% of units dead in relu_output_0 (threshold 25%)"
    half = _one(DeadRelu(threshold_inactivity=25.01, threshold_layer=49.9), tensor("relu_output_0", x))
    assert half.value == 50.0 and half.triggered and half.tensors == ("relu_output_0",)
    assert not _one(DeadRelu(threshold_inactivity=25.01, threshold_layer=50.0), tensor("relu_output_0", x)).triggered
    assert _one(DeadRelu(), tensor("relu_output_0", np.full((2, 2), np.nan))) is None  # NaN is not dead


def test_saturation_bounds_are_exclusive_and_the_layer_share_must_be_passed() -> None:
    rule = SaturatedActivation(threshold_layer=50.0)
    # 2 units: unit 0 sits exactly on tanh's upper bound (saturated), unit 1 just inside it
    x = np.array([[9.4999, 9.4998]] * 4)
    at = _one(rule, tensor("t", x, ["tanh_input"]), roles="tanh")
    assert at.value == 50.0 and not at.triggered
    assert at.detail == "50% of units saturated in t (threshold 50%)"
    low = np.array([[-9.4999, -9.4998, -9.4999]] * 2)
    past = _one(rule, tensor("t", low, ["tanh_input"]), roles="tanh")
    assert past.value == pytest.approx(200 / 3) and past.triggered
    sig = np.array([[16.99999, -23.0, -22.99, 0.0]] * 2)
    assert _one(rule, tensor("s", sig, ["sigmoid_input"]), roles="sigmoid").value == 50.0


# --- TensorVariance -----------------------------------------------------------------------------------------
def test_variance_thresholds_must_be_passed() -> None:
    rule = TensorVariance(tensor_regex="w", max_threshold=2.0, min_threshold=1.0)
    at = _one(rule, tensor("w", None, variance=2.0), tensor("v", None, variance=1.0))
    assert not at.triggered and at.value == 2.0
    assert at.detail == "variance from 1 (v) to 2 (w) (thresholds min 1, max 2)"
    assert _one(rule, tensor("w", None, variance=2.001)).tensors == ("w",)
    assert _one(rule, tensor("w", None, variance=0.999)).tensors == ("w",)
    assert (
        _one(TensorVariance(tensor_regex="w", max_threshold=2.0), tensor("w", None, variance=1e-12)).triggered is False
    )


# --- UnchangedTensor ----------------------------------------------------------------------------------------
def test_unchanged_over_exactly_num_steps_and_within_tolerance() -> None:
    rule = UnchangedTensor(tensor_regex="w", num_steps=3, atol=0.5, rtol=0.0)
    data = [
        step(i, [tensor("w", np.array([1.0, 2.0]) + 0.25 * i), tensor("u", np.full(2, float(i)))]) for i in range(4)
    ]
    res = checks(rule, data)
    assert res[:2] == [None, None]  # fewer than 3 saved values
    assert res[2].triggered and res[2].value == 1.0 and res[2].tensors == ("w",)  # 0.5 apart: within atol
    assert res[2].detail == "1 of 2 tensor(s) unchanged over 3 saved steps, e.g. w (threshold: none may stay unchanged)"
    moved = checks(UnchangedTensor(tensor_regex="w", num_steps=3, atol=0.49, rtol=0.0), data)[2]
    assert not moved.triggered and moved.detail.startswith("0 of 2 tensor(s) unchanged over 3 saved steps (")
    assert checks(rule, [step(0, [tensor("w", np.ones(2))], ModeKeys.EVAL)]) == [None]


# --- StalledTrainingRule -------------------------------------------------------------------------------------
def test_a_gap_must_pass_the_threshold() -> None:
    rule = StalledTrainingRule(threshold=10.0)
    res = checks(rule, [step(0, [], wall=0.0), step(1, [], wall=10.0), step(2, [], wall=20.5)])
    assert res[0] is None and not res[1].triggered and res[2].triggered
    assert res[2].detail == "10.5 s between steps (at step 2) (threshold 10 s)"
    v = run(StalledTrainingRule(threshold=10.0), [step(i, [], wall=w) for i, w in enumerate([0.0, 10.0, 20.0, 31.0])])
    assert v.triggers == 1 and v.first_trigger_step == 3
    state = rule.init_state()
    rule.check(state, step(0, [], wall=0.0))
    assert rule.idle(state, 10.0, None) is None  # exactly the threshold: not yet
    stalled = rule.idle(state, 10.25, None)
    assert stalled.triggered and stalled.detail == "10.25 s since the last step ? (threshold 10 s)"


# --- WeightUpdateRatio --------------------------------------------------------------------------------------
def _weights(*values: list[float], steps: list[int] | None = None) -> list:
    return [
        step(s, [tensor("w", np.array(v), ["weights"])])
        for s, v in zip(steps or range(len(values)), values, strict=True)
    ]


def test_update_ratio_thresholds_must_be_passed() -> None:
    # |[3, 4.5] - [3, 4]| / |[3, 4]| = 0.5 / 5 = 0.1 exactly (epsilon 0)
    data = _weights([3.0, 4.0], [3.0, 4.5])
    at_large = checks(WeightUpdateRatio(large_threshold=0.1, epsilon=0.0, literal=True), data)[1]
    assert at_large.value == 0.1 and not at_large.triggered
    assert at_large.detail == "update ratio from 0.1 (w) to 0.1 (w) (thresholds 1e-08 and 0.1)"
    assert checks(WeightUpdateRatio(large_threshold=0.0999, epsilon=0.0, literal=True), data)[1].triggered
    at_small = checks(WeightUpdateRatio(small_threshold=0.1, epsilon=0.0, literal=True), data)[1]
    assert not at_small.triggered
    assert checks(WeightUpdateRatio(small_threshold=0.1001, epsilon=0.0, literal=True), data)[1].triggered
    with_eps = checks(WeightUpdateRatio(epsilon=5.0, literal=True), data)[1]
    assert with_eps.value == pytest.approx(0.05)  # 0.5 / (5 + 5)


def test_num_steps_is_the_largest_distance_compared() -> None:
    data = _weights([3.0, 4.0], [3.0, 4.5], steps=[0, 2])
    assert checks(WeightUpdateRatio(num_steps=2, epsilon=0.0), data)[1].value == 0.1
    assert checks(WeightUpdateRatio(num_steps=1, epsilon=0.0), data) == [None, None]
    assert checks(WeightUpdateRatio(), _weights([1.0], [2.0, 3.0])) == [None, None]  # another shape: no pair


# --- ClassImbalance, CheckInputImages, NLPSequenceRatio -----------------------------------------------------
def _labels(labels: list[int], preds: list[int] | None = None, n: int = 0) -> object:
    roles = {"labels": [tensor("labels", np.array(labels))]}
    if preds is not None:
        roles["predictions"] = [tensor("predictions", np.array(preds))]
    return step(n, roles)


def test_class_ratio_and_misprediction_share_must_be_passed() -> None:
    at = checks(ClassImbalance(threshold_imbalance=3.0, samples=8), [_labels([0] * 6 + [1] * 2)])[0]
    assert at.value == 3.0 and not at.triggered
    assert at.detail == "class count ratio 3 over 8 labels (threshold 3)"
    past = checks(ClassImbalance(threshold_imbalance=2.9, samples=8), [_labels([0] * 6 + [1] * 2)])[0]
    assert past.triggered and past.detail == "class 0 has 3x the samples of class 1 (threshold 2.9)"
    rule = ClassImbalance(threshold_imbalance=10.0, threshold_misprediction=0.5, samples=4)
    half = checks(rule, [_labels([0, 0, 1, 1], [0, 1, 1, 1])])[0]  # class 0: 1 of 2 wrong, exactly the share
    assert not half.triggered
    more = checks(rule, [_labels([0, 0, 0, 1], [1, 1, 0, 1])])[0]
    assert more.triggered and more.detail == "66.67% of class 0 mispredicted (threshold 50%)"


def test_labels_are_judged_once_samples_were_seen() -> None:
    rule = ClassImbalance(samples=6, threshold_imbalance=1.5)
    res = checks(rule, [_labels([0, 0, 1], n=0), _labels([0, 0, 0], n=1)])
    assert res[0] is None and res[1].triggered and "5x the samples" in res[1].detail
    v = run(ClassImbalance(samples=7), [_labels([0, 0, 1], n=0), _labels([0, 0, 0], n=1)])
    assert v.status is Status.NO_DATA and "saw 6 labels, needs samples=7" in v.message


def test_image_channel_mean_must_pass_the_threshold_after_enough_images() -> None:
    img = np.zeros((2, 2, 1, 1))
    img[:, 0] = 0.25  # channel 0 mean 0.25, channel 1 mean 0
    rule = CheckInputImages(regex=["img"], threshold_mean=0.25, threshold_samples=4)
    res = checks(rule, [step(0, [tensor("img", img)]), step(1, [tensor("img", img)])])
    assert res[0] is None  # 2 images: fewer than 4
    assert not res[1].triggered and res[1].value == 0.25
    assert res[1].detail == "channel 0 mean 0.25 over 4 images (threshold |mean| 0.25)"
    low = CheckInputImages(regex=["img"], threshold_mean=0.2499, threshold_samples=2)
    assert checks(low, [step(0, [tensor("img", img)])])[0].tensors == ("img",)


def test_token_share_must_pass_its_threshold() -> None:
    seq = np.array([[5, 6, 0, 0]])
    at = checks(NLPSequenceRatio(token_thresholds_percent="50"), [step(0, [tensor("e", seq, ["input_sequence"])])])[0]
    assert at.value == 50.0 and not at.triggered and at.detail == "token 0 is 50% of e (threshold 50%)"
    past = NLPSequenceRatio(token_values="0,5", token_thresholds_percent="60,24.9")
    res = checks(past, [step(0, [tensor("e", seq, ["input_sequence"])])])[0]
    assert res.triggered and res.detail == "token 5 is 25% of e (threshold 24.9%)" and res.value == 50.0


# --- Confusion, PoorWeightInitialization --------------------------------------------------------------------
def _pairs(labels: list[int], preds: list[int]) -> object:
    return step(
        0, {"labels": [tensor("labels", np.array(labels))], "predictions": [tensor("predictions", np.array(preds))]}
    )


def test_confusion_shares_must_pass_their_thresholds() -> None:
    # prediction 0: 3 of 4 right (diagonal 0.75, off-diagonal 0.25); prediction 1: 2 of 2
    data = [_pairs([0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 1, 1])]
    at = checks(Confusion(min_diag=0.75, max_off_diag=0.25), data)[0]
    assert not at.triggered and at.value == 0.75
    assert at.detail == (
        "lowest diagonal share 0.75 (prediction 0; threshold 0.75), highest off-diagonal share 0.25 (threshold 0.25)"
    )
    assert checks(Confusion(min_diag=0.76, max_off_diag=0.25), data)[0].tensors == ("labels", "predictions")
    assert checks(Confusion(min_diag=0.75, max_off_diag=0.24), data)[0].triggered
    assert checks(Confusion(category_no=3), data)[0].value == 0.75  # an unused prediction column is no share


def test_layer_variance_ratio_must_pass_the_threshold() -> None:
    acts = {"act": [tensor("a_relu_input", None, variance=1.0), tensor("b_relu_input", None, variance=10.0)]}
    at = checks(PoorWeightInitialization(threshold=10.0, literal=True), [step(0, acts)])[0]
    assert not at.triggered and at.value == 10.0
    assert at.detail == "step 0: layer input variance ratio 10 (threshold 10)"
    past = checks(PoorWeightInitialization(threshold=9.99, literal=True), [step(0, acts)])[0]
    assert past.triggered and past.detail == "step 0: layer input variances differ by 10 (threshold 9.99)"
    three = {"act": [*acts["act"], tensor("c_relu_input", None, variance=100.0)]}
    per_layer = checks(PoorWeightInitialization(threshold=9.99), [step(0, three)])[0]
    assert per_layer.value == pytest.approx(10.0) and per_layer.triggered  # 100 over 2 layer steps: 10 per layer
    assert "(3 layers) differ by a factor per layer of 10" in per_layer.detail


def test_gradient_spread_and_loss_patience_are_counted_exactly() -> None:
    grad = np.linspace(0.0, 1.0, 101)  # p95 - p5 = 0.9
    at = checks(
        PoorWeightInitialization(distribution_range=0.9, literal=True), [step(0, {"grad": [tensor("g", grad)]})]
    )
    assert not at[0].triggered
    below = checks(
        PoorWeightInitialization(distribution_range=0.91, literal=True), [step(0, {"grad": [tensor("g", grad)]})]
    )
    assert below[0].triggered and "gradient p95-p5 spread 0.9 (threshold 0.91)" in below[0].detail
    loss = [step(i, {"loss": [tensor("loss", np.float32(v))]}) for i, v in enumerate([2.0, 1.0, 1.0, 1.5])]
    spread = checks(PoorWeightInitialization(distribution_range=0.91), [step(0, {"grad": [tensor("g", grad)]})])[0]
    assert not spread.triggered and spread.detail == (
        "step 0: gradient p95-p5 spread 0.9 (threshold 0.91) (reported only: needs badly scaled activations)"
    )
    res = checks(PoorWeightInitialization(patience=2, literal=True), loss)
    assert [r.triggered for r in res] == [False, False, False, True]
    assert res[3].detail == "step 3: loss not improved for 2 saved steps (patience 2)"
    assert checks(PoorWeightInitialization(steps=2), loss)[2:] == [None, None]  # only the first 2 steps


# --- Overfit, Overtraining (literal forms: smdebug's thresholds) --------------------------------------------
def test_overfit_gap_must_pass_the_ratio_for_patience_evaluations() -> None:
    data = train_eval_rounds([1.0, 1.0], [1.25, 1.25])
    at = [c for c in checks(Overfit(ratio_threshold=0.25, literal=True), data) if c is not None]
    assert [c.triggered for c in at] == [False, False] and at[0].value == 0.25
    assert (
        at[0].detail
        == "validation loss 1.25 (EVAL steps 3-4) vs training loss 1: gap 0.25 (threshold 0.25, 0/1 in a row)"
    )
    past = [c for c in checks(Overfit(ratio_threshold=0.24, patience=2, literal=True), data) if c is not None]
    assert [c.triggered for c in past] == [False, True]
    assert past[1].detail.endswith("gap 0.25 (threshold 0.24, 2/2 in a row)")
    late = [c for c in checks(Overfit(ratio_threshold=0.24, start_step=5, literal=True), data) if c is not None]
    assert len(late) == 1 and late[0].detail.startswith("validation loss 1.25 (EVAL steps 8-9)")


def test_overtraining_literal_improvement_must_pass_delta() -> None:
    data = losses_of([2.0, 1.5, 1.0, 0.9, 0.9])
    res = checks(Overtraining(delta=0.5, patience_train=1, literal=True), data)
    assert [r.value for r in res] == [0.0, 1.0, 0.0, 1.0, 2.0]  # 1.5 is not below 2 - 0.5; 1.0 is
    assert [r.triggered for r in res] == [False, True, False, True, True]
    assert (
        res[1].detail
        == "training loss 1.5 at step 1, best 2, not improved by more than 0.5 for 1 saved steps (patience 1)"
    )
    assert not any(r.triggered for r in checks(Overtraining(delta=0.5, patience_train=3, literal=True), data))


def losses_of(values: list[float]) -> list:
    return [step(i, [tensor("loss", np.float32(v), ["losses"])]) for i, v in enumerate(values)]


# --- LossNotDecreasing (literal: each loss against the one num_steps before) ---------------------------------
def test_loss_decrease_must_reach_diff_percent_and_a_rise_must_pass_its_threshold() -> None:
    data = losses_of([16.0, 12.0, 9.0, 9.5, 10.0])  # decreases of 25 %, 25 %, then rises
    res = checks(LossNotDecreasing(num_steps=1, diff_percent=25.0, literal=True), data)
    assert res[0] is None
    assert not res[1].triggered and res[1].detail == (
        "TRAIN loss went from 16 (step 0) to 12 (step 1): decrease 25% (threshold 25%)"
    )
    assert not res[2].triggered and res[2].value == 25.0
    assert res[3].triggered and "decrease -5.556% (threshold 25%)" in res[3].detail
    assert checks(LossNotDecreasing(num_steps=1, diff_percent=25.01, literal=True), data)[1].triggered
    rise = checks(LossNotDecreasing(num_steps=1, diff_percent=0.0, increase_threshold_percent=6.0, literal=True), data)
    assert "above the best loss" not in rise[3].detail  # 9.5 is 5.6 % above 9
    assert rise[4].triggered and rise[4].detail.endswith("; 10 is above the best loss 9 by more than 6%")
    two = checks(LossNotDecreasing(num_steps=2, diff_percent=10.0, literal=True), data)
    assert [r is None for r in two] == [True, True, False, True, False]  # every num_steps-th loss is judged


# --- ExplodingTensor, SimilarAcrossRuns: none allowed, counted -----------------------------------------------
def _grads(n: int, skipped: float | None, *values: float) -> object:
    roles = {"main": [tensor(f"g{i}", np.array([v, 1.0])) for i, v in enumerate(values)]}
    roles["main"].append(tensor("nan_origin/x", np.array([np.nan])))  # the origin's saved tensors are no finding
    if skipped is not None:
        roles["amp"] = [tensor("amp/skipped", np.float32(skipped))]
    return step(n, roles)


def test_nan_tensors_are_counted_and_gradscaler_skips_allowed_in_a_row() -> None:
    quiet = checks(ExplodingTensor(), [_grads(0, None, 1.0, 2.0)])[0]
    assert not quiet.triggered and quiet.detail == "no NaN/Inf values in 3 tensor(s) (threshold: none allowed)"
    bad = checks(ExplodingTensor(), [_grads(0, None, np.nan, np.inf, 1.0)])[0]
    assert bad.value == 2.0 and bad.tensors == ("g0", "g1")
    assert bad.detail == "NaN/Inf values in g0 and 1 more (threshold: none allowed)"
    assert checks(ExplodingTensor(only_nan=True), [_grads(0, None, np.inf)])[0].detail.startswith("no NaN values")
    data = [_grads(i, 1.0, np.nan) for i in range(3)] + [_grads(3, 0.0, 1.0)] + [_grads(i, 1.0, np.nan) for i in (4, 5)]
    res = checks(ExplodingTensor(amp_skips_allowed=2), data)
    assert [r.triggered for r in res] == [False, False, True, False, False, False]  # the count restarts at step 3
    assert res[1].detail == "GradScaler skipped the step (2 in a row, allowed: 2): non-finite values are normal"
    assert res[2].detail == "NaN/Inf values in g0 (threshold: none allowed)"
    clean = [_grads(i, 1.0, 1.0) for i in range(3)]
    stuck = checks(ExplodingTensor(amp_skips_allowed=2), clean)[2]
    assert stuck.triggered and stuck.tensors == ("amp/skipped",)
    assert stuck.detail == "GradScaler skipped 3 steps in a row (allowed: 2): the gradients stay non-finite"


def test_runs_differ_when_any_compared_tensor_differs() -> None:
    from trainspect.rules import StepData

    def at(n: int, mine: dict[str, np.ndarray], theirs: dict[str, np.ndarray]) -> StepData:
        base = step(n, [tensor(k, v) for k, v in mine.items()])
        other = {k: tensor(k, v) for k, v in theirs.items()}
        return StepData(base.step, base.mode, base.mode_step, base.wall_time, "worker_0", base.roles, (other,))

    same = checks(SimilarAcrossRuns(other_trials="x"), [at(0, {"a": np.ones(2), "b": np.zeros(2)}, {"a": np.ones(2)})])
    assert not same[0].triggered and same[0].detail == "0 of 1 compared tensor(s) differ (threshold: none may differ)"
    data = [
        at(
            0,
            {"a": np.ones(2), "b": np.zeros(2), "c": np.ones(3)},
            {"a": np.ones(2) * 2, "b": np.ones(3), "c": np.ones(3)},
        )
    ]
    res = checks(SimilarAcrossRuns(other_trials="x"), data)[0]
    assert res.triggered and res.value == 2.0 and res.tensors == ("a", "b")  # a different shape differs too
    assert res.detail == "2 of 3 compared tensor(s) differ, first a (threshold: none may differ)"
    nan = checks(SimilarAcrossRuns(other_trials="x"), [at(0, {"a": np.array([np.nan])}, {"a": np.array([np.nan])})])
    assert not nan[0].triggered  # NaN in both at the same place: alike
    assert SimilarAcrossRuns(other_trials="x,y").compared_runs() == ["x", "y"]


def test_layer_shares_are_percentages_from_0_to_100() -> None:
    from trainspect.exceptions import ConfigError

    for cls in (SaturatedActivation, DeadRelu):
        assert cls(threshold_layer=0).threshold_layer == 0.0 and cls(threshold_layer=100).threshold_layer == 100.0
        for bad in (-0.5, 100.5):
            with pytest.raises(ConfigError, match="threshold_layer"):
                cls(threshold_layer=bad)


# --- VanishingGradient: exactly zero is counted only once dead ---------------------------------------------
def test_a_gradient_exactly_zero_counts_once_it_died() -> None:
    from trainspect.rules import VanishingGradient

    def grad(n: int, value: float) -> object:
        return step(n, [tensor("gradient/a.weight", None, ["gradients"], abs_mean=value)])

    never = checks(VanishingGradient(), [grad(0, 0.0)])[0]
    assert not never.triggered and never.detail.endswith(
        "not counted: gradient/a.weight (exactly zero since its first record: no gradient flows (unused parameter, "
        "dead from the start))"
    )
    res = checks(VanishingGradient(dead_steps=3), [grad(0, 1e-3), grad(1, 0.0), grad(2, 0.0), grad(3, 0.0)])
    assert [r.triggered for r in res] == [False, False, False, True]
    assert "1 of 3 recorded step(s) to count as dead" in res[1].detail
    assert res[3].detail.startswith(
        "1 gradient(s) below threshold 1e-07 at step 3; smallest abs_mean 0 in gradient/a.weight"
    )
    assert "1 dead (non-zero, then exactly zero)" in res[3].detail


# --- what a rule asks for, and the inputs it skips ---------------------------------------------------------
def test_rules_skip_tensors_without_values() -> None:
    empty = tensor("x_input", None)
    x = np.array([[12.0, 0.0]] * 2)
    sat = _one(SaturatedActivation(), empty, tensor("t", x, ["tanh_input"]), roles="tanh")
    assert sat.value == 50.0
    dead = _one(DeadRelu(), tensor("relu_output_1", None), tensor("relu_output_0", np.array([[0.0, 1.0]] * 2)))
    assert dead.value == 50.0 and dead.detail.endswith("in relu_output_0 (threshold 50%)")
    img = np.zeros((2, 2, 1, 1))
    images = checks(
        CheckInputImages(regex=["img"], threshold_samples=2), [step(0, [tensor("img0", None), tensor("img", img)])]
    )
    assert images[0].value == 0.0 and "over 2 images" in images[0].detail
    var = _one(TensorVariance(tensor_regex="w", max_threshold=1.0), tensor("v", None), tensor("w", None, variance=0.5))
    assert var.value == 0.5 and var.detail == "variance from 0.5 (w) to 0.5 (w) (thresholds min n/a, max 1)"
    assert checks(
        Confusion(), [step(0, {"labels": [tensor("labels", None)], "predictions": [tensor("predictions", [1])]})]
    ) == [None]


def test_rule_configuration_is_checked_at_construction() -> None:
    from trainspect.exceptions import ConfigError

    with pytest.raises(ConfigError, match="AllZero"):
        AllZero()
    assert TensorVariance(tensor_regex="w", min_threshold=1.0, max_threshold=1.0).max_threshold == 1.0
    with pytest.raises(ConfigError, match="min_threshold=2.0 is above max_threshold=1.0"):
        TensorVariance(tensor_regex="w", min_threshold=2.0, max_threshold=1.0)
    assert Confusion(max_off_diag=1.0).max_off_diag == 1.0
    with pytest.raises(ConfigError, match="max_off_diag"):
        Confusion(max_off_diag=1.5)
    stall = StalledTrainingRule(stop_training_on_fire=True)
    assert [a.name for a in stall.actions] == ["StopTraining"]
    assert all(a.name != "StopTraining" for a in StalledTrainingRule().actions)  # only when asked to
    from trainspect.rules.actions import StopTraining

    given = StalledTrainingRule(actions=[StopTraining()], stop_training_on_fire=True)
    assert [a.name for a in given.actions] == ["StopTraining"]  # not added twice


def test_requirements_of_the_update_and_init_rules() -> None:
    (weights,) = WeightUpdateRatio(num_steps=5).requirements()
    assert (weights.collection, weights.save_interval, weights.raw) == ("weights", 5, True)
    reqs = PoorWeightInitialization(steps=4).requirements()
    assert reqs[0].collection == "relu_input" and reqs[0].save_interval == 1 and reqs[0].end_step == 4
    assert reqs[0].raw is False and reqs[0].reductions == ("variance",)


def test_one_class_has_a_ratio_of_one_and_a_zero_variance_layer_is_left_out() -> None:
    one = checks(ClassImbalance(samples=3), [_labels([2, 2, 2])])[0]
    assert one.value == 1.0 and one.detail == "class count ratio 1 over 3 labels (threshold 10)"
    acts = {
        "act": [
            tensor("a_relu_input", None, variance=0.0),
            tensor("b_relu_input", None, variance=1.0),
            tensor("c_relu_input", None, variance=10.0),
        ]
    }
    assert checks(PoorWeightInitialization(threshold=9.99), [step(0, acts)])[0].value == pytest.approx(10.0)
    assert checks(PoorWeightInitialization(literal=True), [step(0, acts)])[0].value is None  # 10 / 0: no ratio
    (series,) = run(DeadRelu(), [step(0, [tensor("relu_output_0", np.ones((2, 2)))])]).series
    assert series.threshold == 50.0


def test_overtraining_says_how_many_evaluations_it_has_seen() -> None:
    res = [c for c in checks(Overtraining(), train_eval_rounds([1.0, 0.5], [1.0, 1.0])) if c is not None]
    assert [c.value for c in res] == [0.0, 1.0]
    assert res[0].detail.endswith("; 1 evaluation(s) so far: too few to tell, patience 10 needs 11")
    assert res[1].detail.endswith("; 2 evaluation(s) so far: too few to tell, patience 10 needs 11")


# --- second mutation pass: inputs the rules must tell apart ------------------------------------------------
def test_image_channels_need_an_axis_the_tensor_has() -> None:
    img = np.zeros((2, 2, 1, 1))
    flat = tensor("ids", np.arange(4.0))  # one axis: no channel axis 1, not an image
    res = checks(CheckInputImages(regex=["img"], threshold_samples=2), [step(0, [flat, tensor("img", img)])])
    assert res[0].value == 0.0 and "over 2 images" in res[0].detail


def test_logits_are_compared_as_their_argmax() -> None:
    labels = np.array([0, 1, 1])
    logits = np.array([[5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])  # predicts 0, 1, 0
    res = checks(
        Confusion(), [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", logits)]})]
    )
    assert res[0].value == pytest.approx(0.5)  # prediction 0: 1 of 2 right
    (act, grad, loss) = PoorWeightInitialization().selects()
    assert act.raw is False and act.reductions == ("variance",) and grad.raw and loss.role == "loss"


def _frozen_run(n_frozen: int) -> list:
    data = []
    for s in range(2):
        weights = [tensor("t.weight", np.array([1.0, 2.0 + s]), ["weights"])]
        weights += [tensor(f"w{i}.weight", np.array([1.0, 1.0]), ["weights"]) for i in range(n_frozen)]
        grads = [tensor("gradient/t.weight", None, ["gradients"], abs_mean=0.1)]
        data.append(step(s, {"main": weights, "grad": grads}))
    return data


def test_frozen_weights_are_named_five_at_most_then_counted() -> None:
    rule = WeightUpdateRatio()
    state = rule.init_state()
    for d in _frozen_run(5):
        rule.check(state, d)
    five = rule.finish(state, None)
    assert five.triggered and five.tensors == tuple(f"w{i}.weight" for i in range(5))
    assert five.detail.endswith(
        "frozen? w0.weight (steps 0-1); w1.weight (steps 0-1); w2.weight (steps 0-1); "
        "w3.weight (steps 0-1); w4.weight (steps 0-1)"
    )
    state = rule.init_state()
    for d in _frozen_run(7):
        rule.check(state, d)
    seven = rule.finish(state, None)
    assert seven.detail.startswith("7 weight(s) never moved (ratio 0 < threshold 1e-08)")
    assert seven.detail.endswith("w4.weight (steps 0-1) and 2 more")


def test_a_loss_taking_turns_with_another_alternates_from_its_third_return() -> None:
    data = [step(n, [tensor("loss/a" if n % 2 == 0 else "loss/b", np.float32(1.0), ["losses"])]) for n in range(12)]
    res = checks(LossNotDecreasing(num_steps=1), data)
    alternating = [n for n, r in enumerate(res) if r is not None and "alternates with another optimizer" in r.detail]
    # each series returns after the other's judged value: loss/b at steps 3, 5, 7, loss/a at 4, 6, 8
    assert alternating == [7, 8, 9, 10, 11]


def test_a_rising_validation_loss_counts_evaluations_in_a_row() -> None:
    rng = np.random.default_rng(0)
    data, n = [], 0
    for val in (1.0, 1.0, 1.5, 2.0, 2.5):  # training stays at 1: validation rises from the third evaluation
        for mode, level, count in ((ModeKeys.TRAIN, 1.0, 5), (ModeKeys.EVAL, val, 4)):
            for _ in range(count):
                loss = np.float32(level + 0.01 * rng.standard_normal())
                data.append(step(n, [tensor("loss", loss, ["losses"])], mode))
                n += 1
    data.append(step(n, [tensor("loss", np.float32(1.0), ["losses"])], ModeKeys.TRAIN))
    res = [c for c in checks(Overfit(patience=2), data) if c is not None]
    assert [c.triggered for c in res] == [False, False, False, True, True]
    assert res[1].detail.endswith("not rising beyond its noise (0/2 in a row)")
    assert res[2].detail.endswith("rising (1/2 in a row)") and res[3].detail.endswith("rising (2/2 in a row)")
