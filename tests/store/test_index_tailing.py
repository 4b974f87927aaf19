"""Reading index files while they grow and after damage: every complete record once, every damaged one counted.

The index files are written by the tensor writer and then cut or altered byte by byte, so the records a reader must
keep and skip are known exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.step import StepRecord, TensorRecord
from trainspect.store import framing
from trainspect.store.index import TrialIndex
from trainspect.store.source import TrainspectSource
from trainspect.store.tensor_file import KIND_INDEX, TensorFileWriter


def _write(folder: Path, steps: range) -> Path:
    writer = TensorFileWriter(folder)
    for s in steps:
        loss = TensorRecord("loss", np.array(1.0 / (s + 1), np.float32), collections=frozenset({"losses"}))
        writer.write(StepRecord(ModeKeys.TRAIN, s, s, 1000.0 + s, "worker_0", {"loss": loss}))
    writer.close()
    (idx,) = folder.glob("index-*.idx")
    return idx


def test_a_record_still_being_written_is_read_once_it_is_complete(tmp_path: Path) -> None:
    idx = _write(tmp_path / "tensors" / "worker_0", range(4))
    whole = idx.read_bytes()
    starts = [r.offset for r in framing.scan_frames(whole).records]
    idx.write_bytes(whole[: starts[3] + 10])  # the last record cut inside its header
    source, index = TrainspectSource(tmp_path), TrialIndex()
    assert source.refresh(index) == 3 and index.sorted_steps == [0, 1, 2]
    assert source.corrupt_records == 0
    assert source.problems and f"at byte {starts[3]}" in " ".join(source.problems)
    idx.write_bytes(whole)  # the rest lands
    assert source.refresh(index) == 1 and index.sorted_steps == [0, 1, 2, 3]
    assert source.refresh(index) == 0  # nothing new: nothing read twice
    assert source.corrupt_records == 0


def test_damaged_and_misshapen_records_are_counted_and_the_rest_kept(tmp_path: Path) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    idx = _write(folder, range(5))
    raw = bytearray(idx.read_bytes())
    records = framing.scan_frames(bytes(raw)).records
    payload_at = records[1].offset + framing.HEADER_SIZE
    raw[payload_at] ^= 0xFF  # step 1 fails its checksum
    misshapen = json.dumps({"g": 9, "ms": 9, "f": "data-000000.bin", "e": []}).encode()  # no mode
    unknown_mode = json.dumps({"g": 10, "m": 9, "ms": 10, "f": "data-000000.bin", "e": []}).encode()
    raw += framing.frame(KIND_INDEX, misshapen) + misshapen + framing.frame(KIND_INDEX, unknown_mode) + unknown_mode
    idx.write_bytes(bytes(raw))
    source, index = TrainspectSource(tmp_path), TrialIndex()
    source.refresh(index)
    assert index.sorted_steps == [0, 2, 3, 4]
    assert source.corrupt_records == 3  # one damaged region, two records of the wrong shape
    at, size = records[1].offset, records[2].offset - records[1].offset
    assert source.problems[0].endswith(
        f"skipped 1 corrupt index record(s): corrupt record at byte {at} ({size} bytes skipped)"
    )
    assert source.problems[1].startswith("skipped 2 index records of the wrong shape in 1 file, first: ")


def test_a_missing_data_file_and_a_damaged_collections_file_are_named(tmp_path: Path) -> None:
    folder = tmp_path / "tensors" / "worker_0"
    _write(folder, range(2))
    for data in folder.glob("data-*.bin"):
        data.unlink()
    (folder / "collections.json").write_text("{")
    source, index = TrainspectSource(tmp_path), TrialIndex()
    assert source.collections() is not None  # the built-in collections
    assert source.refresh(index) == 2 and index.sorted_steps == [0, 1]  # the losses are in the index itself
    assert any(
        "data-000000.bin: it is missing: the raw tensor values its index points to" in p for p in source.problems
    )
    damaged = [p for p in source.problems if "collections.json" in p]
    assert len(damaged) == 1 and damaged[0].endswith("; the built-in collections' patterns are used")
    assert "DamagedFile" not in damaged[0]
