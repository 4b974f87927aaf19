"""Issue 31: the Trial's tensors and the verdicts as pandas DataFrames (trainspect.frames)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic_run import end_run, write_tensors, write_worker_tensors
from test_shards import shard_0, write_run

import trainspect as ts
from trainspect.frames import NotRecorded, verdicts_frame, wide
from trainspect.modes import ModeKeys
from trainspect.reductions import Reduction
from trainspect.rules import Status, Verdict
from trainspect.rules import verdicts_frame as exported
from trainspect.step import StepRecord, TensorRecord

KEYS = {"step": "int64", "mode": "category", "mode_step": "int64", "worker": "category", "name": "category"}


def _records(worker: str = "worker_0") -> list[StepRecord]:
    rng = np.random.default_rng(0)
    out = []
    for s in range(12):
        mode, ms = (ModeKeys.TRAIN, s) if s < 8 else (ModeKeys.EVAL, s - 8)
        w = rng.standard_normal(6).astype(np.float32)
        tensors = {
            "loss": TensorRecord("loss", np.array(1.0 / (s + 1), np.float32), collections=frozenset({"losses"})),
            "acc": TensorRecord("acc", np.array(s, np.int64), collections=frozenset({"metrics"})),
            "w": TensorRecord("w", w, collections=frozenset({"weights"})),
            "g": TensorRecord(
                "g",
                None,
                {Reduction("l2", False): float(s) * 0.5, Reduction("max", True): 3.0 + s},
                collections=frozenset({"gradients"}),
                shape=(6,),
            ),
        }
        out.append(StepRecord(mode, ms, s, 1000.0 + s, worker, tensors))
    return out


@pytest.fixture(scope="module")
def trial(tmp_path_factory: pytest.TempPathFactory) -> ts.Trial:
    run = tmp_path_factory.mktemp("frames") / "run"
    write_tensors(run, _records())
    return ts.create_trial(run)


def test_values_are_the_trials_exactly(trial: ts.Trial) -> None:
    df = trial.dataframe(names=["loss", "acc"])
    assert list(df.columns) == [*KEYS, "value"]
    for row in df.itertuples():
        assert row.value == trial.tensor(row.name).value(row.step).item()
        assert (row.mode, row.mode_step) == (trial.mode(row.step).name, trial.mode_step(row.step))
    loss = df[df["name"] == "loss"]
    assert loss["value"].dtype == np.float64 and loss["step"].tolist() == list(range(12))
    assert loss["value"].tolist() == [float(np.float32(1.0 / (s + 1))) for s in range(12)]
    assert set(df["worker"]) == {"worker_0"}


def test_array_values_are_kept_as_arrays(trial: ts.Trial) -> None:
    df = trial.dataframe(names="w")
    assert df["value"].dtype == object and len(df) == 12
    for row in df.itertuples():
        np.testing.assert_array_equal(row.value, trial.tensor("w").value(row.step))


def test_filters_by_collection_mode_and_pattern(trial: ts.Trial) -> None:
    assert set(trial.dataframe(collection="losses")["name"]) == {"loss"}
    ev = trial.dataframe(names="loss", mode="EVAL")
    assert ev["step"].tolist() == [8, 9, 10, 11] and ev["mode_step"].tolist() == [0, 1, 2, 3]
    assert set(ev["mode"]) == {"EVAL"}
    assert sorted(set(trial.dataframe(names="[la]*")["name"])) == ["acc", "loss"]
    assert set(trial.dataframe()["name"]) == {"loss", "acc", "w"}  # "g" has reductions only: no raw value


def test_reductions_are_columns_equal_to_reduction_value(trial: ts.Trial) -> None:
    df = trial.dataframe(names=["g", "w"], reductions=["l2", "abs_max"])
    assert list(df.columns) == [*KEYS, "l2", "abs_max"]
    assert (df.dtypes[["l2", "abs_max"]] == np.float64).all() and len(df) == 24
    for row in df.itertuples():
        tensor = trial.tensor(row.name)
        assert row.l2 == tensor.reduction_value(row.step, "l2")
        assert row.abs_max == tensor.reduction_value(row.step, "abs_max")


def test_wide_pivots_one_column_per_tensor(trial: ts.Trial) -> None:
    flat = trial.dataframe(names=["loss", "acc"], wide=True)
    assert list(flat.columns) == ["step", "mode", "mode_step", "worker", "acc", "loss"]
    assert flat["loss"].tolist() == [trial.tensor("loss").value(s).item() for s in range(12)]
    reds = wide(trial.dataframe(names=["g"], reductions=["l2", "abs_max"]))
    assert list(reds.columns)[4:] == ["g:l2", "g:abs_max"] and reds["g:l2"].tolist()[:3] == [0.0, 0.5, 1.0]


def test_unknown_names_raise_one_error_naming_what_exists(trial: ts.Trial) -> None:
    with pytest.raises(NotRecorded, match=r"no tensor 'lose' in this run; recorded: acc, g, loss, w"):
        trial.dataframe(names=["loss", "lose"])
    with pytest.raises(KeyError, match="collection 'nope'.*recorded: .*losses"):
        trial.dataframe(collection="nope")
    with pytest.raises(NotRecorded, match="worker 'worker_9'.*recorded: worker_0"):
        trial.dataframe(workers="worker_9")
    with pytest.raises(ValueError, match="reduction 'median' is unknown"):
        trial.dataframe(reductions="median")


def test_empty_run_gives_empty_frames_with_dtypes(tmp_path: Path) -> None:
    write_tensors(tmp_path / "run", [])
    trial = ts.create_trial(tmp_path / "run")
    df = trial.dataframe()
    assert df.empty and dict(df.dtypes.astype(str)) == {**KEYS, "value": "float64"}
    df = trial.dataframe(names="loss", reductions=["mean"], wide=False)  # nothing recorded yet: no error
    assert df.empty and list(df.columns) == [*KEYS, "mean"]
    assert wide(df).empty
    frame = verdicts_frame(tmp_path / "run")
    assert frame.empty and frame.dtypes["first_trigger_step"] == "Int64"


def test_each_workers_rows(tmp_path: Path) -> None:
    run = tmp_path / "run"
    write_worker_tensors(run, "worker_0", _records("worker_0")[:4])
    write_worker_tensors(run, "worker_1", _records("worker_1")[:4], end=True)
    trial = ts.create_trial(run)
    both = trial.dataframe(names="loss", workers="all")
    assert both.groupby("worker").size().to_dict() == {"worker_0": 4, "worker_1": 4}
    default = trial.dataframe(names="loss")  # two workers per step: the Trial's value, the first worker's
    assert default["value"].tolist() == [trial.tensor("loss").value(s).item() for s in range(4)]
    assert set(default["worker"]) == {"worker_0"}
    one = trial.dataframe(names="loss", workers="worker_1")
    assert one["value"].tolist() == [trial.tensor("loss").value(s, worker="worker_1").item() for s in range(4)]


def test_verdicts_frame_one_row_per_rule(tmp_path: Path) -> None:
    verdicts = [
        Verdict(
            "LossNotDecreasing",
            Status.ISSUES_FOUND,
            "stuck",
            kind="tensor",
            datapoints=40,
            triggers=3,
            first_trigger_step=10,
            last_trigger_step=30,
            workers=("worker_0", "worker_1"),
            mode="TRAIN",
        ),
        Verdict("CPUBottleneck", Status.NO_ISSUES_FOUND, kind="profiler", datapoints=7),
    ]
    write_tensors(tmp_path / "run", [])
    end_run(tmp_path / "run", verdicts)
    df = exported(tmp_path / "run")
    assert df["rule"].tolist() == ["LossNotDecreasing", "CPUBottleneck"]
    first = df.iloc[0]
    assert (first.status, first.triggers) == ("IssuesFound", 3)
    assert (first.first_trigger_step, first.last_trigger_step) == (10, 30)
    assert first.workers == "worker_0, worker_1" and first.kind == "tensor" and first.message == "stuck"
    assert pd.isna(df.iloc[1].first_trigger_step) and df.iloc[1].kind == "profiler"
    pd.testing.assert_frame_equal(df, verdicts_frame(verdicts).assign(evaluated_at=df["evaluated_at"]))


@pytest.mark.parametrize("fixture", ["smdebug_trial_raw", "smdebug_trial_reductions"])
def test_smdebug_trials_read_the_same(fixture: str) -> None:
    trial = ts.create_trial(Path(__file__).resolve().parents[1] / "data" / fixture)
    for row in trial.dataframe().itertuples():
        np.testing.assert_array_equal(np.asarray(row.value), trial.tensor(row.name).value(row.step))
    reds = trial.dataframe(reductions=["mean", "abs_max"])
    assert len(reds) > 0
    for row in reds.itertuples():
        tensor = trial.tensor(row.name)
        for red, got in (("mean", row.mean), ("abs_max", row.abs_max)):
            try:
                want = tensor.reduction_value(row.step, red)
            except KeyError:
                want = float("nan")
            assert got == want or (np.isnan(got) and np.isnan(want))


def test_dataframe_of_a_sharded_tensor_is_the_assembled_value(tmp_path: Path) -> None:
    """Issue 31: trial.dataframe() gives the full tensor (and its combined reductions), worker= each piece."""
    full = {s: np.arange(12, dtype=np.float32).reshape(4, 3) + s for s in range(3)}
    trial = ts.create_trial(write_run(tmp_path, {s: {"w": shard_0(full[s], 2)} for s in range(3)}))
    df = trial.dataframe(names="w")
    for row in df.itertuples():
        np.testing.assert_array_equal(row.value, full[row.step])
    reds = trial.dataframe(names="w", reductions=["l2", "abs_max"])
    assert reds["l2"].tolist() == [trial.tensor("w").reduction_value(s, "l2") for s in range(3)]
    piece = trial.dataframe(names="w", workers="worker_1")
    np.testing.assert_array_equal(piece["value"].iloc[0], trial.tensor("w").value(0, worker="worker_1"))
