"""Each built-in tensor rule as a pure function on synthetic series: triggers, stays quiet, lacks data."""

from __future__ import annotations

import math

import numpy as np
import pytest
from rules_synth import checks, losses, run, step, tensor

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
    VanishingGradient,
    WeightUpdateRatio,
)

RNG = np.random.default_rng(0)


def grads(n_steps: int, scale: float, nan_at: int | None = None) -> list:
    out = []
    for i in range(n_steps):
        g = RNG.normal(0, scale, (8, 4))
        if i == nan_at:
            g[0, 0] = np.nan
        out.append(step(i, [tensor("gradient/Net_fc.weight", g, ["gradients"])]))
    return out


# --- VanishingGradient -------------------------------------------------------------------------------------
def test_vanishing_gradient_triggers_on_tiny_gradients_and_matches_brute_force():
    data = grads(5, 1.0) + grads(5, 1e-9)
    data = [step(i, list(d.role())) for i, d in enumerate(data)]
    v = run(VanishingGradient(), data)
    brute = [i for i, d in enumerate(data) if np.mean(np.abs(d.role()[0].value)) < 1e-7]
    assert v.status is Status.ISSUES_FOUND
    assert v.triggers == len(brute) == 5
    assert (v.first_trigger_step, v.last_trigger_step) == (brute[0], brute[-1])
    assert v.tensors == ("gradient/Net_fc.weight",)
    assert "threshold 1e-07" in v.message
    assert v.series[0].trigger_x == tuple(float(b) for b in brute)


def test_vanishing_gradient_quiet_on_healthy_gradients_and_ignores_nan():
    v = run(VanishingGradient(), grads(6, 1e-2, nan_at=3))
    assert v.status is Status.NO_ISSUES_FOUND and v.triggers == 0 and v.datapoints == 5  # the NaN step is skipped


def test_vanishing_gradient_uses_saved_reduction_when_only_reductions_exist():
    data = [step(0, [tensor("gradient/w", None, ["gradients"], abs_mean=1e-9)])]
    assert run(VanishingGradient(), data).triggers == 1


def test_vanishing_gradient_no_data_names_the_collection():
    v = run(VanishingGradient(), [step(0, [])])
    assert v.status is Status.NO_DATA and "gradients" in v.message


# --- ExplodingTensor ---------------------------------------------------------------------------------------
def test_exploding_tensor_counts_every_nan_step():
    data = [step(i, [tensor("w", [1.0, math.nan if i in (0, 2) else 1.0])]) for i in range(3)]
    v = run(ExplodingTensor(), data)
    assert v.triggers == 2 and (v.first_trigger_step, v.last_trigger_step) == (0, 2)


def test_exploding_tensor_only_nan_ignores_inf_and_reads_reductions():
    inf = [step(0, [tensor("w", [1.0, math.inf])])]
    assert run(ExplodingTensor(only_nan="True"), inf).triggers == 0
    assert run(ExplodingTensor(only_nan="false"), inf).triggers == 1
    reduced = [step(0, [tensor("g", None, min=-1.0, max=math.nan)])]
    assert run(ExplodingTensor(), reduced).triggers == 1
    assert run(ExplodingTensor(), [step(0, [tensor("g", None, min=-1.0, max=1.0)])]).status is Status.NO_ISSUES_FOUND


def test_exploding_tensor_ignores_integer_tensors_and_lacks_data():
    assert run(ExplodingTensor(), [step(0, [tensor("ids", np.arange(4))])]).triggers == 0
    assert run(ExplodingTensor(), []).status is Status.NO_DATA


# --- LossNotDecreasing -------------------------------------------------------------------------------------
def brute_lnd(values: list[float], n: int, diff: float) -> list[int]:
    """Reference: judge at s when a saved p <= s-n exists and s >= next; compare with the newest such p."""
    out, nxt = [], None
    for s in range(len(values)):
        ps = [p for p in range(s + 1) if p <= s - n]
        if not ps or (nxt is not None and s < nxt):
            continue
        p = ps[-1]
        nxt = s + n
        lp, ls = values[p], values[s]
        if not (math.isfinite(lp) and math.isfinite(ls)) or 100 * (lp - ls) / abs(lp) < diff:
            out.append(s)
    return out


