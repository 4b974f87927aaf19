"""The thresholds a rule uses when none is given: the documented defaults (docs/rules.md, smdebug's where it has one)."""

from __future__ import annotations

import pytest

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
    StalledTrainingRule,
    UnchangedTensor,
    VanishingGradient,
    WeightUpdateRatio,
)

DEFAULTS = [
    (VanishingGradient, {}, {"threshold": 1e-07, "converged_loss_ratio": 0.001, "dead_steps": 3, "literal": False}),
    (ExplodingTensor, {}, {"only_nan": False, "origin": True, "amp_skips_allowed": 10}),
    (
        PoorWeightInitialization,
        {},
        {"threshold": 10.0, "distribution_range": 0.001, "patience": 5, "steps": 10, "literal": False},
    ),
    (
        SaturatedActivation,
        {},
        {
            "threshold_tanh_min": -9.4999,
            "threshold_tanh_max": 9.4999,
            "threshold_sigmoid_min": -23.0,
            "threshold_sigmoid_max": 16.99999,
            "threshold_inactivity": 1.0,
            "threshold_layer": 50.0,
        },
    ),
    (DeadRelu, {}, {"threshold_inactivity": 1.0, "threshold_layer": 50.0}),
    (
        WeightUpdateRatio,
        {},
        {
            "num_steps": None,
            "large_threshold": 10.0,
            "small_threshold": 1e-08,
            "epsilon": 1e-09,
            "dead_steps": 3,
            "literal": False,
        },
    ),
    (AllZero, {"tensor_regex": "x"}, {"threshold": 100.0}),
    (ClassImbalance, {}, {"threshold_imbalance": 10.0, "threshold_misprediction": 0.7, "samples": 500}),
    (Confusion, {}, {"category_no": None, "min_diag": 0.9, "max_off_diag": 0.1}),
    (
        LossNotDecreasing,
        {},
        {"num_steps": 10, "diff_percent": 0.1, "increase_threshold_percent": 5.0, "mode": None, "literal": False},
    ),
    (Overfit, {}, {"start_step": 0, "patience": 1, "ratio_threshold": 0.1, "literal": False}),
    (Overtraining, {}, {"patience_train": 5, "patience_validation": 10, "delta": 0.01, "literal": False}),
    (UnchangedTensor, {"tensor_regex": "x"}, {"num_steps": 3, "rtol": 1e-05, "atol": 1e-08, "equal_nan": False}),
    (CheckInputImages, {}, {"threshold_mean": 0.2, "threshold_samples": 500, "channel": 1}),
    (NLPSequenceRatio, {}, {"token_values": ["0"], "token_thresholds_percent": ["50"]}),
    (StalledTrainingRule, {}, {"threshold": 1800.0, "stop_training_on_fire": False}),
]


@pytest.mark.parametrize(("cls", "needed", "defaults"), DEFAULTS, ids=[c.__name__ for c, _n, _d in DEFAULTS])
def test_default_thresholds(cls: type, needed: dict, defaults: dict) -> None:
    rule = cls(**needed)
    assert {k: rule.params[k] for k in defaults} == defaults
    assert {k: getattr(rule, k) for k in defaults} == defaults
