"""Tensor and loss rules at edges a pass of hand-written mutants found unpinned.

Each test pins one behaviour a user sees: the figure a boundary falls on (a gap exactly at its threshold, a unit
active exactly ``threshold_inactivity`` % of the time), how many steps a window or a mean covers, which steps a
rule looks at (training only), how many windows or evaluations a message counts, and what a message says when the
data is too little to tell.
"""

from __future__ import annotations

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
    StepData,
    TensorVariance,
    UnchangedTensor,
    VanishingGradient,
    WeightUpdateRatio,
    evaluate,
    tensor_pass,
)


def _loss(n: int, value: float, mode: ModeKeys = ModeKeys.TRAIN) -> StepData:
    return step(n, [tensor("loss", np.float32(value), ["losses"])], mode)


def _train_then_eval(train: list[float], val: list[float]) -> list[StepData]:
    """Training losses, then one evaluation of these batch losses, then a training step that closes it."""
    data = [_loss(n, v) for n, v in enumerate(train)]
    data += [_loss(len(train) + k, v, ModeKeys.EVAL) for k, v in enumerate(val)]
    data.append(_loss(len(train) + len(val), train[-1]))
    return data


# --- LossNotDecreasing --------------------------------------------------------------------------------------
def test_a_last_window_of_half_num_steps_is_judged_at_the_end_and_counts_as_the_fifth() -> None:
    """The window still open at the end is judged from ``num_steps // 2`` losses on; the stall names 5 windows."""
    stalled = run(LossNotDecreasing(num_steps=4), losses([1.0] * 18))  # 4 full windows, then steps 16-17
    assert stalled.status is Status.ISSUES_FOUND and stalled.triggers == 1 and stalled.first_trigger_step == 17
    assert stalled.message.startswith("LossNotDecreasing triggered at 1 of 5 evaluated steps")
    assert stalled.message.endswith("by 0.1% and 2 standard errors after 5 windows of 4")
    assert "median 1 over steps 16-17" in stalled.message
    short = run(LossNotDecreasing(num_steps=4), losses([1.0] * 17))  # the last window holds step 16 only
    assert short.status is Status.NO_ISSUES_FOUND and short.datapoints == 4


def test_three_falling_losses_are_too_few_for_the_trend_to_count_as_progress() -> None:
    """A line through 3 losses is no trend (4 are needed): a loss that then levels off still stalls."""
    res = checks(LossNotDecreasing(num_steps=1), losses([1.0, 0.99, 0.98, 1.0, 1.0, 1.0]))
    assert [r is not None and r.triggered for r in res] == [False, False, False, False, False, True]
    assert res[5] is not None and res[5].detail.endswith("after 5 windows of 1")


def test_a_rise_must_pass_one_percent_of_the_first_windows_loss() -> None:
    """A loss converged near zero rises only when it climbs past 1 % of the first window's median."""
    rule = LossNotDecreasing(num_steps=2)
    rose = run(rule, losses([100.0] * 2 + [1.0] * 8 + [2.5] * 6))  # 1.5 above the best: past 1 % of 100
    assert rose.status is Status.ISSUES_FOUND and rose.first_trigger_step == 14
    assert rose.message.endswith("above the best by more than 5% and 3 standard errors")
    within = run(rule, losses([100.0] * 2 + [1.0] * 8 + [1.9] * 6))  # 0.9 above: past 5 % of 1, not 1 % of 100
    assert within.status is Status.NO_ISSUES_FOUND


# --- Overfit ------------------------------------------------------------------------------------------------
def test_overfit_compares_with_the_mean_of_the_last_20_training_losses() -> None:
    """The training loss at an evaluation is the mean of the 20 training losses before it, named by their steps."""
    (res,) = [c for c in checks(Overfit(), _train_then_eval([21.0] + [1.0] * 19, [3.0, 3.0])) if c is not None]
    assert res.detail.startswith(
        "validation loss 3 (EVAL steps 20-21) vs training loss 2 (TRAIN steps 0-19): gap 0.5 (threshold 0.1); "
    )


def test_overfit_gap_exactly_at_the_ratio_threshold_does_not_count() -> None:
    """A rising validation loss whose gap equals ``ratio_threshold`` is not counted; just past it, it is."""
    data = train_eval_rounds([1.0, 1.0], [1.0, 1.5])  # the gap at the second evaluation: (1.5 - 1) / 1 = 0.5
    at = [c for c in checks(Overfit(ratio_threshold=0.5), data) if c is not None]
    assert not at[1].triggered and at[1].value == 0.5
    assert at[1].detail.endswith("rising (0/1 in a row)")
    past = [c for c in checks(Overfit(ratio_threshold=0.49), data) if c is not None]
    assert past[1].triggered and past[1].detail.endswith("rising (1/1 in a row)")


