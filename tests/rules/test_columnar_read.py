"""Issue 30: the offline rules read one-element float tensors straight from the index columns.

The columnar read (``read_columns``) and the vectorised rules (``columns``) must give exactly the verdicts the
Trial's per-step API and step-by-step feeding give: on a run of several modes, two workers, a gap, NaN losses, a
tensor with raw values beside the losses, and a corrupt index record (skipped with a warning, as before).
"""

from __future__ import annotations

import dataclasses
import logging
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
)
from trainspect.rules.tensor_pass import evaluate_tensor_rules
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.index import TrialIndex


def _rules() -> list[ts.rules.TensorRule]:
    return [
        VanishingGradient(),
        ExplodingTensor(),
        ExplodingTensor(only_nan=True),
        PoorWeightInitialization(),
        LossNotDecreasing(),
        LossNotDecreasing(num_steps=3),
        LossNotDecreasing(literal=True),
        Overfit(),
        Overtraining(),
        StalledTrainingRule(),
    ]


def _records(worker: str, steps: int, skip: set[int], seed: int) -> list[StepRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(steps):
        if i in skip:
            continue  # a gap: this worker never wrote the step
        mode = ModeKeys.EVAL if i % 10 >= 7 else ModeKeys.TRAIN
        loss = 1.0 + 0.002 * i + 0.05 * rng.standard_normal()
        if i == 33:
            loss = float("nan")
        tensors = {"loss": TensorRecord("loss", np.float32(loss), {}, frozenset({"losses"}))}
        tensors["acc"] = TensorRecord("acc", np.float64(rng.random()), {}, frozenset({"metrics"}))
        if i % 25 == 0:
            value = rng.standard_normal((3, 4)).astype(np.float32)
            tensors["fc.weight"] = TensorRecord("fc.weight", value, {}, frozenset({"weights"}))
        out.append(
            StepRecord(mode, i // 10 * 7 + i % 10 if mode is ModeKeys.TRAIN else i, i, 100.0 + i, worker, tensors)
        )
    return out


def _corrupt_one_record(run: Path) -> None:
    index = sorted((run / "tensors" / "worker_1").glob("index-*.idx"))[0]
    data = bytearray(index.read_bytes())
    at = data.find(b'"g":40,')
    data[at + 5] ^= 0x01  # inside the payload: the record fails its checksum
    index.write_bytes(bytes(data))


@pytest.fixture()
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    synthetic_run.start_run(path, "job", {"framework": "pytorch"})
    synthetic_run.write_worker_tensors(path, "worker_0", _records("worker_0", 160, {57}, 1))
    synthetic_run.write_worker_tensors(path, "worker_1", _records("worker_1", 160, {58, 59}, 2), end=True)
    _corrupt_one_record(path)
    return path


def _plain(verdicts: list[ts.rules.Verdict]) -> list[object]:
    """The verdicts as dicts, NaN spelled out (NaN != NaN would make equal series differ)."""
    return [eval_safe({k: v for k, v in dataclasses.asdict(x).items() if k != "evaluated_at"}) for x in verdicts]


def eval_safe(value: object) -> object:
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if isinstance(value, dict):
        return {k: eval_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [eval_safe(v) for v in value]
    return value


@pytest.mark.parametrize("final", [True, False])
def test_columnar_read_gives_the_verdicts_of_the_per_step_read(run: Path, final: bool) -> None:
    def verdicts(columns: bool, read: bool) -> list[object]:
        trial = ts.create_trial(str(run))
        return _plain(evaluate_tensor_rules(trial, _rules(), None, None, final, columns=columns, read_columns=read))

    slow = verdicts(False, False)
    assert verdicts(True, True) == slow
    assert verdicts(False, True) == slow  # step by step from the columns' records
    assert verdicts(True, False) == slow
    assert any(v["triggers"] for v in slow)


def test_whole_evaluation_is_unchanged(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def evaluate() -> list[object]:
        trial = ts.create_trial(str(run))
        return _plain(ts.rules.evaluate(trial, _rules(), write=False, actions=False, final=True))

    fast = evaluate()
    monkeypatch.setattr(TrialIndex, "step_columns", lambda self, steps: None)
    monkeypatch.setattr(TrialIndex, "scalar_series", lambda self, name, worker=None: None)
    assert evaluate() == fast
    assert any("worker_1" in str(v["message"]) or v["details"].get("missing_workers") for v in fast)


def test_corrupt_record_is_skipped_with_a_warning(run: Path, caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        trial = ts.create_trial(str(run))
    assert trial.corrupt_records == 1
    assert any("corrupt index record" in p for p in trial.problems)
    assert 40 not in trial.tensor("loss").workers(40) or trial.tensor("loss").workers(40) == ["worker_0"]


def test_index_objects_match_the_columns(run: Path) -> None:
    trial = ts.create_trial(str(run))
    index = trial._index
    assert index.columnar
    for worker in ("worker_0", "worker_1"):
        series = index.scalar_series("loss", worker)
        assert series is not None
        per_step = trial.tensor("loss").values_at(trial.steps(show_incomplete_steps=True), worker=worker)
        assert series.steps.tolist() == sorted(per_step)
        expected = np.array([float(per_step[s]) for s in series.steps.tolist()])
        np.testing.assert_array_equal(series.values, expected)
    assert index.scalar_series("fc.weight") is None  # raw values in a data file: read through the Trial
    codes, mode_steps, walls = index.step_columns(np.asarray(index.sorted_steps))
    infos = [index.steps[s] for s in index.sorted_steps]
    assert codes.tolist() == [int(i.mode) for i in infos]
    assert mode_steps.tolist() == [i.mode_step for i in infos]
    assert walls.tolist() == [i.wall_time for i in infos]
    assert trial.incomplete_steps() == {40: ["worker_1"], 57: ["worker_0"], 58: ["worker_1"], 59: ["worker_1"]}