def test_loss_not_decreasing_matches_brute_force_on_a_plateau():
    values = [1.0 / (1 + i) for i in range(30)] + [0.03] * 30
    v = run(LossNotDecreasing(increase_threshold_percent="1000", literal=True), losses(values))
    ref = brute_lnd(values, 10, 0.1)
    assert ref and v.triggers == len(ref) and v.first_trigger_step == ref[0] and v.last_trigger_step == ref[-1]
    assert "threshold 0.1%" in v.message


def test_loss_not_decreasing_quiet_while_loss_falls():
    v = run(LossNotDecreasing(literal=True), losses([math.exp(-0.05 * i) for i in range(50)]))
    assert v.status is Status.NO_ISSUES_FOUND and v.datapoints == 4
    v = run(LossNotDecreasing(), losses([math.exp(-0.05 * i) for i in range(50)]))
    assert v.status is Status.NO_ISSUES_FOUND and v.datapoints == 5


def test_loss_not_decreasing_non_finite_loss_triggers():
    values = [1.0 - 0.01 * i for i in range(10)] + [math.nan] * 5
    v = run(LossNotDecreasing(num_steps=5), losses(values))
    assert v.status is Status.ISSUES_FOUND and "not finite" in v.message


def test_loss_not_decreasing_too_little_data_and_mode_filter():
    v = run(LossNotDecreasing(literal=True), losses([1.0, 0.9, 0.8]))
    assert v.status is Status.NO_DATA and "num_steps=10" in v.message
    flat_eval = losses([1.0] * 30, mode=ModeKeys.EVAL)
    assert run(LossNotDecreasing(mode="train", literal=True), flat_eval).status is Status.NO_DATA
    assert run(LossNotDecreasing(mode="EVAL", literal=True), flat_eval).status is Status.ISSUES_FOUND
    assert run(LossNotDecreasing(), losses([1.0] * 60)).status is Status.ISSUES_FOUND  # never went down
    assert run(LossNotDecreasing(), losses([1.0] * 60, mode=ModeKeys.EVAL)).status is Status.NO_ISSUES_FOUND


def test_loss_not_decreasing_schedule_with_sparse_losses():
    # loss saved every 3 steps, num_steps 10: judged at 12 (vs 0), then at the first saved step >= 22: 24
    data = [step(s, [tensor("loss", np.float32(1.0), ["losses"])]) for s in range(0, 40, 3)]
    v = run(LossNotDecreasing(literal=True), data)
    assert v.series[0].trigger_x == (12.0, 24.0, 36.0)


# --- WeightUpdateRatio -------------------------------------------------------------------------------------
def weights(updates: list[float], base: float = 1.0) -> list:
    w = np.full((4, 4), base)
    out = []
    for i, u in enumerate(updates):
        w = w + u
        out.append(step(i, [tensor("Net_fc.weight", w.copy(), ["weights"])]))
    return out


def test_weight_update_ratio_small_and_large_and_brute_force():
    data = weights([0.0, 1e-3, 1e-3, 1e-12, 100.0])
    v = run(WeightUpdateRatio(), data)
    vals = [d.role()[0].value for d in data]
    ref = [
        i
        for i in range(1, 5)
        if not 1e-8 <= np.linalg.norm(vals[i] - vals[i - 1]) / (np.linalg.norm(vals[i - 1]) + 1e-9) <= 10
    ]
    assert ref == [3, 4]
    assert v.triggers == 2 and v.series[0].trigger_x == (3.0, 4.0)


def test_weight_update_ratio_quiet_skips_eval_and_needs_two_steps():
    assert run(WeightUpdateRatio(), weights([0.0, 1e-3, 1e-3])).status is Status.NO_ISSUES_FOUND
    frozen_eval = [step(i, [tensor("w", np.ones(3), ["weights"])], ModeKeys.EVAL) for i in range(3)]
    assert run(WeightUpdateRatio(), frozen_eval).status is Status.NO_DATA
    assert run(WeightUpdateRatio(), weights([0.0])).status is Status.NO_DATA


def test_weight_update_ratio_num_steps_skips_distant_pairs():
    data = [step(s, [tensor("w", np.ones(3), ["weights"])]) for s in (0, 10)]
    assert run(WeightUpdateRatio(num_steps=5), data).status is Status.NO_DATA
    assert run(WeightUpdateRatio(), data).triggers == 1