def test_a_validation_loss_exactly_1000_times_the_training_loss_is_not_yet_broken() -> None:
    """The broken-evaluation test needs more than 1,000x the training loss."""
    (at,) = [c for c in checks(Overfit(), train_eval_rounds([1.0], [1000.0])) if c is not None]
    assert not at.triggered and "evaluation itself is broken" not in at.detail
    assert "the first validation loss was 1000x the training loss" in at.detail
    (past,) = [c for c in checks(Overfit(), train_eval_rounds([1.0], [1000.5])) if c is not None]
    assert past.triggered and "the validation loss is 1000x the training loss" in past.detail


def test_one_batch_evaluations_need_four_earlier_ones_for_their_noise() -> None:
    """The noise of a one-batch evaluation comes from the earlier ones only, and needs 4 of them."""
    data, n = [], 0
    for _ in range(5):
        data += [_loss(n, 1.0), _loss(n + 1, 2.0, ModeKeys.EVAL)]
        n += 2
    data.append(_loss(n, 1.0))
    res = [c for c in checks(Overfit(), data) if c is not None]
    assert len(res) == 5 and res[0].detail.endswith("first evaluation (0/1 in a row)")
    too_few = "too few evaluations of one batch to tell a rise from noise (the noise needs 4 earlier ones)"
    assert [too_few in c.detail for c in res] == [False, True, True, True, False]
    assert res[4].detail.endswith("not rising beyond its noise (0/1 in a row)")


# --- Overtraining -------------------------------------------------------------------------------------------
def test_overtraining_says_too_few_up_to_patience_evaluations() -> None:
    """With ``patience_validation`` evaluations or fewer the message says they are too few to tell."""
    res = [c for c in checks(Overtraining(patience_validation=2), train_eval_rounds([1.0] * 3, [1.0] * 3)) if c]
    assert len(res) == 3
    assert res[1].detail.endswith("; 2 evaluation(s) so far: too few to tell, patience 2 needs 3")
    assert "too few" not in res[2].detail and res[2].detail.endswith("converged (or stalled), not overtrained")


def test_overtraining_takes_the_training_loss_as_the_mean_of_the_last_20() -> None:
    """The training loss an evaluation is compared with is the mean of the last 20 training losses."""
    (res,) = [c for c in checks(Overtraining(), _train_then_eval([21.0] + [1.0] * 19, [3.0, 3.0])) if c is not None]
    assert "training loss 2 vs 2 at the best evaluation" in res.detail


# --- StalledTrainingRule ------------------------------------------------------------------------------------
def test_a_recorded_runs_gap_exactly_at_the_threshold_is_no_stall(tmp_path: Path) -> None:
    """Judged from a recorded run's columns, a gap must pass ``threshold``: 10 s is no stall, 10.5 s is."""
    recs = [record(n, [tensor("loss", np.float32(1.0), ["losses"])], wall=w) for n, w in enumerate([0, 10, 20.5])]
    path = write_run(tmp_path / "run", recs)
    (verdict,) = tensor_pass.evaluate_tensor_rules(
        ts.create_trial(path), [StalledTrainingRule(threshold=10)], None, None, True
    )
    assert verdict.status is Status.ISSUES_FOUND and verdict.triggers == 1 and verdict.first_trigger_step == 2
    assert verdict.message.endswith("10.5 s between steps (at step 2) (threshold 10 s)")


# --- UnchangedTensor ----------------------------------------------------------------------------------------
def test_unchanged_tensor_ignores_evaluation_steps() -> None:
    """A tensor saved unchanged at EVAL steps only is not judged: nothing is expected to change in evaluation."""
    data = [step(n, [tensor("w", [1.0, 2.0])], ModeKeys.EVAL) for n in range(4)]
    verdict = run(UnchangedTensor(tensor_regex="w"), data)
    assert verdict.status is Status.NO_DATA and verdict.triggers == 0
    assert verdict.message.endswith("needs num_steps=3 saved training steps of a tensor")


# --- WeightUpdateRatio --------------------------------------------------------------------------------------
def _pair(before: list[float], after: list[float], grads: tuple[float, float]) -> list[StepData]:
    return [
        step(
            n, {"main": [tensor("w", w, ["weights"])], "grad": [tensor("gradient/w", None, ["gradients"], abs_mean=g)]}
        )
        for n, (w, g) in enumerate(zip((before, after), grads, strict=True))
    ]


