"""Issue 14 (point 5): one framing for every framed file; its resync never lets one bad record hide the next ones."""

from __future__ import annotations

import logging
import struct
from pathlib import Path

import numpy as np
import pytest
from storetrain import tname, write_run

import trainspect as ts
from trainspect.profiler import SystemMetricsReader, schema
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.store import framing
from trainspect.store.layout import RunLayout


def test_profiler_frames_are_store_frames() -> None:
    raw = schema.encode_frame(schema.KIND_EVENT, schema.encode_json({"event": "start"}))
    (rec,) = framing.scan_frames(raw, newest=1).records
    assert (rec.kind, rec.version) == (schema.KIND_EVENT, schema.FRAME_VERSION)
    assert framing.read_frame_at(raw, 0, len(raw) - framing.HEADER_SIZE) == rec.payload
    assert schema.scan_frames(framing.frame(3, b"x") + b"x").frames == []  # a newer framing version is skipped
    assert "schema_version 2" in schema.scan_frames(framing.frame(3, b"x") + b"x").problems[0]


def test_a_corrupted_length_field_hides_no_later_record(tmp_path: Path) -> None:
    out = tmp_path / "run"
    tiny = write_run(out)
    (idx,) = (out / "tensors" / "worker_0").glob("index-*.idx")
    raw = bytearray(idx.read_bytes())
    starts = [r.offset for r in framing.scan_frames(bytes(raw)).records]
    struct.pack_into("<I", raw, starts[2] + 4, 0xFFFFFF00)  # step 2 claims to run far past the end of the file
    idx.write_bytes(bytes(raw))
    trial = ts.create_trial(out)
    assert trial.steps() == [0, 1, 3, 4, 5, 6, 7]  # before: every step after 2 was taken for an unfinished record
    assert trial.corrupt_records == 1 and any("corrupt" in p for p in trial.problems)
    np.testing.assert_array_equal(trial.tensor(tname("0.weight")).value(7), tiny.log[7].weights["0.weight"])


def test_garbage_between_records_is_skipped_up_to_the_next_valid_record() -> None:
    good = [framing.frame(2, p) + p for p in (b'{"a":1}', b'{"b":2}', b'{"c":3}')]
    junk = b"TS\x02\x02garbage with a fake header"
    buf = good[0] + junk + good[1] + good[2]
    scan = framing.scan_frames(buf, base_offset=100)
    assert [r.payload for r in scan.records] == [b'{"a":1}', b'{"b":2}', b'{"c":3}']
    assert scan.corrupt == 1 and not scan.truncated and scan.resume_at == 100 + len(buf)
    assert scan.problems == [f"corrupt record at byte {100 + len(good[0])} ({len(junk)} bytes skipped)"]
    half = framing.scan_frames(buf[:-3], base_offset=100)
    assert half.truncated and half.resume_at == 100 + len(buf) - len(good[2])


def test_truncated_profiler_frame_is_reported_at_once_when_the_job_has_ended(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    writer = SystemChunkWriter(RunLayout(tmp_path).system_dir("n0"), "n0", 100)
    for i in range(20):
        writer.append(1.7e9 + i * 0.1, {"cpu0_utilization_percent": float(i)})
        if i % 10 == 9:
            writer.flush()
    writer.close()
    (path,) = RunLayout(tmp_path).system_dir("n0").glob("*.tsys")
    path.write_bytes(path.read_bytes()[:-5])
    caplog.set_level(logging.WARNING)
    assert len(SystemMetricsReader(tmp_path).read_arrays()["n0"]) == 10
    assert not caplog.records  # a fresh file of a running job: the writer may still be finishing that frame
    RunLayout(tmp_path).end_marker.write_text("1")
    reader = SystemMetricsReader(tmp_path)
    assert len(reader.read_arrays()["n0"]) == 10
    assert any("truncated" in r.getMessage() and path.name in r.getMessage() for r in caplog.records)
    assert reader.problems() and path.name in reader.problems()[0]


@pytest.mark.parametrize("version", [1, 2])
def test_a_payload_changed_in_place_fails_its_checksum(version: int) -> None:
    good, bad = b'{"g":2,"m":1}', b'{"g":9,"m":1}'  # same length, valid JSON: only the checksum tells
    buf = framing.frame(2, good, version) + bad + framing.frame(2, good, version) + good
    scan = framing.scan_frames(buf)
    assert [(r.offset, r.payload) for r in scan.records] == [(framing.HEADER_SIZE + len(bad), good)]
    assert scan.corrupt == 1 and not scan.truncated and scan.newer == 0
    with pytest.raises(framing.CorruptRecord):
        framing.read_frame_at(buf, 0, len(bad))
    assert bytes(framing.read_frame_at(buf, framing.HEADER_SIZE + len(bad), len(good))) == good


def test_an_index_record_still_valid_json_but_altered_is_skipped(tmp_path: Path) -> None:
    out = tmp_path / "run"
    write_run(out)
    (idx,) = (out / "tensors" / "worker_0").glob("index-*.idx")
    raw = idx.read_bytes()
    (rec,) = [r for r in framing.scan_frames(raw).records if r.payload.startswith(b'{"g":2,')]
    start = rec.offset + framing.HEADER_SIZE
    idx.write_bytes(raw[:start] + b'{"g":9,' + raw[start + 7 :])  # the JSON still parses: step 2 claims to be step 9
    trial = ts.create_trial(out)
    assert trial.steps() == [0, 1, 3, 4, 5, 6, 7]
    assert trial.corrupt_records == 1


def test_a_short_tail_is_a_record_being_written_only_when_it_starts_like_one() -> None:
    good = framing.frame(2, b"{}") + b"{}"
    for tail in (b"T", b"TS", b"TS\x02\x02"):  # the start of a header: still being written
        scan = framing.scan_frames(good + tail)
        assert scan.truncated and scan.corrupt == 0 and scan.resume_at == len(good), tail
    for tail in (b"X", b"SX", b"TX\x02"):  # not a record's start: damage
        scan = framing.scan_frames(good + tail)
        assert not scan.truncated and scan.corrupt == 1 and scan.resume_at == len(good) + len(tail), tail
    newer = framing.HEADER.pack(framing.MAGIC, 3, 2, 2, 0) + b"{}"  # a future framing version
    scan = framing.scan_frames(good + newer + good)
    assert scan.newer == 1 and scan.corrupt == 0 and len(scan.records) == 2


def test_a_whole_header_at_the_end_is_judged_by_its_fields_not_by_its_magic() -> None:
    """A tail that is exactly one header: complete when it claims an empty payload (a bad checksum is damage), still
    being written when it claims more bytes than follow."""
    good = framing.frame(2, b"{}") + b"{}"
    empty_bad_crc = framing.HEADER.pack(framing.MAGIC, framing.VERSION, 2, 0, 7)  # crc of b"" is 0, not 7
    scan = framing.scan_frames(good + empty_bad_crc)
    assert not scan.truncated and scan.corrupt == 1 and len(scan.records) == 1
    cut = framing.HEADER.pack(framing.MAGIC, framing.VERSION, 2, 5, 0)  # 5 payload bytes not written yet
    scan = framing.scan_frames(good + cut)
    assert scan.truncated and scan.corrupt == 0 and scan.resume_at == len(good)
