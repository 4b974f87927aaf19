"""The run store at the edges that hand-made mutants found unpinned: queue bounds, gaps, recovery, counts, thresholds.

Each test pins one behaviour a user can see (what is written and read back, the gaps recorded, what a warning counts).
Nothing waits on wall-clock time: the writer thread is not started until the queue is filled, or is held with
events and waited for with ``wait_idle``/``close``; where a threshold is in seconds the writer's clock is replaced.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _support.fakes import RecordingSink

import trainspect as ts
from trainspect.collections import Collection
from trainspect.exceptions import DamagedFile, TensorUnavailableForStep
from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store import framing, run_writer, tensor_file
from trainspect.store.background import BackgroundWriter
from trainspect.store.gaps import GAPS_FILE, degrade, gap_line, gaps_summary, read_gaps
from trainspect.store.index import TrialIndex
from trainspect.store.inventory import tensor_problems
from trainspect.store.jsonfile import Obj, check
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import rank_count, read_worker_manifests
from trainspect.store.nan_origins import first_origins
from trainspect.store.run_writer import RunWriter
from trainspect.store.source import TrainspectSource
from trainspect.store.tensor_file import KIND_INDEX, KIND_TENSOR, TensorFileWriter
from trainspect.store.warner import Kind, Warner

MIB = 1 << 20


def _loss(value: float = 0.5) -> TensorRecord:
    return TensorRecord("loss", np.array(value, np.float32), collections=frozenset({"losses"}))


def _step(step: int, **tensors: TensorRecord) -> StepRecord:
    return StepRecord(ModeKeys.TRAIN, step, step, 1000.0 + step, "worker_0", {"loss": _loss(), **tensors})


def _weight(name: str, value: np.ndarray, reductions: bool = True) -> TensorRecord:
    red = {("mean", False): float(np.mean(value))} if reductions else {}
    return TensorRecord(name, value, red, frozenset({"weights"}))


def _writer(root: Path, **kw: Any) -> RunWriter:
    return RunWriter(RunLayout(root), "worker_0", tensorboard=False, **kw)


def test_a_started_writer_records_when_its_worker_started(tmp_path: Path) -> None:
    """A writer used on its own (as ``trainspect.store.frames`` shows) still dates its worker in the manifest."""
    before = time.time()
    writer = _writer(tmp_path)
    writer.start()
    writer.close()
    manifest = read_worker_manifests(RunLayout(tmp_path))["worker_0"]
    assert before <= manifest["start_time"] <= time.time() and manifest["pid"] == os.getpid()


# --- the writer's memory bound -------------------------------------------------------------------------------
def test_one_step_larger_than_the_budget_is_taken_whole_when_nothing_is_pending(tmp_path: Path) -> None:
    """An empty queue takes a step of any size (raw values kept, no gap); only the next one is degraded."""
    big = np.arange(250, dtype=np.float32)  # 1,000 bytes: ten times the budget
    writer = _writer(tmp_path, max_pending_bytes=100)
    assert writer.submit(_step(0, w=_weight("w", big)))
    assert writer.gap_steps == 0
    assert writer.submit(_step(1, w=_weight("w", big)))  # now something is pending: degraded
    assert writer.gap_steps == 1
    writer.start()
    writer.close()
    trial = ts.create_trial(tmp_path)
    np.testing.assert_array_equal(trial.tensor("w").value(0), big)
    with pytest.raises(TensorUnavailableForStep):
        trial.tensor("w").value(1)
    assert [(g["step"], g["dropped"]) for g in read_gaps(tmp_path)] == [(1, [["w", 1000, "reductions"]])]
    queue = BackgroundWriter("test", handle=lambda batch: None, max_pending_bytes=100)
    assert queue.submit("huge", 10_000) and queue._pending == 10_000  # the queue itself: empty takes anything


def test_the_batch_being_written_still_counts_against_the_budget() -> None:
    """Bytes leave the budget only once their batch is written and flushed, not when the writer takes the batch."""
    started, release = threading.Event(), threading.Event()
    handled: list[str] = []

    def slow(batch: list[str]) -> None:
        started.set()
        assert release.wait(60)
        handled.extend(batch)

    writer = BackgroundWriter("test", handle=slow, flush_interval=0.001, max_pending_bytes=100)
    assert writer.submit("a", 60)
    writer.start()
    try:
        assert started.wait(60)  # "a" is taken and being written: its 60 bytes still count
        assert not writer.room(41) and writer.room(40)
        assert not writer.submit("b", 41)  # dropped: 60 + 41 would pass the bound
        assert writer.submit("c", 40)
    finally:
        release.set()
    assert writer.wait_idle(60)
    assert handled == ["a", "c"] and writer._pending == 0
    assert writer.close(60)


def test_the_budget_counts_bytes_not_elements(tmp_path: Path) -> None:
    """float32 values count 4 bytes each: 804 + 200 bytes pass a 1,000-byte budget (201 + 50 elements would not)."""
    writer = _writer(tmp_path, max_pending_bytes=1000)
    assert writer.submit(_step(0, w=_weight("w", np.ones(200, np.float32))))  # 800 + the loss's 4
    assert writer.submit(_step(1, w=_weight("w", np.ones(50, np.float32))))  # 200 more: past the budget
    writer.start()
    writer.close()
    assert [(g["step"], g["dropped"]) for g in read_gaps(tmp_path)] == [(1, [["w", 200, "reductions"]])]
    assert writer.gap_steps == 1


def test_a_degraded_step_with_nothing_to_drop_records_no_gap(tmp_path: Path) -> None:
    """A step of losses and single values past the budget loses nothing, so no gap line is written for it."""
    writer = _writer(tmp_path, max_pending_bytes=16)
    writer.paused = True  # a full spool: every step goes the degrade path
    scalar = TensorRecord("acc", np.array([0.9], np.float32), collections=frozenset({"metrics"}))
    assert writer.submit(_step(0, acc=scalar))
    assert writer.gap_steps == 0
    writer.start()
    writer.close()
    assert read_gaps(tmp_path) == [] and not (tmp_path / "tensors" / "worker_0" / GAPS_FILE).exists()
    trial = ts.create_trial(tmp_path)
    assert float(trial.tensor("loss").value(0)) == 0.5 and float(trial.tensor("acc").value(0)[0]) == np.float32(0.9)
    assert not any("not written" in p for p in trial.problems)


def test_a_paused_blocking_writer_degrades_instead_of_writing_raw_values(tmp_path: Path) -> None:
    """``on_backlog="block"`` waits for a slow disk, never for a full spool: paused, raw values are dropped."""
    writer = _writer(tmp_path, on_backlog="block", max_pending_bytes=1 << 20)
    writer.paused = True
    assert writer.submit(_step(0, w=_weight("w", np.ones(8, np.float32))))
    writer.start()
    writer.close()
    assert [(g["step"], g["reason"], g["dropped"]) for g in read_gaps(tmp_path)] == [
        (0, "spool full", [["w", 32, "reductions"]])
    ]
    assert writer.gap_steps == 1
    assert ts.create_trial(tmp_path).tensor("w").reduction_value(0, "mean") == 1.0


def test_closing_with_end_job_false_writes_no_end_marker_even_for_the_chief(tmp_path: Path) -> None:
    """``close(end_job=False)`` overrides ``chief``: the worker's end is recorded, the job's is not."""
    writer = _writer(tmp_path, chief=True)
    writer.start()
    writer.close(end_job=False)
    layout = RunLayout(tmp_path)
    assert not layout.end_marker.exists()
    assert json.loads(layout.worker_manifest("worker_0").read_text())["end_time"] is not None
    other = RunWriter(RunLayout(tmp_path / "b"), "worker_1", tensorboard=False, chief=False)
    other.start()
    other.close(end_job=True)
    assert RunLayout(tmp_path / "b").end_marker.exists()


class _Clock:
    """``time`` for the run writer whose monotonic clock advances ``tick`` seconds per reading.

    Each reading on the writer thread also notes how many index records are on disk then.
    """

    def __init__(self, index: Path, tick: float) -> None:
        self.now, self.tick, self.index = 0.0, tick, index
        self.indexed_at_readings: list[int] = []

    def monotonic(self) -> float:
        if threading.current_thread().name == "trainspect-tensor capture":
            raw = self.index.read_bytes() if self.index.exists() else b""
            self.indexed_at_readings.append(len(framing.scan_frames(raw).records))
        self.now += self.tick
        return self.now

    @staticmethod
    def time() -> float:
        return 1_700_000_000.0


def test_a_long_batch_is_indexed_step_by_step_once_each_step_outlasts_the_index_interval(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Within one batch, steps become readable every ``_INDEX_EVERY`` (0.05 s) of writing, not only at its end."""
    clock = _Clock(tmp_path / "tensors" / "worker_0" / "index-000000.idx", tick=0.06)
    monkeypatch.setattr(run_writer, "time", clock)
    writer = _writer(tmp_path)
    for step in range(3):  # queued before the thread starts: one batch
        assert writer.submit(_step(step, w=_weight("w", np.full(4, step, np.float32))))
    writer.start()
    writer.close()
    # a reading before each step's write and one after it: each later reading finds one more step indexed
    assert clock.indexed_at_readings == [0, 0, 1, 1, 2, 2, 3]
    assert ts.create_trial(tmp_path).steps() == [0, 1, 2]