# --- DeadRelu, SaturatedActivation, PoorWeightInitialization -------------------------------------------------
def test_dead_relu():
    dead = np.zeros((32, 10))
    dead[:, 0] = 1.0
    healthy = np.maximum(RNG.normal(size=(32, 10)), 0)
    v = run(DeadRelu(), [step(0, [tensor("relu_output_0", dead, ["relu_output"])])])
    assert v.triggers == 1 and "90% of units dead" in v.message
    assert run(DeadRelu(), [step(0, [tensor("relu_output_0", healthy, ["relu_output"])])]).triggers == 0
    assert run(DeadRelu(), [step(0, [])]).status is Status.NO_DATA
    (sel,) = DeadRelu().selects()
    assert sel.matches("net.1_output_0", frozenset({"relu_output"})) and sel.matches("relu_output_0", frozenset())
    assert not sel.matches("fc_output_0", frozenset({"outputs"}))


def test_saturated_activation_uses_each_activations_limits():
    x = np.full((16, 8), 12.0)  # saturates tanh (limit 9.5), not sigmoid (limit 17)
    tanh = [step(0, {"tanh": [tensor("net.1_input_0", x, ["tanh_input"])]})]
    sig = [step(0, {"sigmoid": [tensor("net.1_input_0", x, ["sigmoid_input"])]})]
    assert run(SaturatedActivation(), tanh).triggers == 1
    assert run(SaturatedActivation(), sig).triggers == 0
    assert run(SaturatedActivation(), []).status is Status.NO_DATA


def test_poor_weight_initialization_variance_ratio_and_window():
    acts = [tensor("a_relu_input", RNG.normal(0, 1, (16, 8))), tensor("b_relu_input", RNG.normal(0, 10, (16, 8)))]
    good = [tensor("a_relu_input", RNG.normal(0, 1, (16, 8))), tensor("b_relu_input", RNG.normal(0, 1.2, (16, 8)))]
    rule = PoorWeightInitialization(steps=2)
    res = checks(rule, [step(i, {"act": acts}) for i in range(3)])
    assert res[0].triggered and res[1].triggered and res[2] is None  # only the first `steps` steps
    assert not checks(PoorWeightInitialization(), [step(0, {"act": good})])[0].triggered


def test_poor_weight_initialization_gradient_spread_and_loss_patience():
    narrow = [tensor("gradient/w", np.full((10, 10), 1e-6))]
    assert checks(PoorWeightInitialization(literal=True), [step(0, {"grad": narrow})])[0].triggered
    assert not checks(PoorWeightInitialization(), [step(0, {"grad": narrow})])[0].triggered  # reported only
    flat = [step(i, {"loss": [tensor("loss", np.float32(1.0))]}) for i in range(7)]
    res = checks(PoorWeightInitialization(patience=5, literal=True), flat)
    assert [r.triggered for r in res] == [False] * 5 + [True] * 2
    res = checks(PoorWeightInitialization(patience=5), flat)
    assert not any(r.triggered for r in res) and "loss not improved" in res[-1].detail


# --- AllZero, TensorVariance, UnchangedTensor ----------------------------------------------------------------
def test_all_zero():
    assert run(AllZero(tensor_regex="relu"), [step(0, [tensor("relu_out", np.zeros(5))])]).triggers == 1
    assert run(AllZero(tensor_regex="relu", threshold=50), [step(0, [tensor("r", [0, 0, 1, 0])])]).triggers == 1
    assert run(AllZero(tensor_regex="relu"), [step(0, [tensor("r", [0, 1.0])])]).triggers == 0
    assert run(AllZero(tensor_regex="relu"), []).status is Status.NO_DATA


def test_tensor_variance():
    data = [step(0, [tensor("w", RNG.normal(0, 10, 1000))]), step(1, [tensor("w", None, variance=1e-9)])]
    v = run(TensorVariance(tensor_regex="w", max_threshold=10, min_threshold=1e-5), data)
    assert v.triggers == 2
    assert run(TensorVariance(tensor_regex="w", max_threshold=1e6), data).triggers == 0


