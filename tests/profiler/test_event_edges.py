"""SageMaker profiler files at their edges: metrics no catalogue names, gzip'd traces past the decompression cap.

Real files written into a temporary folder in SageMaker's formats, read by the same readers a user's
``load_profiler_data`` call goes through.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from trainspect.profiler import SystemMetricsReader, traces
from trainspect.profiler.analysis import job_statistics
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.sagemaker import read_system_file
from trainspect.profiler.traces import load_trace, read_trace_file
from trainspect.store.safe_files import UnsafeFile

T0 = 1_700_000_000.0


def test_a_metric_no_catalogue_names_reads_under_a_key_made_of_its_type_name_and_dimension(tmp_path: Path) -> None:
    folder = tmp_path / "system" / "incremental" / "2023111422"
    folder.mkdir(parents=True)
    recs = [
        {"Type": "io", "Name": "Lustre", "Dimension": "Read MB", "Value": 12.5, "NodeId": "algo-1", "Timestamp": T0},
        {
            "Type": "Net",
            "Name": "eth0 (rx)",
            "Dimension": "--Bytes/s--",
            "Value": 3.0,
            "NodeId": "algo-1",
            "Timestamp": T0,
        },
        {
            "Type": "cpu",
            "Name": "cpu0",
            "Dimension": "CPUUtilization",
            "Value": 50.0,
            "NodeId": "algo-1",
            "Timestamp": T0,
        },
    ]
    path = folder / f"{int(T0)}.algo-1.json"
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    records, problem = read_system_file(path)
    assert problem is None
    assert [r.key for r in records] == ["io_lustre_read_mb", "net_eth0_rx_bytes_s", "cpu0_utilization_percent"]
    events = SystemMetricsReader(tmp_path).get_events(T0 - 1, T0 + 1)
    assert sorted(e.key for e in events) == ["cpu0_utilization_percent", "io_lustre_read_mb", "net_eth0_rx_bytes_s"]


def _trace_text(n: int) -> bytes:
    events = [{"ph": "X", "name": f"step_{i:04d}", "pid": 1, "tid": 2, "ts": 10 * i, "dur": 5} for i in range(n)]
    return json.dumps(events).encode()


def test_a_gzipd_trace_that_inflates_past_the_cap_is_refused_not_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _trace_text(40)
    cap = len(text) - 1  # a cap just under the trace (the real one is 1 GiB: too large for a test)
    monkeypatch.setattr(traces, "TRACE_CAP", cap)
    one = tmp_path / "1000_algo-1_one.json.gz"
    one.write_bytes(gzip.compress(text))
    with pytest.raises(UnsafeFile, match="decompresses to over"):
        load_trace(one)
    half = len(text) // 2  # two gzip members, each under the cap, together over it
    two = tmp_path / "1000_algo-1_two.json.gz"
    two.write_bytes(gzip.compress(text[:half]) + gzip.compress(text[half:]))
    with pytest.raises(UnsafeFile, match="decompresses to over"):
        load_trace(two)
    events, problem = read_trace_file(two)
    assert events == [] and problem is not None and "decompresses to over" in problem
    monkeypatch.setattr(traces, "TRACE_CAP", half)  # a first member exactly at the cap: the next one is too much
    with pytest.raises(UnsafeFile, match="decompresses to over"):
        load_trace(two)


def test_a_gzipd_trace_of_several_members_within_the_cap_reads_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _trace_text(40)
    monkeypatch.setattr(traces, "TRACE_CAP", len(text))  # exactly the trace: still read
    third = len(text) // 3
    path = tmp_path / "1000_algo-1_members.json.gz"
    path.write_bytes(b"".join(gzip.compress(text[i : i + third]) for i in range(0, len(text), third)))
    events, problem = read_trace_file(path)
    assert problem is None
    assert [e.event_name for e in events] == [f"step_{i:04d}" for i in range(40)]
    assert (events[-1].start_time, events[-1].end_time, events[-1].node_id) == (390.0, 395.0, "algo-1")


def test_a_trace_whose_trace_events_is_not_a_list_reads_as_no_events_and_says_so(tmp_path: Path) -> None:
    path = tmp_path / "1000_algo-1_pythontimeline.json"
    path.write_text(json.dumps({"traceEvents": 5}))
    assert load_trace(path) == ([], True)
    events, problem = read_trace_file(path)
    assert events == [] and problem == "truncated or malformed trace; readable events kept"


def test_a_training_loop_shorter_than_a_second_is_reported_at_its_length(tmp_path: Path) -> None:
    tab = FrameworkTables("worker_0", "n0", process_start=T0, recorder_start=T0)
    tab.steps = {
        "mode": np.ones(2, np.uint8),
        "mode_step": np.arange(2, dtype=np.int64),
        "global_step": np.arange(2, dtype=np.int64),
        "start": np.array([T0 + 2.0, T0 + 2.25]),
        "end": np.array([T0 + 2.2, T0 + 2.5]),  # the loop: 2.0 s to 2.5 s
    }
    stats = job_statistics(ProfilerData(tmp_path, system={}, framework={"worker_0": tab}, job_ended=True))
    assert (stats["training_loop_start"], stats["training_loop_end"]) == (T0 + 2.0, T0 + 2.5)
    assert stats["training_loop_s"] == 0.5 and stats["initialization_s"] == 2.0
