"""The tensor files written by TensorFileWriter read back exactly through the Trial (issue 18: tests that can fail).

No framework: the records are built from NumPy arrays, so the expected values are the arrays themselves.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _support.package import PACKAGE_ROOT

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store import framing
from trainspect.store.tensor_file import KIND_INDEX, KIND_TENSOR, TensorFileWriter, reduction_key

RNG = np.random.default_rng(7)
BIG = RNG.standard_normal(300_000).astype(np.float32)  # 1.2 MB: written past the 1 MB gathering buffer
ARRAYS = {
    "w": RNG.standard_normal((3, 5)).astype(np.float32),
    "d": RNG.standard_normal(4),
    "i": np.arange(6, dtype=np.int64).reshape(2, 3),
    "b": np.array([True, False, True]),
    "u": np.arange(7, dtype=np.uint8),
    "t": RNG.standard_normal((4, 3)).astype(np.float32).T,  # not C-contiguous
    "e": np.zeros((0, 3), np.float32),
}


def _record(
    step: int, mode: ModeKeys = ModeKeys.TRAIN, mode_step: int | None = None, **extra: TensorRecord
) -> StepRecord:
    tensors = {
        name: TensorRecord(name, arr * (step + 1) if arr.dtype.kind == "f" else arr) for name, arr in ARRAYS.items()
    }
    tensors.update(extra)
    return StepRecord(mode, step if mode_step is None else mode_step, step, 1000.0 + step, "worker_0", tensors)


def _write(out: Path, records: list[StepRecord]) -> Path:
    folder = out / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    for rec in records:
        writer.write(rec)
    writer.close()
    return folder


def test_arrays_round_trip_with_dtype_shape_and_step_metadata(tmp_path: Path) -> None:
    _write(tmp_path, [_record(0), _record(1), _record(2, ModeKeys.EVAL, 0), _record(3, ModeKeys.TRAIN, 2)])
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2, 3] and trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert trial.workers() == ["worker_0"] and trial.tensor("w").workers(3) == ["worker_0"]
    assert trial.mode(2) is ModeKeys.EVAL and trial.mode_step(3) == 2 and trial.step_wall_time(3) == 1003.0
    for step in range(4):
        for name, arr in ARRAYS.items():
            expected = arr * (step + 1) if arr.dtype.kind == "f" else arr
            got = trial.tensor(name).value(step)
            assert got.dtype == expected.dtype and got.shape == expected.shape, name
            np.testing.assert_array_equal(got, expected)
    assert trial.tensor("e").shape(1) == (0, 3)


def test_scalars_live_inline_and_keep_non_finite_values(tmp_path: Path) -> None:
    scalars = {
        "loss": np.float32(0.25),
        "nan": np.array(np.nan),
        "inf": np.array([np.inf]),
        "ninf": np.array(-np.inf),
        "n": np.array(7, np.int64),
        "flag": np.array(True),
        "zero_d": np.array(2.5, np.float64),
    }
    rec = StepRecord(
        ModeKeys.TRAIN, 0, 0, 5.0, "worker_0", {k: TensorRecord(k, np.asarray(v)) for k, v in scalars.items()}
    )
    folder = _write(tmp_path, [rec])
    data_file = next(folder.glob("data-*.bin"))
    assert data_file.stat().st_size == 0  # every one-element value is in the index entry, none in the data file
    trial = ts.create_trial(tmp_path)
    for name, v in scalars.items():
        got = trial.tensor(name).value(0)
        assert got.shape == np.asarray(v).shape and got.dtype == np.asarray(v).dtype, name
        np.testing.assert_array_equal(got, np.asarray(v))


def test_reductions_and_shapes_without_values(tmp_path: Path) -> None:
    red = {("mean", False): 0.5, ("max", True): 3.0, ("l2", False): float("nan"), ("min", False): float("-inf")}
    rec = _record(0, g=TensorRecord("g", None, red), s=TensorRecord("s", None, shape=(4, 2)))
    _write(tmp_path, [rec])
    g = ts.create_trial(tmp_path).tensor("g")
    assert g.has_reductions_only(0)
    assert g.reduction_value(0, "mean") == 0.5 and g.reduction_value(0, "max", abs=True) == 3.0
    assert math.isnan(g.reduction_value(0, "l2")) and g.reduction_value(0, "min") == -math.inf
    assert g.reduction_values(0) == pytest.approx(red, nan_ok=True)
    assert ts.create_trial(tmp_path).tensor("s").shape(0) == (4, 2)
    assert reduction_key("mean", True) == "abs_mean" and reduction_key("l2", False) == "l2"


def test_file_layout_data_before_index_and_offsets(tmp_path: Path) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    writer.write(_record(0, big=TensorRecord("big", BIG)))
    writer.write(_record(1))
    assert (folder / "index-000000.idx").stat().st_size == 0  # index entries wait for flush()
    writer.flush()
    writer.close()
    data = (folder / "data-000000.bin").read_bytes()
    scan = framing.scan_frames(data)
    assert scan.corrupt == 0 and not scan.truncated and scan.resume_at == len(data)
    assert {r.kind for r in scan.records} == {KIND_TENSOR} == {1}  # docs/format.md: kind 1 tensor data, 2 index
    sizes = [a.nbytes for a in ARRAYS.values() if a.size > 1] + [BIG.nbytes]
    sizes += [a.nbytes for a in ARRAYS.values() if a.size > 1]
    assert len(data) == sum(sizes) + framing.HEADER_SIZE * (len(sizes) + 2)  # the two empty arrays: a header each
    index = framing.scan_frames((folder / "index-000000.idx").read_bytes())
    assert [r.kind for r in index.records] == [KIND_INDEX, KIND_INDEX] == [2, 2]
    assert {r.version for r in index.records} == {framing.VERSION} == {2}
    np.testing.assert_array_equal(ts.create_trial(tmp_path).tensor("big").value(0), BIG)


def test_a_second_writer_appends_new_files_and_both_are_read(tmp_path: Path) -> None:
    folder = _write(tmp_path, [_record(0), _record(1)])
    _write(tmp_path, [_record(2), _record(3)])
    assert sorted(p.name for p in folder.iterdir()) == [
        "data-000000.bin",
        "data-000001.bin",
        "index-000000.idx",
        "index-000001.idx",
    ]
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2, 3]
    np.testing.assert_array_equal(trial.tensor("w").value(3), ARRAYS["w"] * 4)


def test_salvage_indexes_the_steps_whose_data_reached_the_disk(tmp_path: Path) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    writer.write(_record(0, big=TensorRecord("big", BIG)))  # the big array drains the buffer: step 0 is on disk
    writer.write(_record(1))  # still in the gathering buffer
    assert writer.salvage() == 1 and writer.failed  # as after a failed write: step 1 is given up
    writer.write(_record(2))
    writer.flush()
    assert writer.salvage() == 0
    writer.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0]
    np.testing.assert_array_equal(trial.tensor("big").value(0), BIG)
    np.testing.assert_array_equal(trial.tensor("w").value(0), ARRAYS["w"])


SALVAGE_CHILD = """
import resource, signal, sys
from pathlib import Path
import numpy as np
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.tensor_file import TensorFileWriter