# --- gaps ----------------------------------------------------------------------------------------------------
def test_degrade_counts_bytes_of_wider_dtypes_and_stops_once_it_fits() -> None:
    """Dropping a 400-byte float32 value frees 400 bytes: 604 - 400 fits a room of 300, so nothing more is dropped."""
    rec = _step(0, a=_weight("a", np.ones(100, np.float32)), b=_weight("b", np.ones(50, np.float32)))
    light, dropped = degrade(rec, 300)
    assert dropped == [("a", 400, "reductions")]
    assert light.tensors["b"].value is not None and light.tensors["a"].value is None


def test_a_one_element_tensor_is_never_dropped_whatever_its_collection() -> None:
    """Single values (a one-element weight) are kept like losses: dropping them would save nothing."""
    one = _weight("bias", np.array([3.0], np.float32))
    rec = _step(0, bias=one, w=_weight("w", np.ones(4, np.float32)))
    light, dropped = degrade(rec, 0)
    assert dropped == [("w", 16, "reductions")]
    assert light.tensors["bias"].value is not None and float(light.tensors["bias"].value[0]) == 3.0


def test_a_gap_line_names_the_mode_and_its_own_mode_step(tmp_path: Path) -> None:
    """An EVAL step's gap says EVAL and its EVAL step, beside the global step."""
    writer = _writer(tmp_path)
    writer.paused = True
    rec = StepRecord(ModeKeys.EVAL, 2, 40, 1040.0, "worker_0", {"w": _weight("w", np.ones(4, np.float32))})
    assert writer.submit(rec)
    writer.start()
    writer.close()
    (gap,) = read_gaps(tmp_path)
    assert (gap["step"], gap["mode"], gap["mode_step"], gap["reason"]) == (40, "EVAL", 2, "spool full")