def test_a_ratio_exactly_at_small_threshold_is_not_small_and_not_excused() -> None:
    """A ratio equal to ``small_threshold`` is no tiny ratio: the message excuses nothing."""
    (_, res) = checks(WeightUpdateRatio(small_threshold=0.5, epsilon=0.0), _pair([1.0], [1.5], (1e-9, 2e-9)))
    assert res is not None and not res.triggered and res.value == 0.5
    assert res.detail == "update ratio from 0.5 (w) to 0.5 (w) (thresholds 0.5 and 10)"


def test_a_weight_standing_still_with_a_gradient_of_exactly_1e7_counts() -> None:
    """A gradient of mean |value| 1e-7 reaches its weight: a weight that does not move then is a tiny ratio."""
    (_, at) = checks(WeightUpdateRatio(), _pair([1.0, 2.0], [1.0, 2.0], (2e-7, 1e-7)))
    assert at is not None and at.triggered and at.tensors == ("w",) and "not counted" not in at.detail
    (_, below) = checks(WeightUpdateRatio(), _pair([1.0, 2.0], [1.0, 2.0], (2e-7, 0.99e-7)))
    assert below is not None and not below.triggered and "no gradient reaches it" in below.detail


def test_a_still_weight_at_a_step_without_its_gradient_is_not_counted() -> None:
    """A weight whose gradient was recorded before but not at this step was not trained now: not a tiny ratio."""

    def at(n: int, grad: float | None) -> StepData:
        roles = {"main": [tensor("w", [1.0, 2.0], ["weights"])]}
        roles["grad"] = [] if grad is None else [tensor("gradient/w", None, ["gradients"], abs_mean=grad)]
        return step(n, roles)

    (_, skipped) = checks(WeightUpdateRatio(), [at(0, 1e-3), at(1, None)])
    assert skipped is not None and not skipped.triggered
    assert skipped.detail.endswith("not counted: w (no gradient recorded at this step: not trained now)")
    (_, still) = checks(WeightUpdateRatio(), [at(0, 1e-3), at(1, 1e-3)])
    assert still is not None and still.triggered


# --- SaturatedActivation ------------------------------------------------------------------------------------
def test_a_unit_inside_the_limits_exactly_threshold_inactivity_percent_of_the_time_is_not_saturated() -> None:
    """A unit is saturated when inside the limits in *fewer* than ``threshold_inactivity`` % of the samples."""
    x = np.array([[0.0, 0.0], [20.0, 0.0], [20.0, 0.0], [20.0, 0.0]])  # unit 0 inside the tanh limits 1 time of 4
    (at,) = checks(SaturatedActivation(threshold_inactivity=25.0), [step(0, {"tanh": [tensor("t", x)]})])
    assert at is not None and at.value == 0.0 and at.detail == "0% of units saturated in t (threshold 50%)"
    (past,) = checks(SaturatedActivation(threshold_inactivity=25.01), [step(0, {"tanh": [tensor("t", x)]})])
    assert past is not None and past.value == 50.0


# --- ClassImbalance -----------------------------------------------------------------------------------------
def test_class_imbalance_names_the_first_mostly_mispredicted_class_only() -> None:
    """Of several mostly mispredicted classes the message names the first (by class id)."""
    roles = {"labels": [tensor("labels", [1, 1, 0, 0])], "predictions": [tensor("predictions", [0, 0, 1, 1])]}
    (res,) = checks(ClassImbalance(samples=4), [step(0, roles)])
    assert res is not None and res.triggered and res.detail == "100% of class 0 mispredicted (threshold 70%)"


# --- SimilarAcrossRuns --------------------------------------------------------------------------------------
def test_a_tensor_differing_from_several_runs_is_counted_once() -> None:
    """A tensor that differs from two other runs is one differing tensor, named once."""
    mine = tensor("w", [1.0, 2.0])
    others = ({"w": tensor("w", [1.0, 3.0])}, {"w": tensor("w", [1.0, 4.0])})
    data = StepData(0, ModeKeys.TRAIN, 0, 0.0, "worker_0", {"main": (mine,)}, others)
    (res,) = checks(SimilarAcrossRuns(other_trials=["b", "c"]), [data])
    assert res is not None and res.triggered and res.value == 1.0 and res.tensors == ("w",)
    assert res.detail.startswith("1 of 1 compared tensor(s) differ, first w")


