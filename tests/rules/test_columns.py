"""The offline fast path (whole columns of scalar steps) gives the verdicts step-by-step feeding gives (issue 30).

Random loss runs — training phases with evaluations between them, noise, plateaus, rises, NaN and Inf, steps
without a loss, wall-time gaps, one or two workers, chunks smaller than the run — are judged by each rule twice,
with ``columns=True`` and ``columns=False``; the verdicts must be identical, field by field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import synthetic_run

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.rules import (
    ExplodingTensor,
    LossNotDecreasing,
    Overfit,
    Overtraining,
    PoorWeightInitialization,
    StalledTrainingRule,
    VanishingGradient,
    tensor_pass,
)
from trainspect.rules.columns import Columns
from trainspect.rules.tensor_pass import evaluate_tensor_rules
from trainspect.step import StepRecord, TensorRecord


def _rules() -> list[ts.rules.TensorRule]:
    return [
        VanishingGradient(),
        ExplodingTensor(),
        ExplodingTensor(only_nan=True),
        PoorWeightInitialization(),
        PoorWeightInitialization(steps=3, patience=2),
        LossNotDecreasing(),
        LossNotDecreasing(num_steps=3),
        LossNotDecreasing(mode="TRAIN", num_steps=4),
        LossNotDecreasing(literal=True, num_steps=3),
        Overfit(),
        Overfit(start_step=30, patience=1),
        Overfit(literal=True, patience=1),
        Overtraining(),
        Overtraining(patience_validation=2),
        Overtraining(literal=True),
        StalledTrainingRule(threshold=2.0),
    ]


def _losses(rng: np.random.Generator, n: int, shape: str) -> np.ndarray:
    t = np.arange(n, dtype=np.float64)
    base = {
        "falling": 2.0 * np.exp(-t / max(1, n / 3)),
        "flat": np.full(n, 1.0),
        "rising": 1.0 + t / max(1, n / 4),
        "dip": 1.0 + 0.5 * np.cos(t / max(1, n / 6)),
    }[shape]
    return base + rng.choice([0.0, 0.01, 0.2]) * rng.standard_normal(n)


def _records(seed: int, worker: str) -> list[StepRecord]:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(40, 400))
    losses = _losses(rng, n, str(rng.choice(["falling", "flat", "rising", "dip"])))
    bad = rng.random(n) < rng.choice([0.0, 0.0, 0.03])
    losses[bad] = rng.choice([np.nan, np.inf, -np.inf], size=int(bad.sum()))
    if rng.random() < 0.2:  # diverges for good
        losses[int(rng.integers(n // 2, n)) :] = np.nan
    every_eval = int(rng.choice([0, 7, 25, 60]))
    records, counts, wall = [], {ModeKeys.TRAIN: 0, ModeKeys.EVAL: 0}, 1000.0
    for i in range(n):
        mode = ModeKeys.EVAL if every_eval and i % every_eval >= every_eval - rng.integers(1, 4) else ModeKeys.TRAIN
        wall += float(rng.choice([0.01, 0.02, 3.0], p=[0.6, 0.38, 0.02]))
        tensors = {}
        if rng.random() > 0.05:  # a few steps save no loss
            value = np.float32(losses[i] * (1.5 if mode is ModeKeys.EVAL else 1.0))
            tensors["loss"] = TensorRecord("loss", value, {}, frozenset({"losses"}))
        records.append(StepRecord(mode, counts[mode], i, wall, worker, tensors))
        counts[mode] += 1
    return records


def _write(path: Path, seed: int, workers: int) -> Path:
    synthetic_run.start_run(path, f"cols-{seed}", {"framework": "pytorch"})
    if workers == 1:
        synthetic_run.write_tensors(path, _records(seed, "worker_0"))
        return path
    for w in range(workers):
        synthetic_run.write_worker_tensors(path, f"worker_{w}", _records(seed * 10 + w, f"worker_{w}"), end=w == 1)
    return path


def _as_json(verdicts: list[ts.rules.Verdict]) -> list[str]:
    return [json.dumps(v.to_dict(), sort_keys=True, default=str) for v in verdicts]


@pytest.mark.parametrize("seed", range(24))
def test_whole_columns_give_the_step_by_step_verdicts(
    tmp_path: Path, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _write(tmp_path / "run", seed, workers=2 if seed % 4 == 3 else 1)
    monkeypatch.setattr(tensor_pass, "CHUNK_STEPS", int(np.random.default_rng(seed).choice([16, 64, 4096])))
    fast = evaluate_tensor_rules(ts.create_trial(str(run)), _rules(), None, None, True, columns=True)
    slow = evaluate_tensor_rules(ts.create_trial(str(run)), _rules(), None, None, True, columns=False)
    for a, b in zip(_as_json(fast), _as_json(slow), strict=True):
        assert a == b


def test_the_fast_path_is_taken_and_judges(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A loss-only run reaches every rule's check_columns (not its step check), and a NaN is still found."""
    calls: dict[str, int] = {}
    for cls in (
        VanishingGradient,
        ExplodingTensor,
        PoorWeightInitialization,
        LossNotDecreasing,
        Overfit,
        Overtraining,
        StalledTrainingRule,
    ):
        original = cls.check_columns

        def counting(self: ts.rules.TensorRule, state: object, cols: Columns, _o=original) -> object:
            calls[type(self).__name__] = calls.get(type(self).__name__, 0) + 1
            return _o(self, state, cols)

        monkeypatch.setattr(cls, "check_columns", counting)
        if cls is not PoorWeightInitialization:  # which judges its first `steps` steps with its step check
            monkeypatch.setattr(cls, "check", lambda *a: pytest.fail("fed step by step"))
    records = [
        StepRecord(
            ModeKeys.TRAIN,
            i,
            i,
            1000.0 + i,
            "worker_0",
            {
                "loss": TensorRecord(
                    "loss", np.float32(math.nan if i == 50 else 1.0 / (i + 1)), {}, frozenset({"losses"})
                )
            },
        )
        for i in range(200)
    ]
    synthetic_run.start_run(tmp_path / "r", "fast", {"framework": "pytorch"})
    synthetic_run.write_tensors(tmp_path / "r", records)
    rules = [
        VanishingGradient(),
        ExplodingTensor(),
        PoorWeightInitialization(steps=1),
        LossNotDecreasing(),
        Overfit(),
        Overtraining(),
        StalledTrainingRule(),
    ]
    verdicts = evaluate_tensor_rules(ts.create_trial(str(tmp_path / "r")), rules, None, None, True)
    assert set(calls) == {type(r).__name__ for r in rules}
    exploding = verdicts[1]
    assert exploding.status.value == "IssuesFound" and exploding.first_trigger_step == 50
    assert exploding.triggers == 1 and exploding.datapoints == 200