def test_the_gaps_summary_counts_distinct_steps_and_tensors() -> None:
    """Two workers' gaps at the same step of the same tensor: one step, one tensor."""
    gaps = [
        {"step": 3, "worker": w, "reason": "writer backlog", "dropped": [["w", 16, "reductions"]]}
        for w in ("worker_0", "worker_1")
    ]
    assert gaps_summary(gaps).startswith("raw values of 1 tensor(s) not written at 1 step(s) (first at step 3;")
    assert gaps_summary(gaps).endswith("1 of them kept their reductions")


def test_a_dropped_piece_with_partials_but_no_reductions_keeps_its_partials() -> None:
    """A sharded piece's partial statistics count as reductions: the entry stays, marked ``"reductions"``."""
    partials = {"count": 4.0, "sum": 4.0, "sum_sq": 4.0, "m2": 0.0, "min": 1.0, "max": 1.0}
    piece = TensorRecord("w", np.ones(4, np.float32), {}, frozenset({"weights"}), partials=partials)
    light, dropped = degrade(_step(0, w=piece), 0)
    assert dropped == [("w", 16, "reductions")]
    kept = light.tensors["w"]
    assert kept.value is None and kept.partials == partials and kept.shape == (4,)


def test_a_single_malformed_gap_line_is_warned_about(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """One malformed line is one too many: ``skipped 1 malformed gap record(s)``, the good line still read."""
    folder = tmp_path / "tensors" / "worker_0"
    folder.mkdir(parents=True)
    good = gap_line(_step(4), [("w", 8, "nothing")], "writer backlog")
    (folder / GAPS_FILE).write_text(good + '{"step": "four"}\n')
    with caplog.at_level(logging.WARNING, logger="trainspect.store.gaps"):
        gaps = read_gaps(tmp_path)
    assert [g["step"] for g in gaps] == [4]
    assert [r.getMessage() for r in caplog.records] == [
        f"trainspect: skipped 1 malformed gap record(s) in {tmp_path / 'tensors'}"
    ]


def test_an_unreadable_gaps_file_of_one_worker_hides_no_other_workers_gaps(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A gaps "file" that cannot be read (here a directory) is named and skipped; the next worker's are still read."""
    (tmp_path / "tensors" / "worker_0" / GAPS_FILE).mkdir(parents=True)
    other = tmp_path / "tensors" / "worker_1"
    other.mkdir(parents=True)
    (other / GAPS_FILE).write_text(gap_line(_step(2), [("w", 8, "nothing")], "spool full"))
    with caplog.at_level(logging.WARNING, logger="trainspect.store.gaps"):
        gaps = read_gaps(tmp_path)
    assert [(g["step"], g["worker"]) for g in gaps] == [(2, "worker_1")]
    assert len(caplog.records) == 1 and "worker_0" in caplog.records[0].getMessage()


# --- record framing and recovery -----------------------------------------------------------------------------
def _framed(payload: bytes, kind: int = KIND_INDEX) -> bytes:
    return framing.frame(kind, payload) + payload


def test_one_byte_of_junk_before_a_record_loses_only_that_byte() -> None:
    """Resynchronisation looks for the next record from the byte right after the damage."""
    first, second = _framed(b'{"a":1}'), _framed(b'{"b":2}')
    scan = framing.scan_frames(first + b"X" + second)
    assert [r.payload for r in scan.records] == [b'{"a":1}', b'{"b":2}']
    assert scan.corrupt == 1 and scan.problems == [f"corrupt record at byte {len(first)} (1 bytes skipped)"]


def test_framing_version_15_is_the_newest_skipped_as_newer_and_16_is_damage() -> None:
    """Versions up to 15 with a plausible extent are a newer writer's records (skipped, not corrupt); 16 is damage."""
    good = _framed(b"{}")
    v15 = framing.HEADER.pack(framing.MAGIC, 15, KIND_INDEX, 2, 0) + b"{}"
    scan = framing.scan_frames(good + v15 + good)
    assert (scan.newer, scan.corrupt, len(scan.records)) == (1, 0, 2)
    assert scan.problems == [f"record of framing version 15 (newer than 2) at byte {len(good)} skipped"]
    v16 = framing.HEADER.pack(framing.MAGIC, 16, KIND_INDEX, 2, 0) + b"{}"
    scan = framing.scan_frames(good + v16 + good)
    assert (scan.newer, scan.corrupt, len(scan.records)) == (0, 1, 2)


def test_a_cut_off_tail_of_an_unknown_framing_version_is_damage_not_a_record_being_written() -> None:
    """Only a tail that starts like a record the reader knows is waited for; version 0 never existed."""
    good = _framed(b"{}")
    tail = framing.HEADER.pack(framing.MAGIC, 0, KIND_INDEX, 100, 0) + b"{}"  # claims 100 bytes, has 2
    scan = framing.scan_frames(good + tail)
    assert not scan.truncated and scan.corrupt == 1 and scan.resume_at == len(good) + len(tail)
    known = framing.HEADER.pack(framing.MAGIC, 2, KIND_INDEX, 100, 0) + b"{}"  # the current version: in progress
    scan = framing.scan_frames(good + known)
    assert scan.truncated and scan.corrupt == 0 and scan.resume_at == len(good)
    empty = framing.HEADER.pack(framing.MAGIC, 2, KIND_INDEX, 0, 12345)  # a whole header, no payload due: bad checksum
    scan = framing.scan_frames(good + empty)
    assert not scan.truncated and scan.corrupt == 1 and scan.resume_at == len(good) + framing.HEADER_SIZE


def test_read_frame_at_refuses_a_negative_offset() -> None:
    """An index entry pointing before the start of the data file is a truncated record, never a wrapped read."""
    buf = _framed(b"abcd", KIND_TENSOR) + _framed(b"", KIND_TENSOR)  # ends with a valid empty record
    with pytest.raises(framing.CorruptRecord, match="truncated"):
        framing.read_frame_at(buf, -framing.HEADER_SIZE, 0)
    assert bytes(framing.read_frame_at(buf, framing.HEADER_SIZE + 4, 0)) == b""


def _index_file(folder: Path) -> Path:
    (idx,) = folder.glob("index-*.idx")
    return idx


def _write_losses(folder: Path, steps: range) -> Path:
    writer = TensorFileWriter(folder)
    for s in steps:
        writer.write(StepRecord(ModeKeys.TRAIN, s, s, 1000.0 + s, "worker_0", {"loss": _loss(float(s))}))
    writer.close()
    return _index_file(folder)


def test_records_of_another_kind_in_an_index_file_are_ignored_not_reported(tmp_path: Path) -> None:
    """An index file's sound records that are not index entries (kind 1) are passed over: no step, no problem."""
    idx = _write_losses(tmp_path / "tensors" / "worker_0", range(3))
    records = framing.scan_frames(idx.read_bytes()).records
    raw = idx.read_bytes()
    cut = records[1].offset
    idx.write_bytes(raw[:cut] + _framed(b"\x00\x01\x02\x03", KIND_TENSOR) + raw[cut:])
    source, index = TrainspectSource(tmp_path), TrialIndex()
    source.refresh(index)
    assert index.sorted_steps == [0, 1, 2]
    assert source.corrupt_records == 0 and source.problems == []


def _corrupt_twice(idx: Path) -> None:
    """Flip one payload byte in records 1 and 3 of an index file: two damaged regions."""
    raw = bytearray(idx.read_bytes())
    records = framing.scan_frames(bytes(raw)).records
    for r in (records[1], records[3]):
        raw[r.offset + framing.HEADER_SIZE] ^= 0xFF
    idx.write_bytes(bytes(raw))


def test_the_corrupt_records_warning_counts_every_record_of_every_file(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Two files with two damaged records each: ``skipped 4 corrupt index records in 2 files``."""
    folders = [tmp_path / "tensors" / f"worker_{i}" for i in range(2)]
    for folder in folders:
        _corrupt_twice(_write_losses(folder, range(5)))
    with caplog.at_level(logging.WARNING, logger="trainspect.store.source"):
        source = TrainspectSource(tmp_path)
        index = TrialIndex()
        source.refresh(index)
    assert index.sorted_steps == [0, 2, 4] and source.corrupt_records == 4
    corrupt = [r.getMessage() for r in caplog.records if "corrupt" in r.getMessage()]
    first = _index_file(folders[0])
    assert len(corrupt) == 1 and corrupt[0].startswith(
        f"trainspect: skipped 4 corrupt index records in 2 files, first: {first}: skipped 2 corrupt index record(s)"
    )


def test_an_immediate_warner_logs_exactly_its_first_twenty_files(caplog: pytest.LogCaptureFixture) -> None:
    """The 20th damaged file still gets its own line, the 21st only its count in ``lines()``."""
    warn = Warner(kind=Kind("damaged things"))
    with caplog.at_level(logging.WARNING, logger="trainspect.store.warner"):
        for i in range(20):
            warn(f"f{i:02d}", "bad")
        assert len(warn.lines()) == 20 and not any("more" in line for line in warn.lines())  # none left out
        warn("f20", "bad")
    assert [r.getMessage() for r in caplog.records][-1] == "trainspect: f19: bad"
    assert len(caplog.records) == Warner.SHOWN == 20
    assert warn.lines()[-1] == "skipped 1 more damaged things"


def test_a_read_mixing_foreign_and_writer_records_keeps_each_value_at_its_step(tmp_path: Path) -> None:
    """Records parsed one by one and in bulk in one read join one batch; every entry stays with its own step."""
    folder = tmp_path / "tensors" / "worker_0"
    idx = _write_losses(folder, range(1, 4))  # steps 1..3 in the writer's layout: parsed in bulk
    foreign = {"e": [{"n": "loss", "v": 50.0, "d": "<f4", "s": []}], "f": "data-000000.bin", "t": 1000.0}
    foreign.update(ms=0, m=1, g=0)  # another key order: parsed on its own
    idx.write_bytes(_framed(json.dumps(foreign).encode()) + idx.read_bytes())
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0, 1, 2, 3]
    assert {s: float(v) for s, v in trial.tensor("loss").values().items()} == {0: 50.0, 1: 1.0, 2: 2.0, 3: 3.0}
    assert trial.corrupt_records == 0


def test_partials_of_an_entry_without_a_shard_description_are_read(tmp_path: Path) -> None:
    """An entry written with partial statistics but no ``sh`` still gives its reductions from them."""
    partials = {"count": 4.0, "sum": 8.0, "sum_sq": 20.0, "m2": 4.0, "min": 1.0, "max": 3.0}
    writer = TensorFileWriter(tmp_path / "tensors" / "worker_0")
    piece = TensorRecord("w", None, {}, frozenset({"weights"}), shape=(4,), partials=partials)
    writer.write(_step(0, w=piece))
    writer.close()
    trial = ts.create_trial(tmp_path)
    assert trial.tensor("w").reduction_value(0, "mean", worker="worker_0") == 2.0
    assert trial.tensor("w").reduction_value(0, "max") == 3.0 and trial.problems == []


# --- the tensor files' thresholds ----------------------------------------------------------------------------
def _tensor(step: int, nbytes: int) -> StepRecord:
    value = np.full(nbytes, step, np.uint8)
    return StepRecord(ModeKeys.TRAIN, step, step, 1000.0 + step, "worker_0", {"w": TensorRecord("w", value)})


def test_the_gathering_buffer_is_written_once_it_holds_exactly_one_mebibyte(tmp_path: Path) -> None:
    """Small records are gathered until the buffer reaches 1 MiB, then written at once (before any flush)."""
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    half = MIB // 2 - framing.HEADER_SIZE  # two records (header and payload): exactly 1 MiB
    writer.write(_tensor(0, half))
    assert (folder / "data-000000.bin").stat().st_size == 0  # half a MiB: still gathered
    writer.write(_tensor(1, half))
    assert (folder / "data-000000.bin").stat().st_size == MIB
    assert writer.salvage() == 2  # both steps' bytes reached the disk: a write failure now keeps them
    writer.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0, 1] and int(trial.tensor("w").value(1)[-1]) == 1


def test_salvage_keeps_a_step_whose_data_ends_exactly_where_the_disk_stops(tmp_path: Path) -> None:
    """A step whose last byte is the last byte on disk is complete: salvage indexes it."""
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    writer.write(_tensor(0, MIB + 10))  # past the buffer: written straight to the disk
    writer.write(_tensor(1, 10))  # still in the buffer: lost by the failure
    assert writer.salvage() == 1
    writer.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0] and trial.tensor("w").value(0).size == MIB + 10


def test_a_data_file_is_rotated_only_once_it_is_past_the_limit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file that holds exactly ``_ROTATE_BYTES`` takes the next step; one byte more and a new file starts."""
    record_size = framing.HEADER_SIZE + 100
    monkeypatch.setattr(tensor_file, "_ROTATE_BYTES", record_size)
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    for step in range(3):
        writer.write(_tensor(step, 100))
    writer.close()
    sizes = sorted((p.name, p.stat().st_size) for p in folder.glob("data-*.bin"))
    assert sizes == [("data-000000.bin", 2 * record_size), ("data-000001.bin", record_size)]
    trial = ts.create_trial(tmp_path)
    assert [int(trial.tensor("w").value(s)[0]) for s in range(3)] == [0, 1, 2]


# --- inventory, JSON shapes, NaN origins ---------------------------------------------------------------------
def test_five_missing_index_files_are_named_one_by_one_and_six_in_one_line(tmp_path: Path) -> None:
    """Up to five missing partners in a folder get a line each; more are one line with their count."""
    layout = RunLayout(tmp_path)
    folder = layout.tensor_dir("worker_0")
    folder.mkdir(parents=True)
    (folder / "collections.json").write_text('{"collections": {}}')
    layout.workers_dir.mkdir(parents=True)
    layout.worker_manifest("worker_0").write_text('{"worker": "worker_0"}')
    for i in range(5):
        (folder / f"data-{i:06d}.bin").touch()
    five = [p for p in tensor_problems(layout, over=True) if "index-" in p]
    assert len(five) == 5 and all(" is missing (data-" in p for p in five)
    (folder / "data-000005.bin").touch()
    six = [p for p in tensor_problems(layout, over=True) if "index-" in p]
    assert len(six) == 1 and six[0].startswith("6 index-*.idx files are missing (first: ")


def test_the_built_in_collection_patterns_stand_in_only_for_a_missing_collections_file(tmp_path: Path) -> None:
    """A run's own collections are all it has; the built-in ones are matched by pattern only when a file is lost."""
    mine = Collection("mine")
    mine.add_tensor_name("x")
    layout = RunLayout(tmp_path)
    layout.tensor_dir("worker_0").mkdir(parents=True)
    (layout.tensor_dir("worker_0") / "collections.json").write_text(
        json.dumps({"collections": {"mine": mine.to_dict()}})
    )
    assert set(TrainspectSource(tmp_path).collections()) == {"mine"}
    layout.tensor_dir("worker_1").mkdir()
    (layout.tensor_dir("worker_1") / "collections.json").write_text("{")  # damaged
    with_builtins = TrainspectSource(tmp_path).collections()
    assert {"mine", "weights", "gradients", "losses"} <= set(with_builtins)


def test_a_boolean_is_not_an_integer_in_a_checked_json_file() -> None:
    """``true`` where an integer is expected (a worker manifest's pid) makes the file damaged, as JSON readers see it."""
    shape = Obj(optional={"pid": int})
    with pytest.raises(DamagedFile, match="pid is a boolean, expected an integer"):
        check({"pid": True}, shape, "worker_0.json")
    assert check({"pid": 7}, shape, "worker_0.json") == {"pid": 7}
    assert check({"pid": None}, shape, "worker_0.json") == {"pid": None}  # an optional key may be null


def test_a_world_size_that_is_not_an_integer_counts_no_rank() -> None:
    """``"world_size": true`` in a manifest is no world size: the ranks are those with tensors or manifests."""
    assert rank_count({"world_size": True}, {}, 0) == 0
    assert rank_count({"world_size": 4}, {"worker_0": {}}, 2) == 4


def test_a_backward_finding_one_step_after_the_forward_one_is_kept() -> None:
    """A gradient's NaN one step after the forward finding explains the weights too; two steps after, it does not."""
    forward = {"pass": "forward", "step": 5, "module": "fc1"}
    late = {"pass": "backward", "step": 6, "parameter": "w", "loss_finite": True}
    assert first_origins([forward, late]) == [forward, late]
    later = {**late, "step": 7}
    assert first_origins([forward, later]) == [forward]
    made_by_the_loss = {**late, "loss_finite": False}
    assert first_origins([forward, made_by_the_loss]) == [forward]


def test_without_a_finding_up_to_the_step_the_earliest_one_explains_it() -> None:
    """On an accelerator a finding can come a step late: none at or before ``step`` gives the earliest at all."""
    forward = {"pass": "forward", "step": 4, "module": "fc1"}
    assert first_origins([forward, {**forward, "step": 9}], step=3) == [forward]


# --- the MLflow logger's counts (a recording sink: no server) ------------------------------------------------
def _mlflow_logger(run_dir: Path, sink: RecordingSink, **kw: Any) -> Any:
    from trainspect.mlflow_plugin.logger import MlflowLogger

    return MlflowLogger(
        run_dir,
        sink,  # type: ignore[arg-type]
        interval_s=3600.0,
        log_every_n_steps=1,
        tail_system=False,
        watch_verdicts=False,
        **kw,
    )


def test_metrics_spilled_during_an_outage_leave_the_mlflow_run_incomplete(tmp_path: Path) -> None:
    """Once metrics went to the unsent file, the run is not complete even if the server is back by close."""
    pytest.importorskip("mlflow")
    from trainspect.mlflow_plugin.logger import sync_file

    sink = RecordingSink(fail=True)
    logger = _mlflow_logger(tmp_path, sink, max_buffer=1)
    for step in range(3):
        logger.submit(_step(step))
    assert logger.tick(force=True) is False
    sink.fail = False
    assert logger.close() is True  # what stayed in memory arrived
    assert [m.step for m in sink.metrics] == [2]
    doc = json.loads(sync_file(tmp_path).read_text())
    assert doc["complete"] is False and (doc["dropped_metrics"], doc["unsent_metrics"], doc["lost_metrics"]) == (
        2,
        2,
        0,
    )


def test_metrics_that_cannot_be_kept_are_counted_one_by_one(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """An unwritable unsent file loses the metrics: each is counted in ``lost_metrics`` and in the warning."""
    pytest.importorskip("mlflow")
    from trainspect.mlflow_plugin.logger import sync_file
    from trainspect.mlflow_plugin.unsent import unsent_file

    unsent_file(tmp_path).mkdir(parents=True)  # a directory where the file goes: appending fails
    sink = RecordingSink(fail=True)
    logger = _mlflow_logger(tmp_path, sink, max_buffer=1)
    for step in range(3):
        logger.submit(_step(step))
    with caplog.at_level(logging.WARNING, logger="trainspect.mlflow_plugin.logger"):
        assert logger.tick(force=True) is False
        assert logger.close() is False
    lost = [r.getMessage() for r in caplog.records if "lost" in r.getMessage()]
    assert [m.split(":")[1] for m in lost] == [" 2 MLflow metrics lost", " 1 MLflow metrics lost"]
    doc = json.loads(sync_file(tmp_path).read_text())
    assert (doc["unsent_metrics"], doc["lost_metrics"], doc["complete"]) == (0, 3, False)
    assert os.path.isdir(unsent_file(tmp_path))


def test_an_outage_warns_once_and_a_recovery_is_announced_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Repeated failures give one warning; the first send after them says how many metrics it sent, later ones not."""
    pytest.importorskip("mlflow")
    sink = RecordingSink(fail=True)
    logger = _mlflow_logger(tmp_path, sink)
    with caplog.at_level(logging.INFO, logger="trainspect.mlflow_plugin.logger"):
        for step in range(2):
            logger.submit(_step(step))
            assert logger.tick(force=True) is False
        sink.fail = False
        assert logger.tick(force=True) is True
        logger.submit(_step(2))
        assert logger.tick(force=True) is True
    messages = [r.getMessage() for r in caplog.records]
    assert sum("cannot log to MLflow" in m for m in messages) == 1
    assert [m for m in messages if "reachable again" in m] == [
        "trainspect: MLflow reachable again; 2 buffered metrics sent"
    ]
    assert [m.step for m in sink.metrics] == [0, 1, 2]


def test_a_session_flush_does_not_wait_for_the_retry_time(tmp_path: Path) -> None:
    """``MlflowSession.flush`` sends at once, even while the logger backs off after a failure."""
    pytest.importorskip("mlflow")
    from trainspect.mlflow_plugin.session import MlflowSession

    session = MlflowSession(tmp_path, "r1", tracking_uri="http://127.0.0.1:9", log_every_n_steps=1)  # never reached
    sink = RecordingSink(fail=True)
    session.logger.sink = sink  # type: ignore[assignment]
    session.submit(_step(0))
    assert session.flush() is False  # the first failure: the logger now waits seconds before retrying
    sink.fail = False
    assert session.flush() is True and [m.step for m in sink.metrics] == [0]


def test_a_failed_artifact_upload_is_warned_about_and_leaves_the_run_incomplete(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The report upload failing at close: one warning naming ``mlflow-sync``, the sync record says incomplete."""
    pytest.importorskip("mlflow")
    from trainspect.mlflow_plugin.logger import sync_file

    class _NoArtifacts(RecordingSink):
        def log_artifact(self, path: Any, artifact_path: str | None = None) -> None:
            raise PermissionError("artifact store is read-only")

    sink = _NoArtifacts()
    report = tmp_path / "report.html"
    report.write_text("<html></html>")
    logger = _mlflow_logger(tmp_path, sink)
    logger.submit(_step(0))
    with caplog.at_level(logging.WARNING, logger="trainspect.mlflow_plugin.logger"):
        assert logger.close(artifacts=[(str(report), "trainspect")]) is False
    warnings = [r.getMessage() for r in caplog.records if "cannot log to MLflow" in r.getMessage()]
    assert len(warnings) == 1 and "PermissionError" in warnings[0] and "trainspect mlflow-sync" in warnings[0]
    assert [m.step for m in sink.metrics] == [0]  # the metrics arrived; the artifact did not
    assert json.loads(sync_file(tmp_path).read_text())["complete"] is False


def test_a_run_writer_that_fails_mid_batch_keeps_the_steps_already_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A write error in the middle of a batch: the steps of that batch whose bytes reached the disk are indexed."""
    original = TensorFileWriter.write

    def full_disk_at_step_1(self: TensorFileWriter, record: StepRecord) -> None:
        if record.global_step == 1:
            raise OSError(28, "No space left on device")
        original(self, record)

    monkeypatch.setattr(TensorFileWriter, "write", full_disk_at_step_1)
    writer = RunWriter(RunLayout(tmp_path), "worker_0", tensorboard=False)
    big = np.arange(MIB // 4 + 16, dtype=np.float32)  # over 1 MiB: written straight to the disk, not yet indexed
    assert writer.submit(_step(0, w=_weight("w", big))) and writer.submit(_step(1, w=_weight("w", big)))
    with caplog.at_level(logging.WARNING):
        writer.start()  # both steps wait in the queue: one batch
        writer.wait_idle(30)
        assert writer.failed
        writer.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps() == [0] and np.array_equal(trial.tensor("w").value(0), big)


# --- third pass (seed-31 survivors): the writer's defaults ---------------------------------------------------------
def test_the_default_tensor_queue_budget_is_the_256_mib_the_format_docs_state(tmp_path: Path) -> None:
    """Queued steps (the writer not started: nothing leaves the queue) are degraded past 256 MiB, not before."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "format.md").read_text(encoding="utf-8")
    assert "tensor queue's byte budget (256 MiB" in docs
    mib = 1 << 20
    small = np.zeros(mib // 8, np.float32)  # 512 KiB
    under = RunWriter(RunLayout(tmp_path / "under"), "worker_0", tensorboard=False)
    assert under.submit(_step(0, w=_weight("w", np.zeros(255 * mib // 4, np.float32), reductions=False)))
    assert under.submit(_step(1, w=_weight("w", small, reductions=False)))
    assert under.gap_steps == 0  # 255.5 MiB pending
    over = RunWriter(RunLayout(tmp_path / "over"), "worker_0", tensorboard=False)
    assert over.submit(_step(0, w=_weight("w", np.zeros(256 * mib // 4, np.float32), reductions=False)))
    assert over.submit(_step(1, w=_weight("w", small, reductions=False)))
    assert over.gap_steps == 1  # 256.5 MiB: the second step is degraded


def test_a_run_writer_exports_tensorboard_unless_told_not_to(tmp_path: Path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0")
    writer.start()
    writer.submit_scalars((ModeKeys.TRAIN, 0, 0, 1.0), [("loss", 0.75, np.dtype(np.float32), frozenset({"losses"}))])
    writer.close()
    assert list(RunLayout(tmp_path).tensorboard_dir("worker_0").glob("events.out.tfevents*"))


def test_index_records_that_parse_to_more_values_than_records_are_each_left_to_the_slow_path() -> None:
    """A damaged record holding a comma (``1, 2``) makes the joined batch one value too long: none is trusted."""
    from trainspect.store.source import _parse_records

    assert _parse_records([b'{"g": 1}', b"1, 2"]) == [None, None]
    assert _parse_records([b'{"g": 1}', b"3"]) == [{"g": 1}, 3]


# --- fourth pass (seed-37 survivors) -----------------------------------------------------------------------------
def test_a_worker_without_its_collections_file_adds_only_missing_built_ins(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The built-ins' patterns stand in for the missing file; the other worker's recorded members are kept."""
    from synthetic_run import start_run, write_worker_tensors

    run = tmp_path / "run"
    start_run(run, "job", {"framework": "numpy", "config": {}, "world_size": 2})
    for i, worker in enumerate(("worker_0", "worker_1")):
        weight = TensorRecord("w", np.ones(2, np.float32), collections=frozenset({"weights"}))
        write_worker_tensors(run, worker, [StepRecord(ModeKeys.TRAIN, 0, 0, 1.0, worker, {"w": weight})], end=i == 1)
    (run / "tensors" / "worker_1" / run_writer.COLLECTIONS_FILE).unlink()
    with caplog.at_level(logging.WARNING):
        colls = ts.create_trial(str(run)).collections()
    assert "worker_1/collections.json is missing" in caplog.text
    assert set(colls) == {"weights", "biases", "gradients", "losses", "optimizer_variables", "all"}
    assert set(colls["weights"].tensor_names) == {"w"}


def test_gaps_count_each_tensor_that_kept_its_reductions() -> None:
    """Two tensors of the same size kept their reductions: two, not one per distinct size."""
    gaps = [{"step": 3, "reason": "writer backlog", "dropped": [["w", 4000, "reductions"], ["b", 4000, "reductions"]]}]
    assert gaps_summary(gaps).endswith("losses and scalars were kept; 2 of them kept their reductions")


# --- sixth pass (seed-43 survivors) ------------------------------------------------------------------------------
def _open_files(folder: Path) -> set[str]:
    """Names of the files in ``folder`` that this process holds open (Linux: /proc/self/fd)."""
    names = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            continue
        if target.parent == folder:
            names.add(target.name)
    return names


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads the open files from /proc (Linux)")
def test_a_rotated_out_data_file_and_its_index_are_closed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A run of many steps rotates through files: each one left behind is closed, not held open to the end."""
    monkeypatch.setattr(tensor_file, "_ROTATE_BYTES", framing.HEADER_SIZE + 100)
    folder = tmp_path / "tensors" / "worker_0"
    writer = TensorFileWriter(folder)
    for step in range(6):
        writer.write(_tensor(step, 100))
    assert _open_files(folder) == {"data-000002.bin", "index-000002.idx"}
    writer.close()
    assert _open_files(folder) == set()