def test_the_count_of_compared_tensors_does_not_depend_on_which_run_differs() -> None:
    """``N of M``: M counts tensors saved by this run and at least one other, not (tensor, run) comparisons."""
    w, b = tensor("w", [1.0, 2.0]), tensor("b", [0.5])
    same = {"w": tensor("w", [1.0, 2.0]), "b": tensor("b", [0.5])}
    differs = {"w": tensor("w", [1.0, 9.0]), "b": tensor("b", [0.5])}
    for others in ((same, differs), (differs, same)):
        data = StepData(0, ModeKeys.TRAIN, 0, 0.0, "worker_0", {"main": (w, b)}, others)
        (res,) = checks(SimilarAcrossRuns(other_trials=["b", "c"]), [data])
        assert res is not None and res.tensors == ("w",)
        assert res.detail == "1 of 2 compared tensor(s) differ, first w (threshold: none may differ)"


# --- second pass: modes, the figures messages name, and chunks of recorded runs ------------------------------
def test_an_evaluation_loss_in_a_chunk_does_not_make_vanishing_gradient_call_the_loss_converged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The converged-loss exemption compares training losses only: a tiny EVAL loss in a chunk is not one."""
    monkeypatch.setattr(tensor_pass, "CHUNK_STEPS", 3)  # steps 0-2 (losses only) are judged as one chunk
    recs = [record(i, [tensor("loss", np.float32(v), ["losses"])]) for i, v in enumerate([2.0, 1.0])]
    recs.append(record(2, [tensor("loss", np.float32(1e-4), ["losses"])], ModeKeys.EVAL))
    recs.append(record(3, [tensor("gradient/w", None, ["gradients"], abs_mean=1e-9)]))
    (verdict,) = evaluate(ts.create_trial(write_run(tmp_path / "run", recs)), [VanishingGradient()], write=False)
    assert verdict.status is Status.ISSUES_FOUND and verdict.first_trigger_step == 3
    assert verdict.tensors == ("gradient/w",) and "has converged" not in verdict.message


def test_overtraining_leaves_predict_losses_of_a_recorded_run_out_of_the_training_loss(tmp_path: Path) -> None:
    """PREDICT losses neither close an evaluation nor count as training losses (a recorded run, judged by chunk)."""
    plan = [(ModeKeys.TRAIN, 1.0, 3), (ModeKeys.EVAL, 2.0, 2), (ModeKeys.PREDICT, 50.0, 2), (ModeKeys.TRAIN, 1.0, 1)]
    plan += [(ModeKeys.EVAL, 2.0, 2), (ModeKeys.TRAIN, 1.0, 1)]
    recs, n = [], 0
    for mode, value, count in plan:
        for _ in range(count):
            recs.append(record(n, [tensor("loss", np.float32(value), ["losses"])], mode))
            n += 1
    (verdict,) = evaluate(ts.create_trial(write_run(tmp_path / "run", recs)), [Overtraining()], write=False)
    assert verdict.datapoints == 2
    assert "training loss 1 vs 1 at the best evaluation" in verdict.message


def test_unchanged_tensor_with_too_few_steps_says_how_many_it_saw() -> None:
    """The NoData message counts the steps the rule saw its inputs at, though it judged none."""
    verdict = run(UnchangedTensor(tensor_regex="w"), [step(n, [tensor("w", [1.0, 2.0])]) for n in range(2)])
    assert verdict.status is Status.NO_DATA
    assert verdict.message == (
        "UnchangedTensor saw its inputs at 2 step(s) but could not judge: "
        "needs num_steps=3 saved training steps of a tensor"
    )


def test_unchanged_tensor_judges_the_last_num_steps_values_only() -> None:
    """A tensor that changed once and then stayed the same for ``num_steps`` saved steps is unchanged."""
    values = [[0.0, 1.0], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0]]
    verdict = run(UnchangedTensor(tensor_regex="w"), [step(n, [tensor("w", v)]) for n, v in enumerate(values)])
    assert verdict.status is Status.ISSUES_FOUND and verdict.first_trigger_step == 3 and verdict.triggers == 1
    assert "1 of 1 tensor(s) unchanged over 3 saved steps, e.g. w" in verdict.message


def test_check_input_images_reports_the_channel_with_the_largest_absolute_mean() -> None:
    """A channel far below zero is as unnormalised as one far above: the largest |mean| is judged."""
    img = np.zeros((2, 2, 1, 1))
    img[:, 0] = -0.5
    img[:, 1] = 0.1
    (res,) = checks(CheckInputImages(regex=["img"], threshold_samples=2), [step(0, [tensor("img", img)])])
    assert res is not None and res.triggered and res.value == 0.5
    assert res.detail == "channel 0 mean -0.5 over 2 images (threshold |mean| 0.2)"


def test_dead_relu_reports_the_layer_with_the_most_dead_units() -> None:
    """The value and the message are the worst layer's share of dead units."""
    alive, dead = tensor("a_relu_output", np.ones((2, 2))), tensor("b_relu_output", np.zeros((2, 2)))
    (res,) = checks(DeadRelu(), [step(0, [alive, dead])])
    assert res is not None and res.value == 100.0 and res.tensors == ("b_relu_output",)
    assert res.detail == "100% of units dead in b_relu_output (threshold 50%)"


