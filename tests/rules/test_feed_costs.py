"""Issue 30: the offline feed reads whole columns of steps, chunk by chunk; its work grows linearly with the steps.

No wall-clock assertions: the work is counted (reads per chunk, per-step calls into the Trial) and verdicts are
compared between chunk sizes.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import synthetic_run

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.rules import ExplodingTensor, LossNotDecreasing, StalledTrainingRule, tensor_pass
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.tensor import Tensor


def _run(path: Path, steps: int, matrix: bool = False) -> Path:
    rng = np.random.default_rng(1)
    loss = 1.0 + 0.1 * rng.standard_normal(steps)
    loss[steps // 2 :] += 0.5  # a rise: LossNotDecreasing triggers
    records = []
    for i in range(steps):
        tensors = {"loss": TensorRecord("loss", np.float32(loss[i]), {}, frozenset({"losses"}))}
        if matrix:
            value = np.full((3, 4), np.nan if i == steps - 3 else float(i), dtype=np.float32)
            tensors["fc.weight"] = TensorRecord("fc.weight", value, {}, frozenset({"weights"}))
        records.append(StepRecord(ModeKeys.TRAIN, i, i, 100.0 + i, "worker_0", tensors))
    synthetic_run.start_run(path, "job", {"framework": "pytorch"})
    synthetic_run.write_tensors(path, records)
    return path


def _rules() -> list:
    return [LossNotDecreasing(), ExplodingTensor(), StalledTrainingRule()]


def _verdicts(run: Path) -> list[dict]:
    verdicts = ts.rules.evaluate(ts.create_trial(str(run)), _rules(), write=False, actions=False, final=True)
    return [{k: v for k, v in dataclasses.asdict(x).items() if k != "evaluated_at"} for x in verdicts]


class _Counts:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chunks = 0
        self.reads = 0
        values_at, read = Tensor.values_at, Tensor._read

        def counted_values_at(tensor: Tensor, *args: object, **kw: object) -> object:
            self.chunks += 1
            return values_at(tensor, *args, **kw)  # type: ignore[arg-type]

        def counted_read(tensor: Tensor, *args: object) -> object:
            self.reads += 1
            return read(tensor, *args)  # type: ignore[arg-type]

        monkeypatch.setattr(Tensor, "values_at", counted_values_at)
        monkeypatch.setattr(Tensor, "_read", counted_read)


@pytest.mark.parametrize("steps", [50, 200])
def test_loss_values_are_read_as_one_column_per_chunk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, steps: int
) -> None:
    run = _run(tmp_path / "run", steps)
    monkeypatch.setattr(tensor_pass, "CHUNK_STEPS", 16)
    counts = _Counts(monkeypatch)
    _verdicts(run)
    assert counts.chunks <= -(-steps // 16)  # at most one read per chunk (losses come from the index columns)
    assert counts.reads == 0  # no per-step read: the losses are one column


def test_per_step_calls_into_the_trial_do_not_grow_with_the_rules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _run(tmp_path / "run", 120)
    trial = ts.create_trial(str(run))
    calls = {"mode": 0}
    mode = type(trial).mode

    def counted_mode(self: object, step: int) -> object:
        calls["mode"] += 1
        return mode(self, step)  # type: ignore[arg-type]

    monkeypatch.setattr(type(trial), "mode", counted_mode)
    ts.rules.evaluate(trial, _rules(), write=False, actions=False, final=True)
    assert calls["mode"] <= 4  # the modes of the steps come from the index at once (only the trigger steps ask)


def test_large_values_make_smaller_chunks() -> None:
    assert tensor_pass.chunk_steps(8) == tensor_pass.CHUNK_STEPS
    assert tensor_pass.chunk_steps(tensor_pass.CHUNK_BYTES) == 1
    assert tensor_pass.chunk_steps(tensor_pass.CHUNK_BYTES // 10) == 10


@pytest.mark.parametrize("matrix", [False, True])
def test_verdicts_do_not_depend_on_the_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, matrix: bool) -> None:
    run = _run(tmp_path / "run", 300, matrix=matrix)
    whole = _verdicts(run)
    assert whole[0]["status"] == "IssuesFound"
    if matrix:
        assert whole[1]["status"] == "IssuesFound" and whole[1]["first_trigger_step"] == 297
    for size in (1, 7, 64):
        monkeypatch.setattr(tensor_pass, "CHUNK_STEPS", size)
        assert _verdicts(run) == whole


def test_column_values_equal_step_by_step_values(tmp_path: Path) -> None:
    run = _run(tmp_path / "run", 30, matrix=True)
    trial = ts.create_trial(str(run))
    for name in ("loss", "fc.weight"):
        tensor = trial.tensor(name)
        single = {s: tensor.value(s) for s in tensor.steps()}
        column = tensor.values_at(tensor.steps())
        assert list(column) == list(single)
        for step, value in single.items():
            got = column[step]
            assert got.dtype == value.dtype and got.shape == value.shape
            np.testing.assert_array_equal(got, value)
