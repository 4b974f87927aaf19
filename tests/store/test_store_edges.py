"""The store at its edges: scalars written without a record, per-sample losses in a backlog, waiting for the writer.

The real writers (:class:`TensorFileWriter`, :class:`RunWriter`) write into a temporary run directory; what they wrote
is read back through the Trial or the raw index bytes, as a reader sees it.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.step import ScalarStep, StepRecord, TensorRecord
from trainspect.store import framing
from trainspect.store.gaps import read_gaps
from trainspect.store.index import TrialIndex
from trainspect.store.layout import RunLayout
from trainspect.store.run_writer import RunWriter
from trainspect.store.source import TrainspectSource
from trainspect.store.tensor_file import KIND_INDEX, TensorFileWriter


def _index_bytes(folder: Path) -> bytes:
    (index,) = folder.glob("index-*.idx")
    return index.read_bytes()


def test_a_scalar_step_of_python_ints_and_bools_in_a_float_dtype_indexes_as_its_record_does(tmp_path: Path) -> None:
    f8, f4 = np.dtype(np.float64), np.dtype(np.float32)
    scalars = [
        ("loss", 3, f8, frozenset({"losses"})),  # an int handed over for a float64 tensor
        ("flag", True, f8, frozenset({"scalars"})),
        ("lr", 0.1, f8, frozenset({"scalars"})),
        ("half", 2, f4, frozenset({"scalars"})),
    ]
    step = ScalarStep(ModeKeys.TRAIN, 4, 4, 1004.5, "worker_0", scalars)
    fast, slow = tmp_path / "fast" / "tensors" / "worker_0", tmp_path / "slow" / "tensors" / "worker_0"
    writer = TensorFileWriter(fast)
    writer.write_scalars(step)
    writer.close()
    writer = TensorFileWriter(slow)
    writer.write(step.record())
    writer.close()
    assert _index_bytes(fast) == _index_bytes(slow)  # byte for byte, as write_scalars promises
    assert b'"v":3.0,' in _index_bytes(fast) and b'"v":1.0,' in _index_bytes(fast)
    trial = ts.create_trial(tmp_path / "fast")
    loss = trial.tensor("loss").value(4)
    assert loss.dtype == np.float64 and float(loss) == 3.0
    assert float(trial.tensor("flag").value(4)) == 1.0 and float(trial.tensor("half").value(4)) == 2.0


def test_a_backlog_keeps_a_per_sample_loss_vector_and_drops_only_the_weights(tmp_path: Path) -> None:
    per_sample = np.arange(8, dtype=np.float32)  # a loss with reduction="none": 8 values, still a loss
    per_class = np.ones(4, dtype=np.float32)  # a vector in the scalars collection: kept too
    weights = np.zeros(256, dtype=np.float32)
    tensors = {
        "loss": TensorRecord("loss", per_sample, collections=frozenset({"losses"})),
        "per_class": TensorRecord("per_class", per_class, collections=frozenset({"scalars"})),
        "w": TensorRecord("w", weights, {("mean", False): 0.0}, frozenset({"weights"})),
    }
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=False, max_pending_bytes=16)
    writer.paused = True  # a full spool: every step is degraded
    assert writer.submit(StepRecord(ModeKeys.TRAIN, 0, 0, 1.0, "worker_0", tensors))
    writer.start()
    writer.close()
    (gap,) = read_gaps(tmp_path)
    assert gap["dropped"] == [["w", 1024, "reductions"]]
    trial = ts.create_trial(tmp_path)
    np.testing.assert_array_equal(trial.tensor("loss").value(0), per_sample)
    np.testing.assert_array_equal(trial.tensor("per_class").value(0), per_class)
    assert trial.tensor("w").reduction_value(0, "mean") == 0.0


def test_wait_idle_without_a_timeout_returns_once_every_step_is_readable(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=True)
    writer.start()
    try:
        for step in range(3):
            loss = TensorRecord("loss", np.array(0.5 + step, np.float32), collections=frozenset({"losses"}))
            assert writer.submit(StepRecord(ModeKeys.TRAIN, step, step, 1.0 + step, "worker_0", {"loss": loss}))
        assert writer.wait_idle() is True
        assert ts.create_trial(tmp_path).tensor("loss").steps() == [0, 1, 2]  # on disk before close
        assert writer.wait_idle(5.0) is True
    finally:
        writer.close()


def test_a_hand_written_index_record_whose_data_file_is_missing_is_named_in_the_problems(tmp_path: Path) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    value = np.ones(2, dtype=np.float32)
    writer.write(StepRecord(ModeKeys.TRAIN, 0, 0, 1000.0, "worker_0", {"w": TensorRecord("w", value, {})}))
    writer.close()
    (index,) = folder.glob("index-*.idx")
    # a record in another writer's key order (read one by one), pointing into a data file that is not there
    payload = json.dumps({"e": [], "f": "data-000777.bin", "t": 1001.0, "ms": 1, "m": 1, "g": 1}).encode()
    index.write_bytes(index.read_bytes() + framing.frame(KIND_INDEX, payload) + payload)
    source, trial_index = TrainspectSource(tmp_path), TrialIndex()
    source.refresh(trial_index)
    assert trial_index.sorted_steps == [0, 1]
    missing = [p for p in source.problems if "data-000777.bin" in p]
    assert missing and "it is missing: the raw tensor values its index points to cannot be read" in missing[0]