def test_nlp_sequence_ratio_names_the_first_tensor_of_equal_shares() -> None:
    """Of two tensors with the same share of a token, the message names the first."""
    a, b = tensor("a", np.array([0, 1, 2, 3])), tensor("b", np.array([0, 5, 6, 7]))
    (res,) = checks(NLPSequenceRatio(), [step(0, [a, b])])
    assert res is not None and not res.triggered and res.detail == "token 0 is 25% of a (threshold 50%)"


def test_overfit_counts_a_training_loss_risen_by_exactly_ten_percent_as_not_diverging() -> None:
    """The training loss diverges only when it rises *more* than 10 % above its lowest."""

    def second(train_after: float) -> str:
        data = _train_then_eval([10.0] * 20, [10.0, 10.0])[:-1]
        data += [_loss(22 + k, train_after) for k in range(10)]
        data += [_loss(32, 10.0, ModeKeys.EVAL), _loss(33, 10.0, ModeKeys.EVAL), _loss(34, train_after)]
        res = [c for c in checks(Overfit(), data) if c is not None]
        assert len(res) == 2
        return res[1].detail

    assert "vs training loss 11 (TRAIN steps 10-31)" in second(12.0)  # 10 % above 10: not diverging
    assert "the training loss rises too" not in second(12.0)
    assert "the training loss rises too (11.25, lowest 10 at TRAIN steps 0-19)" in second(12.5)


def test_overtraining_needs_the_training_loss_to_improve_by_more_than_delta() -> None:
    """A training loss that fell by exactly ``delta`` since the best evaluation has not improved."""
    data = [_loss(n, 1.0) for n in range(3)] + [_loss(3, 1.0, ModeKeys.EVAL)]
    data += [_loss(4 + k, 0.5) for k in range(20)] + [_loss(24, 1.0, ModeKeys.EVAL), _loss(25, 0.5)]
    at = [c for c in checks(Overtraining(patience_validation=1, delta=0.5), data) if c is not None]
    assert not at[1].triggered and at[1].detail.endswith("converged (or stalled), not overtrained")
    past = [c for c in checks(Overtraining(patience_validation=1, delta=0.49), data) if c is not None]
    assert past[1].triggered


# --- third pass: survivors of a fresh mutation sample (seed 19) ------------------------------------------------
def test_a_confusion_matrix_of_one_sample_is_judged() -> None:
    """One label and one prediction make a 1x1 (or 2x2) matrix: judged, not skipped as empty."""
    right = {"labels": [tensor("labels", [1])], "predictions": [tensor("predictions", [1])]}
    wrong = {"labels": [tensor("labels", [1])], "predictions": [tensor("predictions", [0])]}
    (ok,) = checks(Confusion(), [step(0, right)])
    (bad,) = checks(Confusion(), [step(0, wrong)])
    assert ok is not None and not ok.triggered
    assert bad is not None and bad.triggered and bad.tensors == ("labels", "predictions")


def test_a_nan_in_the_second_element_of_a_two_element_tensor_explodes() -> None:
    """Only a one-element tensor is read as one float: a NaN past the first element of a longer one is found."""
    (res,) = checks(ExplodingTensor(), [step(0, [tensor("w", np.array([1.0, np.nan], dtype=np.float32), ["weights"])])])
    assert res is not None and res.triggered and res.tensors == ("w",)


def test_the_unit_hint_starts_past_fifty_times_the_training_loss() -> None:
    """A first validation loss of exactly 50x the training loss gets no unit hint; 50.5x does."""
    at = [r.detail for r in checks(Overfit(), train_eval_rounds([1.0], [50.0])) if r is not None]
    past = [r.detail for r in checks(Overfit(), train_eval_rounds([1.0], [50.5])) if r is not None]
    assert at and not any("x the training loss" in d for d in at)
    assert past and "the first validation loss was 50.5x the training loss" in past[0]