def test_unchanged_tensor():
    same = [step(i, [tensor("w", np.ones(3))]) for i in range(4)]
    v = run(UnchangedTensor(tensor_regex="w"), same)
    assert v.triggers == 2 and v.first_trigger_step == 2
    changing = [step(i, [tensor("w", np.ones(3) * i)]) for i in range(4)]
    assert run(UnchangedTensor(tensor_regex="w"), changing).status is Status.NO_ISSUES_FOUND
    assert run(UnchangedTensor(tensor_regex="w"), same[:2]).status is Status.NO_DATA


# --- ClassImbalance, Confusion -----------------------------------------------------------------------------
def test_class_imbalance_smdebug_case_990_to_10():
    labels = np.array([0] * 990 + [1] * 10)
    data = [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", labels)]})]
    v = run(ClassImbalance(), data)
    assert v.triggers == 1 and "99x" in v.message


def test_class_imbalance_mispredictions_balanced_and_too_few():
    labels = np.array([0, 1] * 300)
    wrong = 1 - labels
    data = [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", wrong)]})]
    assert run(ClassImbalance(), data).triggers == 1
    right = [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", labels)]})]
    assert run(ClassImbalance(), right).status is Status.NO_ISSUES_FOUND
    few = [step(0, {"labels": [tensor("labels", labels[:100])]})]
    v = run(ClassImbalance(), few)
    assert v.status is Status.NO_DATA and "saw 100 labels" in v.message


def test_confusion_column_form_and_argmax_logits():
    labels = np.array([0, 0, 0, 1, 1, 1])
    preds = np.array([0, 0, 0, 1, 1, 1])
    ok = [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", preds)]})]
    assert run(Confusion(), ok).status is Status.NO_ISSUES_FOUND
    bad = np.array([0, 0, 0, 0, 1, 1])  # column 0: 3 right, 1 from class 1 -> diag 0.75 < 0.9
    v = run(Confusion(), [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", bad)]})])
    assert v.triggers == 1 and "0.75" in v.message
    logits = np.eye(2)[preds] * 5
    assert (
        run(
            Confusion(),
            [step(0, {"labels": [tensor("labels", labels)], "predictions": [tensor("predictions", logits)]})],
        ).triggers
        == 0
    )
    assert run(Confusion(), [step(0, {"labels": [tensor("labels", labels)]})]).status is Status.NO_DATA


# --- Overfit, Overtraining ---------------------------------------------------------------------------------
def phases(train: float, val: float, rounds: int) -> list:
    out, n = [], 0
    for _ in range(rounds):
        for _ in range(3):
            out.append(step(n, [tensor("loss", np.float32(train), ["losses"])], ModeKeys.TRAIN))
            n += 1
        for _ in range(2):
            out.append(step(n, [tensor("loss", np.float32(val), ["losses"])], ModeKeys.EVAL))
            n += 1
    return out


def test_overfit():
    v = run(Overfit(patience=2, literal=True), phases(1.0, 1.5, 3))
    assert v.status is Status.ISSUES_FOUND and v.datapoints == 3 and v.triggers == 2
    assert run(Overfit(literal=True), phases(1.0, 1.05, 3)).status is Status.NO_ISSUES_FOUND
    assert run(Overfit(), phases(1.0, 1.5, 3)).status is Status.NO_ISSUES_FOUND  # a static gap: not rising
    assert run(Overfit(), losses([1.0] * 5)).status is Status.NO_DATA


def test_overtraining():
    flat = losses([1.0] * 8)
    v = run(Overtraining(literal=True), flat)
    assert v.triggers == 3 and v.first_trigger_step == 5
    falling = losses([1.0 - 0.1 * i for i in range(8)])
    assert run(Overtraining(literal=True), falling).status is Status.NO_ISSUES_FOUND
    assert run(Overtraining(), losses([1.0] * 80)).status is Status.NO_DATA  # judges evaluations only
    # validation stalls at 1.0 while training keeps improving: overtrained after patience_validation evaluations
    data, n = [], 0
    for k in range(6):
        for _ in range(3):
            data.append(step(n, [tensor("loss", np.float32(1.0 - 0.1 * k), ["losses"])], ModeKeys.TRAIN))
            n += 1
        for v in (1.0, 1.1):
            data.append(step(n, [tensor("loss", np.float32(v), ["losses"])], ModeKeys.EVAL))
            n += 1
    v = run(Overtraining(patience_validation=3), data)
    assert v.status is Status.ISSUES_FOUND and "3 evaluation(s) without improvement" in v.message
    flat = [d for d in data if d.mode is ModeKeys.EVAL] + [
        step(100 + i, [tensor("loss", np.float32(0.5), ["losses"])], ModeKeys.TRAIN) for i in range(3)
    ]
    assert run(Overtraining(patience_validation=3), flat).status is not Status.ISSUES_FOUND


# --- SimilarAcrossRuns -------------------------------------------------------------------------------------
def test_similar_across_runs():
    from trainspect.rules import StepData

    mine = tensor("w", np.ones(3))

    def at(n: int, other: np.ndarray) -> StepData:
        base = step(n, [mine])
        return StepData(
            base.step, base.mode, base.mode_step, base.wall_time, "worker_0", base.roles, ({"w": tensor("w", other)},)
        )

    assert run(SimilarAcrossRuns(other_trials="x"), [at(0, np.ones(3)), at(1, np.ones(3) * 2)]).triggers == 1
    assert run(SimilarAcrossRuns(other_trials="x"), [at(0, np.ones(3))]).status is Status.NO_ISSUES_FOUND
    assert run(SimilarAcrossRuns(other_trials="x"), [step(0, [mine])]).status is Status.NO_DATA


# --- CheckInputImages, NLPSequenceRatio, StalledTrainingRule -----------------------------------------------
def test_check_input_images():
    raw = RNG.uniform(0, 1, (300, 3, 4, 4))  # mean 0.5: not normalised
    norm = (raw - 0.5) / 0.29
    imgs = lambda a: [step(i, [tensor("img", a[i * 100 : (i + 1) * 100], ["input_image"])]) for i in range(3)]  # noqa: E731
    v = run(CheckInputImages(threshold_samples=200), imgs(raw))
    assert v.triggers == 2 and v.first_trigger_step == 1
    assert run(CheckInputImages(threshold_samples=200), imgs(norm)).status is Status.NO_ISSUES_FOUND
    assert run(CheckInputImages(), imgs(raw)).status is Status.NO_DATA  # 300 < 500 images


def test_nlp_sequence_ratio():
    padded = np.array([[5, 6, 0, 0, 0, 0]])
    assert run(NLPSequenceRatio(), [step(0, [tensor("e", padded, ["input_sequence"])])]).triggers == 1
    assert (
        run(
            NLPSequenceRatio(token_thresholds_percent="70"), [step(0, [tensor("e", padded, ["input_sequence"])])]
        ).triggers
        == 0
    )
    two = NLPSequenceRatio(token_values="0,5", token_thresholds_percent="90,10")
    assert run(two, [step(0, [tensor("e", padded, ["input_sequence"])])]).triggers == 1
    assert run(NLPSequenceRatio(), []).status is Status.NO_DATA


def test_stalled_training_rule_gaps_and_idle():
    walls = [0.0, 1.0, 2.0, 100.0]
    data = [step(i, [], wall=w) for i, w in enumerate(walls)]
    v = run(StalledTrainingRule(threshold=50), data)
    assert v.triggers == 1 and v.first_trigger_step == 3
    assert run(StalledTrainingRule(), data).status is Status.NO_ISSUES_FOUND
    rule = StalledTrainingRule(threshold=10)
    state = rule.init_state()
    rule.check(state, data[0])
    assert rule.idle(state, 5.0, data[0]) is None
    assert rule.idle(state, 30.0, data[0]).triggered
    assert rule.idle(state, 40.0, data[0]) is None  # one report per stall
    assert run(StalledTrainingRule(), data[:1]).status is Status.NO_DATA


@pytest.mark.parametrize(
    "rule",
    [VanishingGradient(), ExplodingTensor(), LossNotDecreasing(), DeadRelu(), WeightUpdateRatio(), Overfit()],
)
def test_rule_that_raises_ends_as_error(rule, monkeypatch):
    def boom(*a, **k):
        raise ValueError("synthetic failure")

    monkeypatch.setattr(type(rule), "check", boom)
    v = run(rule, losses([1.0, 2.0]) + grads(2, 1.0))
    assert v.status is Status.ERROR and "synthetic failure" in v.message
