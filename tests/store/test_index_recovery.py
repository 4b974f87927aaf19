"""The trial index's bookkeeping and the tensor writer's recovery paths: rotation, salvage, what an index answers.

The index is filled directly (step by step) and by batches; the writer is driven on NumPy records, and the bytes on
disk are checked against what was written.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store import tensor_file
from trainspect.store.index import TrialIndex
from trainspect.store.index_batch import BatchBuilder
from trainspect.store.index_entry import Entry
from trainspect.store.tensor_file import TensorFileWriter

BIG = np.arange(300_000, dtype=np.float32)  # 1.2 MB: past the writer's 1 MB gathering buffer, so it reaches the disk


def _record(step: int, **tensors: np.ndarray) -> StepRecord:
    recs = {name: TensorRecord(name, arr) for name, arr in tensors.items()}
    return StepRecord(ModeKeys.TRAIN, step, step, 1000.0 + step, "worker_0", recs)


# --- TrialIndex ----------------------------------------------------------------------------------------------
def test_steps_added_one_by_one_keep_their_workers_and_order() -> None:
    index = TrialIndex()
    index.add_step("worker_1", 5, ModeKeys.TRAIN, 5, 1.0)
    index.add_step("worker_0", 5, ModeKeys.TRAIN, 5, 1.1)
    index.add_step("worker_0", 2, ModeKeys.EVAL, 0, 0.5)
    index.add_step("worker_0", 9, ModeKeys.TRAIN, 6, 2.0)
    assert index.sorted_steps == [2, 5, 9]
    assert index.steps[5].workers == {"worker_0", "worker_1"} and index.steps[5].wall_time == 1.0
    assert index.by_mode[ModeKeys.EVAL] == {0: 2} and index.by_mode[ModeKeys.TRAIN] == {5: 5, 6: 9}
    assert index.workers == {"worker_0", "worker_1"}
    assert not index.columnar and index.step_columns(np.array([5])) is None and index.worker_counts() is None
    index.add_tensor("w", 5, "worker_0", Entry("d.bin", 0, 4, "<f4", (1,), None))
    assert index.has_tensor("w") and index.scalar_series("w") is None


def _batch(worker: str, steps: list[int], value: float = 0.5):  # noqa: ANN202
    b = BatchBuilder(worker)
    for s in steps:
        b.record(s, int(ModeKeys.TRAIN), s, 100.0 + s)
        b.scalar("loss", value + s, "<f4", ())
    return b.build()


def test_an_index_of_batches_answers_from_its_columns() -> None:
    index = TrialIndex()
    assert index.columnar
    modes, mode_steps, walls = index.step_columns(np.zeros(0, dtype=np.int64))
    assert (modes.size, mode_steps.size, walls.size) == (0, 0, 0)
    steps, counts = index.worker_counts()
    assert (steps.size, counts.size) == (0, 0)
    index.add_batch(_batch("worker_1", [3, 4]))
    index.add_batch(_batch("worker_0", [1, 3]))
    assert index.sorted_steps == [1, 3, 4] and index.columnar
    steps, counts = index.worker_counts()
    assert steps.tolist() == [1, 3, 4] and counts.tolist() == [1, 2, 1]
    modes, mode_steps, walls = index.step_columns(np.array([4, 1]))
    assert (
        modes.tolist() == [int(ModeKeys.TRAIN)] * 2 and mode_steps.tolist() == [4, 1] and walls.tolist() == [104, 101]
    )
    assert index.steps[3].workers == {"worker_0", "worker_1"}
    series = index.scalar_series("loss", "worker_0")
    assert series is not None and list(series.steps) == [1, 3] and list(series.values) == [1.5, 3.5]


def test_an_index_of_one_batch_answers_from_its_columns() -> None:
    """One batch (a short run's whole index): its columns are used as they are, not concatenated."""
    index = TrialIndex()
    index.add_batch(_batch("worker_0", [2, 5, 7]))
    modes, mode_steps, walls = index.step_columns(np.array([7, 2]))
    assert (
        modes.tolist() == [int(ModeKeys.TRAIN)] * 2 and mode_steps.tolist() == [7, 2] and walls.tolist() == [107, 102]
    )
    steps, counts = index.worker_counts()
    assert steps.tolist() == [2, 5, 7] and counts.tolist() == [1, 1, 1]


# --- the tensor writer's recovery paths ------------------------------------------------------------------------
def test_a_rotation_indexes_every_step_in_the_files_of_its_data(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tensor_file, "_ROTATE_BYTES", 100)
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    for step in range(4):
        writer.write(_record(step, w=np.full(40, float(step), np.float32)))  # 160 bytes: every step rotates
    writer.close()
    assert len(list(folder.glob("data-*.bin"))) == 4 and len(list(folder.glob("index-*.idx"))) == 4
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2, 3] and trial.corrupt_records == 0
    for step in range(4):
        np.testing.assert_array_equal(trial.tensor("w").value(step), np.full(40, float(step), np.float32))


def test_salvage_cuts_a_half_written_record_off_the_data_file(tmp_path: Path) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    writer.write(_record(0, big=BIG))  # on disk
    size = (folder / "data-000000.bin").stat().st_size
    os.write(writer._data, b"TS\x02\x01half a record")  # what a write cut off by a full disk leaves
    writer.write(_record(1, w=np.ones(3, np.float32)))  # still in the gathering buffer
    assert writer.salvage() == 1
    assert (folder / "data-000000.bin").stat().st_size == size
    writer.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0] and trial.corrupt_records == 0
    np.testing.assert_array_equal(trial.tensor("big").value(0), BIG)


def test_salvage_of_nothing_on_disk_saves_no_step(tmp_path: Path) -> None:
    writer = TensorFileWriter(tmp_path / "tensors" / "worker_0")
    writer.write(_record(0, w=np.ones(3, np.float32)))  # only in the buffer
    saved = writer.salvage()
    assert saved == 0 and isinstance(saved, int) and writer.failed
    writer.close()
    assert ts.create_trial(tmp_path).steps() == []