def test_poor_weight_initialization_judges_its_first_steps_only_across_chunks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``steps=2``: two saved steps are judged, however many chunks the rest of the run is read in."""
    monkeypatch.setattr(tensor_pass, "CHUNK_STEPS", 2)
    recs = [
        record(i, [tensor(f"{n}/relu_input", None, ["relu_input"], variance=v) for n, v in (("a", 1.0), ("b", 100.0))])
        for i in range(6)
    ]
    (verdict,) = evaluate(ts.create_trial(write_run(tmp_path / "run", recs)), [PoorWeightInitialization(steps=2)])
    assert verdict.datapoints == 2


def test_a_tensor_whose_shape_changed_is_not_unchanged() -> None:
    """The same numbers in another shape (a sequence one token longer) are a change."""
    seq = [step(i, [tensor("emb", np.ones(3 + i % 2, dtype=np.float32), ["weights"])]) for i in range(4)]
    res = checks(UnchangedTensor(num_steps=2, collection_names=["weights"]), seq)
    assert [r is not None and r.triggered for r in res] == [False, False, False, False]
    same = [step(i, [tensor("emb", np.ones(3, dtype=np.float32), ["weights"])]) for i in range(2)]
    assert [
        r is not None and r.triggered for r in checks(UnchangedTensor(num_steps=2, collection_names=["weights"]), same)
    ] == [False, True]


def test_threshold_inactivity_accepts_fractions_of_a_percent_down_to_zero() -> None:
    """``threshold_inactivity`` is a percentage: 0.5 is allowed; below 0 fails naming it."""
    assert SaturatedActivation(threshold_inactivity=0.5).threshold_inactivity == 0.5
    with pytest.raises(ConfigError, match="threshold_inactivity"):
        SaturatedActivation(threshold_inactivity=-0.5)


# --- third pass (seed-31 survivors): regex inputs, 1-D activations, a steady decline, what rules ask to record ------
def test_class_imbalance_reads_labels_and_predictions_named_by_its_regexes_outside_their_collections(
    tmp_path: Path,
) -> None:
    """The default ``labels_regex``/``predictions_regex`` select tensors that joined no labels/predictions collection."""
    recs = [record(0, [tensor("y_labels", [1, 1, 0, 0]), tensor("y_predictions", [0, 0, 1, 1])])]
    trial = ts.create_trial(write_run(tmp_path / "run", recs))
    (verdict,) = evaluate(trial, [ClassImbalance(samples=4)], write=False)
    assert verdict.status is Status.ISSUES_FOUND and "100% of class 0 mispredicted" in verdict.message
    (named,) = evaluate(trial, [ClassImbalance(samples=4, labels_regex=["nothing"])], write=False)
    assert named.status is Status.NO_DATA


def test_a_one_dimensional_activation_is_one_unit_over_the_batch_and_any_positive_value_is_active() -> None:
    """A 1-D ReLU output is a batch of one unit; 0.5 > 0 is an activation (a unit fires below 1 too)."""
    (res,) = checks(DeadRelu(), [step(0, [tensor("fc_relu_output", np.array([0.0, 0.0, 0.0, 0.5]))])])
    assert res is not None and not res.triggered and res.value == 0.0
    (dead,) = checks(DeadRelu(), [step(0, [tensor("fc_relu_output", np.zeros(5))])])
    assert dead is not None and dead.triggered and dead.value == 100.0


def test_a_units_activity_is_its_share_of_the_batch() -> None:
    """Unit 0 fires for 1 sample of 200 (0.5 % < threshold_inactivity=1 %): dead; unit 1 fires always."""
    x = np.zeros((200, 2))
    x[0, 0], x[:, 1] = 1.0, 1.0
    (res,) = checks(DeadRelu(), [step(0, [tensor("fc_relu_output", x)])])
    assert res is not None and res.value == 50.0 and res.detail == "50% of units dead in fc_relu_output (threshold 50%)"


def test_a_steady_decline_that_no_two_windows_show_beyond_their_noise_is_progress() -> None:
    """Windows of 4 whose alternating noise hides the fall from window to window; the line through them falls."""
    pattern = (0.03, -0.03, -0.03, 0.03)
    values = [round(1.0 - 0.004 * i + pattern[i % 4], 4) for i in range(24)]
    res = checks(LossNotDecreasing(num_steps=4), losses(values))
    assert not any(r is not None and r.triggered for r in res)
    flat = [round(1.0 + pattern[i % 4], 4) for i in range(24)]  # the same noise, no decline: stalled
    assert any(r is not None and r.triggered for r in checks(LossNotDecreasing(num_steps=4), losses(flat)))


def test_rules_ask_the_hook_to_record_the_tensors_their_parameters_name() -> None:
    """PoorWeightInitialization's regex joins its ReLU-input collection; SaturatedActivation adds named collections."""
    (relu, *_) = PoorWeightInitialization(activation_inputs_regex=["enc.*_input"]).requirements()
    assert relu.collection == "relu_input" and relu.include_regex == ("enc.*_input",)
    reqs = SaturatedActivation(collection_names=["acts"]).requirements()
    assert [r.collection for r in reqs] == ["sigmoid_input", "tanh_input", "acts"]