writer = TensorFileWriter(Path(sys.argv[1]))
for s in range(4):  # each step ends with a big array, which takes the whole step to the disk
    tensors = {f"t{i}_{'n' * 60}": TensorRecord(f"t{i}_{'n' * 60}", np.arange(10, dtype=np.float32)) for i in range(10)}
    tensors["big"] = TensorRecord("big", np.zeros(300_000, np.float32))
    writer.write(StepRecord(ModeKeys.TRAIN, s, s, 1.0 + s, "worker_0", tensors))
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[2]), resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
print(writer.salvage())
"""


def test_salvage_gives_up_the_newest_steps_until_their_index_entries_fit(tmp_path: Path) -> None:
    # the file size limit lets about two index entries through: the first, longer write fails half-way
    folder = tmp_path / "tensors" / "worker_0"
    proc = subprocess.run(
        [sys.executable, "-c", SALVAGE_CHILD, str(folder), "2600"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
        env={**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)},
        cwd=tmp_path,
    )  # not the repository root: its trainspect would shadow PYTHONPATH
    kept = int(proc.stdout.strip())
    index = (folder / "index-000000.idx").read_bytes()
    scan = framing.scan_frames(index)
    assert 1 <= kept < 4 and len(scan.records) == kept
    assert scan.corrupt == 0 and not scan.truncated  # no half-written index record is left behind
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == list(range(kept)) and trial.corrupt_records == 0
    np.testing.assert_array_equal(trial.tensor("big").value(kept - 1), np.zeros(300_000, np.float32))


def test_while_the_job_runs_a_step_is_complete_once_every_worker_wrote_it(tmp_path: Path) -> None:
    _write(tmp_path, [_record(0), _record(1), _record(2)])
    late = TensorFileWriter(tmp_path / "tensors" / "worker_1")
    for s in (0, 1):
        late.write(StepRecord(ModeKeys.TRAIN, s, s, 1000.0 + s, "worker_1", {"w": TensorRecord("w", ARRAYS["w"])}))
    late.close()
    trial = ts.create_trial(tmp_path)  # no end marker: the job may still be running
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps() == [0, 1] and trial.steps(show_incomplete_steps=True) == [0, 1, 2]
    assert trial.incomplete_steps() == {2: ["worker_1"]}


def test_a_scalar_only_step_is_indexed_exactly_as_its_record(tmp_path: Path) -> None:
    """``write_scalars`` (no record, no array) writes the index entry ``write(step.record())`` writes, byte for byte."""
    from trainspect.step import ScalarStep

    scalars = [
        ("f32", 0.1, np.dtype(np.float32), frozenset({"losses"})),  # not a float32 value: rounded as the array would
        ("f64", 0.1, np.dtype(np.float64), frozenset()),
        ("f16", 1 / 3, np.dtype(np.float16), frozenset()),
        ("nan", math.nan, np.dtype(np.float32), frozenset()),
        ("inf", -math.inf, np.dtype(np.float64), frozenset()),
        ("i64", 7, np.dtype(np.int64), frozenset()),
        ("u8", 200, np.dtype(np.uint8), frozenset()),
        ("b", True, np.dtype(np.bool_), frozenset()),
        ("int_as_float", 3, np.dtype(np.float32), frozenset()),
        ('quote" and \u00fc', 1e-05, np.dtype(np.float64), frozenset()),  # escaped as JSON escapes it
    ]
    step = ScalarStep(ModeKeys.EVAL, 4, 9, 1234.5, "worker_0", scalars)
    fast, slow = TensorFileWriter(tmp_path / "fast"), TensorFileWriter(tmp_path / "slow")
    again = step._replace(global_step=10, wall_time=1235, scalars=[("f32", 0.25, np.dtype(np.float32), frozenset())])
    for s in (step, again):  # the second: a name seen before (its JSON pieces cached), an int wall time
        fast.write_scalars(s)
        slow.write(s.record())
    for writer in (fast, slow):
        writer.close()
    index = [(d / "index-000000.idx").read_bytes() for d in (tmp_path / "fast", tmp_path / "slow")]
    assert index[0] == index[1] and index[0]
    entries = framing.scan_frames(index[0]).records
    assert len(entries) == 2 and b'"n":"nan","v":"NaN"' in entries[0].payload
