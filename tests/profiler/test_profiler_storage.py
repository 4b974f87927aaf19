"""The on-disk format: round trips, compactness, damage handling, tailing."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

import numpy as np
import pytest

from trainspect.profiler import SystemMetricsReader, schema
from trainspect.profiler.writers import FrameFile, SystemChunkWriter

KEYS = [f"cpu{i}_utilization_percent" for i in range(64)] + [f"gpu{g}_utilization_percent" for g in range(8)]


def _write(directory: Path, rows: int, keys: list[str] = KEYS, per_chunk: int = 10, t0: float = 1.7e9) -> np.ndarray:
    rng = np.random.default_rng(0)
    values = rng.uniform(0, 100, (rows, len(keys))).round(1)
    writer = SystemChunkWriter(directory, "n0", 100)
    for i in range(rows):
        writer.append(t0 + i * 0.1, dict(zip(keys, values[i], strict=True)))
        if (i + 1) % per_chunk == 0:
            writer.flush()
    writer.close()
    return values


def test_system_chunk_round_trip_and_missing() -> None:
    times = np.array([1_700_000_000_000, 1_700_000_000_100], dtype=np.int64)
    values = np.array([[12.345, 1e9, np.nan], [100.0, np.nan, 3.0]])
    encs = ["u16c", "f32", "u16c"]
    t, v = schema.decode_system_chunk(schema.encode_system_chunk(times, values, encs), encs)
    assert t.tolist() == times.tolist()
    assert abs(v[0, 0] - 12.345) <= 0.0051 and v[0, 1] == 1e9  # centi-percent resolution
    assert np.isnan(v[0, 2]) and np.isnan(v[1, 1]) and v[1, 2] == 3.0


def test_at_most_8_bytes_per_sample(tmp_path: Path) -> None:
    values = _write(tmp_path / "sys", 600)  # one minute at 100 ms, 72 metrics, 1 s chunks
    size = sum(p.stat().st_size for p in (tmp_path / "sys").iterdir())
    assert size / values.size <= 8.0
    host = [
        "cpu0_utilization_percent",
        "cpu1_utilization_percent",
        "cpu_memory_used_bytes",
        "disk_read_bytes_per_second",
    ]
    few = _write(tmp_path / "few", 120, host, per_chunk=2)  # 500 ms samples flushed each second, 4 metrics
    size = sum(p.stat().st_size for p in (tmp_path / "few").iterdir())
    assert size / few.size <= 8.0


def test_reader_reads_what_was_written(tmp_path: Path) -> None:
    values = _write(tmp_path / "profiler" / "system" / "n0", 100)
    arrays = SystemMetricsReader(tmp_path).read_arrays()["n0"]
    assert arrays.keys == tuple(KEYS) and arrays.values.shape == (100, 72)
    np.testing.assert_allclose(arrays.values, values, atol=0.006)
    assert arrays.timestamps[1] - arrays.timestamps[0] == pytest.approx(0.1)


def _frames(path: Path) -> list[int]:
    data = path.read_bytes()
    return [f.offset for f in schema.scan_frames(data).frames]


def test_corrupt_frame_skipped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = tmp_path / "profiler" / "system" / "n0"
    _write(node, 50)  # schema + 5 chunks
    path = next(node.iterdir())
    offsets = _frames(path)
    raw = bytearray(path.read_bytes())
    raw[offsets[2] + 20] ^= 0xFF  # damage the second data chunk
    raw[offsets[4] + 30] ^= 0xFF  # and the fourth
    path.write_bytes(bytes(raw))
    with caplog.at_level(logging.WARNING):
        arrays = SystemMetricsReader(tmp_path).read_arrays()["n0"]
    assert len(arrays) == 30
    assert len([r for r in caplog.records if "damaged" in r.getMessage()]) == 1


def test_truncated_tail(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = tmp_path / "profiler" / "system" / "n0"
    _write(node, 50)
    path = next(node.iterdir())
    with open(path, "r+b") as fh:
        fh.truncate(path.stat().st_size - 7)
    reader = SystemMetricsReader(tmp_path)
    with caplog.at_level(logging.WARNING):
        assert len(reader.read_arrays()["n0"]) == 40
    assert not caplog.records  # a fresh file may still be being written: no warning yet
    old = time.time() - 60
    os.utime(path, (old, old))
    with caplog.at_level(logging.WARNING):
        assert len(SystemMetricsReader(tmp_path).read_arrays()["n0"]) == 40
    assert any("truncated" in r.getMessage() for r in caplog.records)


def test_newer_schema_version_skipped(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    node = tmp_path / "profiler" / "system" / "n0"
    _write(node, 20)
    path = next(node.iterdir())
    body = schema.encode_frame(schema.KIND_SYSTEM, b"future")
    body = body[:2] + bytes([schema.SCHEMA_VERSION + 1]) + body[3:]
    with open(path, "ab") as fh:
        fh.write(body)
    with caplog.at_level(logging.WARNING):
        assert len(SystemMetricsReader(tmp_path).read_arrays()["n0"]) == 20
    assert any("schema_version" in r.getMessage() for r in caplog.records)


def test_tailing_a_growing_file(tmp_path: Path) -> None:
    writer = SystemChunkWriter(tmp_path / "profiler" / "system" / "n0", "n0", 500)
    reader = SystemMetricsReader(tmp_path)
    assert reader.read_arrays() == {}
    writer.append(1.7e9, {"cpu0_utilization_percent": 10.0})
    writer.flush()
    assert len(reader.read_arrays()["n0"]) == 1
    for i in range(1, 4):
        writer.append(1.7e9 + i * 0.5, {"cpu0_utilization_percent": 10.0 + i})
    writer.flush()
    arrays = reader.read_arrays()["n0"]
    assert arrays.values[:, 0].tolist() == [10.0, 11.0, 12.0, 13.0]
    assert reader.get_timestamp_of_latest_available_file() == pytest.approx(1.7e9 + 1.5, abs=1e-6)
    writer.append(1.7e9 + 2, {"cpu0_utilization_percent": 1.0, "gpu0_utilization_percent": 50.0})  # new keys: new file
    writer.close()
    arrays = reader.read_arrays()["n0"]
    assert len(arrays) == 5 and np.isnan(arrays.column("gpu0_utilization_percent")[0])  # type: ignore[index]


def test_table_and_json_frames(tmp_path: Path) -> None:
    f = FrameFile(tmp_path / "x.tfw")
    f.write_json(schema.KIND_EVENT, {"event": "start"})
    f.write(schema.KIND_TABLE, schema.encode_table("steps", {"a": np.arange(3), "b": np.ones(3, np.float32)}))
    f.close()
    frames = schema.scan_frames((tmp_path / "x.tfw").read_bytes()).frames
    assert schema.decode_json(frames[0].payload) == {"schema_version": 1, "event": "start"}
    name, cols = schema.decode_table(frames[1].payload)
    assert name == "steps" and cols["a"].tolist() == [0, 1, 2] and cols["b"].dtype == np.float32