# --- fourth pass (seed-37 survivors) ----------------------------------------------------------------------------
def test_a_one_element_activation_input_is_judged() -> None:
    """A batch of one sample of one unit, far past tanh's limits: that unit is saturated."""
    (res,) = checks(SaturatedActivation(), [step(0, {"tanh": [tensor("t", np.array([20.0]))]})])
    assert res is not None and res.value == 100.0 and res.triggered


def test_tensor_variance_needs_a_selection_naming_both_keys() -> None:
    with pytest.raises(ConfigError, match="collection_names or tensor_regex"):
        TensorVariance(max_threshold=1.0)
    assert TensorVariance(max_threshold=1.0, tensor_regex=["w"]).max_threshold == 1.0


# --- fifth pass (seed-41 survivors) -----------------------------------------------------------------------------
def test_confusion_charts_its_min_diag_as_the_threshold_line() -> None:
    right = {"labels": [tensor("labels", [1, 0])], "predictions": [tensor("predictions", [1, 0])]}
    verdict = run(Confusion(min_diag=0.8), [step(0, right)])
    assert [(s.label, s.threshold) for s in verdict.series] == [("min diagonal share", 0.8)]


def test_a_one_element_relu_output_is_judged() -> None:
    (res,) = checks(DeadRelu(), [step(0, [tensor("fc_relu_output", np.array([0.0]))])])
    assert res is not None and res.triggered and res.value == 100.0


def test_a_list_of_six_reasons_names_five_and_counts_one_more() -> None:
    from trainspect.rules._dead_gradients import listed

    items = {f"w{i}": "frozen" for i in range(6)}
    assert listed(items).endswith("w4 (frozen); and 1 more")
    assert listed(dict(list(items.items())[:5])).endswith("w4 (frozen)")


def test_literal_loss_not_decreasing_flags_a_non_finite_loss_at_a_compared_step() -> None:
    res = checks(LossNotDecreasing(num_steps=2, literal=True), losses([1.0, 0.5, float("nan"), 0.4, 0.3]))
    assert [r is not None and r.triggered for r in res] == [False, False, True, False, True]
    assert res[2] is not None and res[2].detail == "TRAIN loss is nan at step 2 (was 1 at step 0): not finite"


def test_overfit_names_the_first_training_window_as_the_lowest_when_no_later_one_is_lower() -> None:
    """The training loss stays at 1.0 (an equal, not a lower, level later), then rises: the message's lowest is the
    start's window (steps 0-31), the earlier one of equal windows."""
    res = checks(Overfit(), train_eval_rounds([1.0] * 10 + [2.0] * 4, [1.0] * 10 + [5.0] * 4))
    rising = [r.detail for r in res if r is not None and "rises too" in r.detail]
    assert rising and "the training loss rises too (1.15, lowest 1 at TRAIN steps 0-31)" in rising[0]


def test_nlp_sequence_ratio_reads_the_tensors_its_regex_names(tmp_path: Path) -> None:
    recs = [record(0, [tensor("tokens", np.array([0, 0, 0, 1]))])]
    trial = ts.create_trial(write_run(tmp_path / "run", recs))
    (named,) = evaluate(trial, [NLPSequenceRatio(tensor_regex=["tokens"])], write=False)
    assert named.status is Status.ISSUES_FOUND and "token 0 is 75% of tokens" in named.message
    (default,) = evaluate(trial, [NLPSequenceRatio()], write=False)
    assert default.status is Status.NO_DATA


def test_poor_weight_initialization_names_the_layers_whose_input_variances_differ() -> None:
    roles = {
        "act": [tensor(f"{n}/relu_input", None, ["relu_input"], variance=v) for n, v in (("a", 1.0), ("b", 100.0))]
    }
    (res,) = checks(PoorWeightInitialization(), [step(0, roles)])
    assert res is not None and res.triggered and res.tensors == ("a/relu_input", "b/relu_input")


