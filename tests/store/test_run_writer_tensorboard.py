"""What the run writer exports to TensorBoard: scalar-only steps, scalars of records, histograms and reductions.

The event files are read back as TFRecords of TensorBoard's ``Event`` protobuf (its reader would load TensorFlow).
"""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
from tensorboard.compat.proto import event_pb2

from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.layout import RunLayout
from trainspect.store.run_writer import RunWriter
from trainspect.store.trial import create_trial


def _events(folder: Path) -> tuple[dict[str, list[tuple[int, float]]], dict[str, list[tuple[int, object]]]]:
    """``({tag: [(step, value)]}, {tag: [(step, histogram)]})`` of every event file under ``folder``."""
    scalars: dict[str, list[tuple[int, float]]] = {}
    hists: dict[str, list[tuple[int, object]]] = {}
    for path in sorted(folder.rglob("events.out.tfevents*")):
        raw, pos = path.read_bytes(), 0
        while pos < len(raw):
            (length,) = struct.unpack_from("<Q", raw, pos)
            event = event_pb2.Event.FromString(raw[pos + 12 : pos + 12 + length])
            pos += 12 + length + 4
            for v in event.summary.value:
                if v.HasField("histo"):
                    hists.setdefault(v.tag, []).append((event.step, v.histo))
                elif v.HasField("simple_value"):
                    scalars.setdefault(v.tag, []).append((event.step, round(v.simple_value, 6)))
                elif v.HasField("tensor"):
                    value = v.tensor.float_val[0] if v.tensor.float_val else v.tensor.double_val[0]
                    scalars.setdefault(v.tag, []).append((event.step, round(value, 6)))
    return scalars, hists


def test_scalar_steps_records_histograms_and_reductions_reach_tensorboard(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=True, tensorboard_dir=tmp_path / "tb")
    writer.start()
    float32 = np.dtype(np.float32)
    writer.submit_scalars((ModeKeys.TRAIN, 0, 0, 1.0), [("loss", 0.75, float32, frozenset({"losses"}))])
    writer.submit_scalars((ModeKeys.EVAL, 0, 1, 2.0), [("loss", 0.5, float32, frozenset({"losses"}))])
    weights = np.linspace(-1.0, 1.0, 11, dtype=np.float32)
    tensors = {
        "w": TensorRecord("w", weights, {("mean", False): 0.0}, frozenset({"weights"})),
        "ids": TensorRecord("ids", np.array(["a", "b"])),  # text: no histogram
        "acc": TensorRecord("acc", np.array(0.9, np.float32)),
    }
    writer.submit(StepRecord(ModeKeys.TRAIN, 1, 2, 3.0, "worker_0", tensors), histograms=frozenset({"w", "ids", "acc"}))
    writer.close()
    scalars, hists = _events(tmp_path / "tb")
    assert scalars == {"loss": [(0, 0.75)], "eval/loss": [(1, 0.5)], "acc": [(2, 0.9)], "w/mean": [(2, 0.0)]}
    assert list(hists) == ["w"]  # the scalar and the text tensor get none
    ((step, hist),) = hists["w"]
    assert step == 2 and (hist.num, hist.min, hist.max) == (11, -1.0, 1.0)


def test_without_tensorboard_no_event_file_is_written(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=False)
    writer.start()
    writer.submit_scalars((ModeKeys.TRAIN, 0, 0, 1.0), [("loss", 0.75, np.dtype(np.float32), frozenset())])
    writer.close()
    assert not list(tmp_path.rglob("events.out.tfevents*"))


def test_scalar_steps_of_one_two_and_three_scalars_reach_the_index_and_tensorboard(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=True, tensorboard_dir=tmp_path / "tb")
    writer.start()
    f32, f64, i64 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.int64)
    losses = ("losses",)
    writer.submit_scalars((ModeKeys.TRAIN, 0, 0, 1.0), [("loss", 0.25, f32, losses)])
    writer.submit_scalars((ModeKeys.TRAIN, 1, 1, 2.0), [("loss", 0.5, f32, losses), ("aux", 1.5, f64, losses)])
    three = [("loss", 0.75, f32, losses), ("aux", 2.5, f64, losses), ("count", 7, i64, frozenset({"scalars"}))]
    writer.submit_scalars((ModeKeys.EVAL, 0, 2, 3.0), three)
    writer.close()
    scalars, _ = _events(tmp_path / "tb")
    assert scalars == {
        "loss": [(0, 0.25), (1, 0.5)],
        "aux": [(1, 1.5)],
        "eval/loss": [(2, 0.75)],
        "eval/aux": [(2, 2.5)],
        "eval/count": [(2, 7.0)],
    }
    trial = create_trial(str(tmp_path))
    assert trial.tensor("loss").steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.tensor("aux").value(1).dtype == np.float64 and trial.tensor("aux").value(1).item() == 1.5
    assert trial.tensor("count").value(2).dtype == np.int64 and trial.tensor("count").value(2).item() == 7
    assert trial.tensor("loss").value(0, mode=ModeKeys.EVAL).item() == 0.75
