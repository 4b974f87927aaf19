"""The writer's queue bounds and gap records, at their edges: what fits, what is degraded, what the gaps file says.

No timing is measured: the writer thread is either not started (the queue only fills) or waited for with events.
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path

import numpy as np
import pytest

from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.background import BackgroundWriter
from trainspect.store.gaps import GAPS_FILE, degrade, gap_line, gaps_summary, read_gaps
from trainspect.store.layout import RunLayout
from trainspect.store.run_writer import RunWriter


def _record(step: int, *sizes: int, loss: float = 0.5) -> StepRecord:
    tensors = {"loss": TensorRecord("loss", np.array(loss, np.float32), collections=frozenset({"losses"}))}
    for i, n in enumerate(sizes):
        reductions = {("mean", False): 0.0} if i % 2 == 0 else {}
        tensors[f"t{i}"] = TensorRecord(f"t{i}", np.zeros(n, np.uint8), reductions, frozenset({"weights"}))
    return StepRecord(ModeKeys.TRAIN, step, step, 1.0 + step, "worker_0", tensors)


# --- BackgroundWriter ----------------------------------------------------------------------------------------
def test_room_takes_up_to_the_bound_and_anything_when_empty() -> None:
    writer = BackgroundWriter("test", handle=lambda batch: None, max_pending_bytes=100)
    assert writer.room(10_000)  # an empty queue takes anything
    assert writer.submit("a", 60)
    assert writer.room(40) and not writer.room(41)
    assert writer.submit("b", 40) and writer._pending == 100  # exactly at the bound: queued
    assert not writer.submit("c", 1) and writer._pending == 100
    assert writer.submit("d", 500, force=True) and writer._pending == 600  # a degraded step: never dropped


def test_a_drop_warns_once(caplog: pytest.LogCaptureFixture) -> None:
    writer = BackgroundWriter("tensor capture", handle=lambda batch: None, max_pending_bytes=10)
    writer.submit("a", 10)
    with caplog.at_level(logging.WARNING, logger="trainspect.store.background"):
        assert not writer.submit("b", 5) and not writer.submit("c", 5)
    assert [r.getMessage() for r in caplog.records] == [
        "trainspect: tensor capture is falling behind training; dropping data to keep training fast"
    ]


def test_pending_bytes_wake_the_writer_at_the_threshold() -> None:
    handled = threading.Event()
    writer = BackgroundWriter("test", handle=lambda batch: handled.set(), flush_interval=600, wake_bytes=64)
    writer.start()
    try:
        assert writer.submit("small", 63)
        assert writer.submit("big", 1)  # 64 bytes pending: at the threshold, the writer wakes before its interval
        assert handled.wait(60), "the writer did not wake at wake_bytes"
        assert writer.wait_idle(60) and writer._pending == 0
    finally:
        assert writer.close(60)


def test_a_failed_writer_drops_everything_after_and_salvages_once(caplog: pytest.LogCaptureFixture) -> None:
    salvaged: list[int] = []
    shared: list[BaseException] = []

    def fail(batch: list[object]) -> None:
        raise OSError("disk full")

    first = BackgroundWriter("tensor capture", fail, on_failure=lambda: salvaged.append(1), failures=shared)
    second = BackgroundWriter("TensorBoard export", fail, failures=shared)
    with caplog.at_level(logging.WARNING, logger="trainspect.store.background"):
        for writer in (first, second):
            writer.start()
            writer.submit("x", 1)
            writer.wait_idle(60)
    assert salvaged == [1] and len(shared) == 2
    assert [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING] == [
        "trainspect: tensor capture disabled after a write error (OSError: disk full); training continues and the "
        "data written before stays readable"
    ]
    assert not first.submit("y") and not second.submit("y", 5)
    assert first.close(60) and second.close(60)


def test_a_close_that_times_out_counts_the_steps_it_dropped(caplog: pytest.LogCaptureFixture) -> None:
    release = threading.Event()
    started = threading.Event()

    def slow(batch: list[object]) -> None:
        started.set()
        release.wait(60)

    writer = BackgroundWriter("tensor capture", slow, flush_interval=0.001)
    writer.start()
    writer.submit("first", 1)
    assert started.wait(60)
    for i in range(3):
        writer.submit(i, 1)
    with caplog.at_level(logging.WARNING, logger="trainspect.store.background"):
        assert writer.close(timeout=0.01) is False
    release.set()
    assert "within 0 s at close; 3 queued step(s) dropped" in caplog.text
    assert not writer.submit("late")


# --- gaps ----------------------------------------------------------------------------------------------------
def test_degrade_drops_the_largest_values_first_until_it_fits() -> None:
    rec = _record(3, 100, 300, 200)  # t0 (reductions), t1 (none), t2 (reductions)
    light, dropped = degrade(rec, 300)
    assert dropped == [("t1", 300, "nothing"), ("t2", 200, "reductions")]  # 600 -> 100 bytes: fits 300
    assert sorted(light.tensors) == ["loss", "t0", "t2"] and light.tensors["t2"].value is None
    assert light.tensors["t2"].shape == (200,) and light.tensors["t0"].value is not None
    _, edge = degrade(rec, 604)
    assert edge == []  # 600 bytes plus the loss's 4: room for exactly that
    _, one_less = degrade(rec, 603)
    assert one_less == [("t1", 300, "nothing")]
    light, everything = degrade(rec, 0)
    assert [d[0] for d in everything] == ["t1", "t2", "t0"] and light.tensors["loss"].value is not None


def test_gap_lines_round_trip_and_malformed_lines_are_counted(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "tensors" / "worker_1"
    folder.mkdir(parents=True)
    rec = _record(7, 10)
    lines = [
        gap_line(rec, [("t0", 10, "reductions")], "writer backlog"),
        "not json\n",
        "\n",
        '{"step": "x"}\n',
        json.dumps({"step": 2, "reason": "spool full", "dropped": [["g", 4, "nothing"]]}) + "\n",
        json.dumps({"step": 9, "dropped": "no list"}) + "\n",
        json.dumps({"step": 11, "reason": "spool full", "dropped": [["h", 8]]}) + "\n",  # an older line: 2 fields
    ]
    (folder / GAPS_FILE).write_text("".join(lines))
    with caplog.at_level(logging.WARNING, logger="trainspect.store.gaps"):
        gaps = read_gaps(tmp_path)
    assert [(g["step"], g["worker"]) for g in gaps] == [(2, "worker_1"), (7, "worker_1"), (11, "worker_1")]
    assert gaps[1]["mode"] == "TRAIN" and gaps[1]["mode_step"] == 7 and gaps[1]["dropped"] == [["t0", 10, "reductions"]]
    assert "skipped 2 malformed gap record(s)" in caplog.text  # the blank line is no record
    assert gaps_summary(gaps) == (
        "raw values of 3 tensor(s) not written at 3 step(s) (first at step 2; spool full, writer backlog): losses and "
        "scalars were kept; 1 of them kept their reductions"
    )
    assert gaps_summary([]) == "" and read_gaps(tmp_path / "nothing") == []


# --- RunWriter -----------------------------------------------------------------------------------------------
def test_a_step_past_the_budget_is_degraded_and_its_gap_recorded(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=False, max_pending_bytes=1000)
    assert writer.submit(_record(0, 600))  # the queue is empty: taken whole (604 bytes with the loss)
    assert writer.submit(_record(1, 392))  # 604 + 392 + 4 = 1000: exactly the budget
    assert writer.gap_steps == 0
    assert writer.submit(_record(2, 200, 100))  # past it: degraded, never dropped
    assert writer.gap_steps == 1
    writer.paused = True
    assert writer.submit(_record(3, 8))  # a paused writer (a full spool) degrades every step
    assert writer.gap_steps == 2
    writer.start()
    writer.close()
    gaps = read_gaps(tmp_path)
    assert [(g["step"], g["reason"]) for g in gaps] == [(2, "writer backlog"), (3, "spool full")]
    assert gaps[0]["dropped"] == [["t0", 200, "reductions"], ["t1", 100, "nothing"]]
    import trainspect as ts

    trial = ts.create_trial(str(tmp_path))
    assert trial.tensor("loss").steps() == [0, 1, 2, 3]  # every step's loss was written
    assert trial.tensor("t0").value(1) is not None and trial.tensor("t0").reduction_value(2, "mean") == 0.0


def test_a_blocking_writer_waits_instead_of_degrading(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=False, on_backlog="block", max_pending_bytes=100)
    writer.start()
    for step in range(4):
        assert writer.submit(_record(step, 90))
    writer.close()
    assert writer.gap_steps == 0 and read_gaps(tmp_path) == []


def test_a_file_that_fails_to_close_is_named_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from trainspect.store import tensor_file

    def refuse(self: object) -> None:
        raise OSError("stale file handle")

    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=False)
    writer.start()
    monkeypatch.setattr(tensor_file.TensorFileWriter, "close", refuse)
    with caplog.at_level(logging.WARNING, logger="trainspect.store.run_writer"):
        writer.close()
    assert [r.getMessage() for r in caplog.records] == [
        f"trainspect: closing {tmp_path / 'tensors' / 'worker_0'} failed: stale file handle"
    ]
    assert (tmp_path / "tensors" / "worker_0").is_dir() and RunLayout(tmp_path).end_marker.exists()
    caplog.clear()
    monkeypatch.undo()
    failed = RunWriter(RunLayout(tmp_path / "b"), "worker_0", tensorboard=False)
    failed.start()
    monkeypatch.setattr(tensor_file.TensorFileWriter, "close", refuse)
    failed._bg.failed = OSError("disk full")  # after a write error its one warning was given already
    with caplog.at_level(logging.WARNING, logger="trainspect.store.run_writer"):
        failed.close()
    assert caplog.records == []
