"""Time units, trace parsing and system-file windows: the factors, the bounds, which records are kept.

Each unit factor, each window bound (inclusive or not) and each recovery of a damaged trace is pinned against values
worked out by hand.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from trainspect.profiler.events import TraceEvent, key_for, smdebug_names, unit_factor
from trainspect.profiler.system_window import FILE_SPAN_S, SystemFileWindow, needed_files
from trainspect.profiler.traces import in_window, load_trace, parse_trace, read_trace_file, tf_trace_metadata, to_us
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.store.layout import RunLayout

T0 = 1_700_000_000.0


# --- units -------------------------------------------------------------------------------------------------------
def test_unit_factors_from_seconds() -> None:
    assert [unit_factor(u) for u in ("s", "seconds", "ms", "milliseconds", "us", "microseconds", "ns")] == [
        1.0,
        1.0,
        1e3,
        1e3,
        1e6,
        1e6,
        1e9,
    ]
    assert unit_factor("MS") == 1e3
    with pytest.raises(ValueError, match="unit='min'"):
        unit_factor("min")


def test_query_bounds_in_microseconds_are_truncated_as_smdebugs() -> None:
    assert to_us(1.5000009, "s") == 1_500_000 and isinstance(to_us(1.5, "s"), int)
    assert to_us(2.0, "seconds") == 2_000_000 and to_us(2.5, "ms") == 2500 and to_us(7.9, "us") == 7
    assert to_us(7.9, "microseconds") == 7 and to_us(3.0, "milliseconds") == 3000
    assert to_us(1500.0, "ns") == 1.5 and to_us(1500.0, "nanoseconds") == 1.5  # below 1 µs: not truncated
    assert to_us(float("inf"), "s") == float("inf") and to_us(float("-inf"), "ms") == float("-inf")
    with pytest.raises(ValueError, match="allowed: s, ms, us, ns"):
        to_us(1.0, "h")


def test_events_overlapping_a_window_bounds_included() -> None:
    events = [TraceEvent(0.0, 10.0, "a", "p"), TraceEvent(10.0, 20.0, "b", "p"), TraceEvent(21.0, 30.0, "c", "p")]
    assert [e.event_name for e in in_window(events, 10.0, 20.0)] == ["a", "b"]
    assert [e.event_name for e in in_window(events, 20.5, 21.0)] == ["c"]
    assert in_window(events, 30.5, 40.0) == [] and events[2].duration == 9.0


def test_smdebug_names_round_trip() -> None:
    assert smdebug_names("cpu3_utilization_percent") == ("cpu", "cpu3", "CPUUtilization")
    assert key_for(*smdebug_names("cpu3_utilization_percent")) == "cpu3_utilization_percent"
    assert key_for("cpu", "total", "I/OWaitPercentage") == "cpu_iowait_percent"
    assert key_for("x", "MemoryUsedPercent", "y") == "cpu_memory_used_percent"


# --- traces ------------------------------------------------------------------------------------------------------
def test_trace_times_are_placed_on_the_epoch_and_b_e_pairs_merged() -> None:
    raw = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "Step:ModeKeys.TRAIN"}},
        {"ph": "M", "args": {"start_time_since_epoch_in_micros": 1000.0}},
        {"ph": "X", "name": "fwd", "pid": 1, "tid": "7", "ts": 5, "dur": 2, "args": {"a": 1}},
        {"ph": "X", "name": "late", "pid": 2, "ts": 2e15, "dur": 1},  # past 1e15: already absolute
        {"ph": "B", "name": "step", "pid": 3, "ts": 10, "args": {"x": 1}},
        {"ph": "E", "pid": 3, "ts": 12, "args": {"y": 2}},
        {"ph": "E", "pid": 4, "ts": 12},  # no open B: left out
        {"ph": "B", "name": "back", "pid": 5, "ts": 20},
        {"ph": "E", "pid": 5, "ts": 19},  # ends before it began: left out
        {"ph": "X", "name": "no ts", "pid": 1},
    ]
    events = parse_trace(raw, "algo-1")
    assert [(e.event_name, e.start_time, e.end_time) for e in events] == [
        ("fwd", 1005.0, 1007.0),
        ("late", 2e15, 2e15 + 1),
        ("step", 1010.0, 1012.0),
    ]
    assert events[0].event_phase == "Step:ModeKeys.TRAIN" and events[0].tid == 7 and events[0].node_id == "algo-1"
    assert events[1].event_phase == "late" and events[2].event_args == {"x": 1, "y": 2}
    assert parse_trace([{"ph": "X", "name": "a", "ts": 1, "dur": 1}], "n", base_us=100.0)[0].start_time == 101.0


def test_a_trace_cut_off_keeps_its_whole_events(tmp_path: Path) -> None:
    whole = [{"ph": "X", "name": f"e{i}", "pid": 1, "ts": i, "dur": 1} for i in range(3)]
    plain = tmp_path / "1000_node-a_pythontimeline.json"
    plain.write_text(json.dumps(whole))
    assert load_trace(plain) == (whole, False)
    cut = tmp_path / "1000_node-a_cut.json"
    cut.write_text("[\n" + ",\n".join(json.dumps(e) for e in whole) + ",\n")  # the closing bracket never written
    assert load_trace(cut) == (whole, True)
    broken = tmp_path / "1000_node-a_broken.json"
    broken.write_text("[\n" + json.dumps(whole[0]) + ",\n" + json.dumps(whole[1])[:-5] + "\n" + json.dumps(whole[2]))
    events, damaged = load_trace(broken)
    assert [e["name"] for e in events] == ["e0", "e2"] and damaged
    wrapped = tmp_path / "x.json.gz"
    wrapped.write_bytes(gzip.compress(json.dumps({"traceEvents": whole}).encode()))
    assert load_trace(wrapped) == (whole, False)
    events, problem = read_trace_file(cut)
    assert [e.node_id for e in events] == [
        "node-a"
    ] * 3 and problem == "truncated or malformed trace; readable events kept"
    assert read_trace_file(tmp_path / "missing_x_y.json")[1] is not None


# --- system files of a window ------------------------------------------------------------------------------------
def _files(*starts_s: float) -> list[Path]:
    return [Path(f"{int(s * 1000):013d}.tsys") for s in starts_s]


def test_a_file_can_hold_samples_up_to_the_next_file_or_its_hour() -> None:
    assert FILE_SPAN_S == 3600.0
    files = _files(0.0, 100.0, 5000.0)
    assert needed_files(files, 99.0, 100.0) == files[:1]  # the window ends where file 1 starts: not needed
    assert needed_files(files, 100.001, 100.5) == files[1:2]  # file 0 ends (plus its last ms) at 100.001 s
    assert needed_files(files, 100.0, 100.5) == files[:2]  # within that ms: both
    assert needed_files(files, 3700.5, 3701.0) == []  # after file 1's hour, before file 2
    assert needed_files(files, 3699.9, 3701.0) == files[1:2]
    assert needed_files(files, None, 50.0) == files[:1] and needed_files(files, 4999.0, None) == files[2:]
    assert needed_files([Path("notes.tsys"), *files], None, None) == files


def _write_node(root: Path, node: str, times: list[float]) -> None:
    writer = SystemChunkWriter(RunLayout(root).system_dir(node), node, 1000)
    for t in times:
        writer.append(t, {"cpu0_utilization_percent": t - T0})
    writer.close()


def test_a_window_reads_the_samples_from_start_to_before_end(tmp_path: Path) -> None:
    _write_node(tmp_path, "n0", [T0 + i for i in range(10)])
    _write_node(tmp_path, "n1", [T0 + 100.0])
    folder = next(p.parents[2] for p in tmp_path.rglob("*.tsys"))  # the folder holding system/<node>/
    window = SystemFileWindow(folder)
    assert window.nodes() == ["n0", "n1"]
    arr = window.node_arrays("n0", T0 + 2, T0 + 5)
    assert (arr.timestamps - T0).tolist() == [2.0, 3.0, 4.0]  # the end is excluded
    assert arr.column("cpu0_utilization_percent").tolist() == [2.0, 3.0, 4.0] and arr.interval_ms == 1000
    assert {p.parent.name for p in window.files_read} == {"n0"}  # only the node asked for was read
    assert list(window.arrays(T0, T0 + 50)) == ["n0"]  # a node without samples in the window is left out
    assert len(window.arrays(None, None)["n0"]) == 10
    assert window.span() == (T0, T0 + 100.0)
    assert SystemFileWindow(tmp_path / "none").span() is None
    assert np.isclose(window.node_arrays("n1", T0 + 100.0, T0 + 100.001).timestamps[0], T0 + 100.0)


def test_a_tf_trace_is_placed_by_the_metadata_of_its_step_folder(tmp_path: Path) -> None:
    step_dir = tmp_path / "000000000100"
    trace = step_dir / "plugins" / "profile" / "run1" / "host.trace.json.gz"
    trace.parent.mkdir(parents=True)
    trace.write_bytes(
        gzip.compress(json.dumps({"traceEvents": [{"ph": "X", "name": "op", "ts": 5, "dur": 2}]}).encode())
    )
    (step_dir / "algo-1_1000_2000.metadata").write_text("")
    assert tf_trace_metadata(trace) == ("algo-1", 1000, 2000)
    events, problem = read_trace_file(trace)
    assert [(e.start_time, e.end_time, e.node_id) for e in events] == [(1005.0, 1007.0, "algo-1")] and problem is None
    (step_dir / "algo-1_1000_2000.metadata").unlink()
    assert read_trace_file(trace) == (
        [],
        "no <node>_<start>_<end>.metadata file next to the TF trace: its start time is unknown",
    )


def test_a_relative_tf_trace_path_finds_the_metadata_four_folders_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    trace = Path("plugins") / "profile" / "run1" / "host.trace.json.gz"  # its step folder: the working directory
    trace.parent.mkdir(parents=True)
    trace.write_bytes(gzip.compress(b"[]"))
    Path("algo-2_10_20.metadata").write_text("")
    assert tf_trace_metadata(trace) == ("algo-2", 10, 20)