# --- sixth pass (seed-43 survivors) -----------------------------------------------------------------------------
def test_exploding_tensor_asks_the_hook_for_the_min_and_max_of_the_tensors_it_is_pointed_at() -> None:
    """With ``tensor_regex`` or ``collection_names``, those tensors' min/max are recorded (not the default's)."""
    *_, main = ExplodingTensor(tensor_regex=["fc.*"]).requirements()
    assert main.include_regex == ("fc.*",) and main.reductions == ("min", "max") and not main.raw
    assert [r.collection for r in ExplodingTensor(collection_names=["weights"]).requirements()][-1] == "weights"
    assert [r.collection for r in ExplodingTensor().requirements()] == ["losses", "gradients"]


# --- seventh pass (boundaries and constants, fifth session) ------------------------------------------------------
def test_literal_loss_not_decreasing_compares_with_the_loss_exactly_num_steps_before() -> None:
    """At step 4 with ``num_steps=2`` the loss compared with is step 2's, not step 1's (the history keeps no older)."""
    two = checks(LossNotDecreasing(num_steps=2, diff_percent=10.0, literal=True), losses([16.0, 12.0, 9.0, 9.5, 10.0]))
    assert two[2] is not None and two[2].detail.startswith("TRAIN loss went from 16 (step 0) to 9 (step 2)")
    assert two[4] is not None and two[4].detail.startswith("TRAIN loss went from 9 (step 2) to 10 (step 4)")


def test_literal_loss_not_decreasing_counts_a_rise_from_exactly_zero_as_minus_100_percent() -> None:
    """From a loss of exactly 0: a rise is a decrease of -100 %, staying at 0 one of 0 % (below the threshold)."""
    (_, res) = checks(LossNotDecreasing(num_steps=1, literal=True), losses([0.0, 0.5]))
    assert res is not None and res.triggered and res.value == -100.0
    assert "decrease -100% (threshold 0.1%)" in res.detail
    (_, flat) = checks(LossNotDecreasing(num_steps=1, literal=True), losses([0.0, 0.0]))
    assert flat is not None and flat.triggered and flat.value == 0.0


def test_exploding_tensor_only_nan_finds_a_nan_in_a_tensor_recorded_as_reductions_only() -> None:
    """A tensor saved as reductions (no raw value): ``only_nan`` flags a NaN mean, not an infinite max."""
    nan = [step(0, [tensor("w", None, ["weights"], mean=float("nan"))])]
    inf = [step(0, [tensor("w", None, ["weights"], max=float("inf"))])]
    (found,) = checks(ExplodingTensor(only_nan=True, collection_names=["weights"]), nan)
    (not_nan,) = checks(ExplodingTensor(only_nan=True, collection_names=["weights"]), inf)
    assert found is not None and found.triggered and found.tensors == ("w",)
    assert not_nan is not None and not not_nan.triggered


def test_poor_weight_initialization_reads_the_activation_inputs_its_regex_names(tmp_path: Path) -> None:
    """Inputs recorded outside the ``relu_input`` collection (another tool's run) are read through the regex."""
    recs = [
        record(
            n,
            [tensor(f"{layer}_input", None, ["default"], variance=v) for layer, v in (("enc1", 1.0), ("enc2", 100.0))],
        )
        for n in range(3)
    ]
    trial = ts.create_trial(write_run(tmp_path / "run", recs))
    (named,) = evaluate(trial, [PoorWeightInitialization(activation_inputs_regex=["enc.*_input"])], write=False)
    assert named.status is Status.ISSUES_FOUND and "input variances (2 layers) differ by a factor" in named.message
    (default,) = evaluate(trial, [PoorWeightInitialization()], write=False)
    assert default.status is Status.NO_DATA


@pytest.mark.parametrize("rule", [UnchangedTensor, TensorVariance, AllZero])
def test_rules_of_any_tensor_require_a_selection_at_construction(rule: type) -> None:
    extra = {"max_threshold": 1.0} if rule is TensorVariance else {}
    with pytest.raises(ConfigError, match="give collection_names or tensor_regex"):
        rule(**extra)
    assert rule(tensor_regex=["w"], **extra).params["tensor_regex"] == ["w"]


def test_losses_flat_at_exactly_zero_are_no_overfit_nor_overtraining() -> None:
    """A solved task: training and validation losses of exactly 0 neither rise nor fall (no division, no alarm)."""
    rounds = train_eval_rounds([0.0] * 40, [0.0] * 40)
    assert not any(c is not None and c.triggered for c in checks(Overfit(), rounds))
    assert not any(c is not None and c.triggered for c in checks(Overtraining(), rounds))
