"""SageMaker profiler output read as SageMaker meant it.

Real files: smdebug's own test resources (awslabs/sagemaker-debugger ``tests/profiler/resources``, Apache-2.0),
copied into ``tests/data/smdebug_profiler_resources`` (its README.md says whence); the expected counts
are the ones smdebug's tests assert (``tests/profiler/core/test_system_metric_reader.py``,
``test_algorithm_metric_readers.py``, ``test_system_profiler_file_parser.py``, ``test_smtfprofiler_events.py``,
``test_horovodprofiler_events.py``, ``test_tfprofiler_events.py``).
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import pytest

from trainspect.modes import ModeKeys
from trainspect.profiler import FrameworkMetricsReader, SystemMetricsReader, load_profiler_data
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.ending import newest_data_time, run_over
from trainspect.profiler.sagemaker import (
    SageMakerFrameworkStore,
    SageMakerSystemStore,
    read_system_file,
    select_records,
)
from trainspect.profiler.traces import in_window, read_trace_file, to_us
from trainspect.rules.engine import evaluate
from trainspect.rules.profiler import CPUBottleneck, OverallSystemUsage
from trainspect.rules.verdict import Status

FIX = Path(__file__).resolve().parents[1] / "data" / "smdebug_profiler_resources"  # see its README.md (Apache-2.0)
NOW_US = time.time() * 1e6


@pytest.fixture(scope="module")
def res() -> Path:
    assert FIX.is_dir(), f"the fixtures are missing: {FIX}"
    return FIX


# --- smdebug's expected counts on its own resources ---------------------------------------------------------
def test_system_reader_selects_what_smdebug_selects(res: Path) -> None:
    reader = SystemMetricsReader(res / "test_traces")
    assert reader.source == "sagemaker"
    assert len(reader.get_events(1591100000, 1692300000)) == 78
    assert len(reader.get_events(1591100000, 1692300000, "s", "cpu")) == 68
    assert len(reader.get_events(1591100000, 1591167699)) == 10
    assert len(reader.get_events(1591748165, 1600000000)) == 32
    assert len(reader.get_events(1591100000e6, 1591167699e6, unit="us")) == 10
    cpu11 = [e for e in reader.get_events(1591748109, 1591748110) if e.name == "cpu11"]
    assert len(cpu11) == 1 and cpu11[0].value == 51.1 and cpu11[0].dimension == "CPUUtilization"
    assert cpu11[0].timestamp == 1591748109.2321954  # the record's own timestamp, not its tick's


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        ("1591160699.algo-1.json", (14, 14, 4, 11, 2, 2, 0)),
        ("1591160699.algo-1.json.corrupt", (13, 13, 4, 11, 1, 1, 0)),
    ],
)
def test_system_file_windows(res: Path, name: str, counts: tuple[int, ...]) -> None:
    records, problem = read_system_file(res / name)
    assert (problem is None) == name.endswith(".json")  # the damaged line is skipped and reported
    got = (
        len(records),
        len(select_records(records, 0, 1591170700.4570)),
        len(select_records(records, 0, 1591170700.4570, "s", "cpu")),
        len(select_records(records, 0, 1591167699.9572)),
        len(select_records(records, 1591169699.4579, 2591167699.9572)),
        len(select_records(records, 1591169699.4579, 2591167699.9572, "s", "gpu")),
        len(select_records(records, 0, 0, "s", "gpu")),
    )
    assert got == counts


def test_framework_reader_selects_what_smdebug_selects(res: Path) -> None:
    assert len(FrameworkMetricsReader(res / "test_traces").get_events(1589930980, 1589930995)) == 4
    model = FrameworkMetricsReader(res / "model_timeline_traces").get_events(1590461127873222, 1590461139949971, "us")
    assert len(model) == 54 and model[0].node_id == "0001"  # one event ends exactly on the lower bound
    horovod = FrameworkMetricsReader(res / "horovod_timeline_traces")
    assert len(horovod.get_events(1593673051472800, 1593673051473100, unit="us")) == 15
    seconds = horovod.get_events(1593673051.472800, 1593673051.473100)
    assert len(seconds) == 15 and 1.5e9 < seconds[0].start_time < 1.7e9


def test_single_trace_files(res: Path) -> None:
    events, problem = read_trace_file(res / "1589314018481947000_1234-testhost_model_timeline.json")
    assert problem is None and len(events) == 49 and events[10].node_id == "1234-testhost"
    assert len(in_window(events, to_us(0, "s"), to_us(1589314018.4700, "s"))) == 39
    assert min(e.start_time for e in events) == 1589314018458743
    assert max(e.end_time for e in events) == 1589314018481947
    trace = next(res.glob("horovod_timeline_traces/**/1593673051473228_*"))
    events, _ = read_trace_file(trace)
    assert len(events) == 19  # X events; the two "E" without an open "B" and the instant event are not events
    assert len(in_window(events, 1593673051473000, 1593673051473228)) == 12
    assert min(e.start_time for e in events) == 1592860696000713
    assert max(e.end_time for e in events) == 1593673051473228


def test_live_refresh_parses_only_new_or_grown_framework_files(res: Path, tmp_path: Path) -> None:
    shutil.copytree(res / "model_timeline_traces", tmp_path / "job")
    store = SageMakerFrameworkStore(tmp_path / "job")
    store.refresh()
    tables = store.tables()
    parsed = len(store.events_us())
    assert parsed > 0 and list(tables) == ["0001"]
    store.refresh()  # nothing changed on disk: the parsed files and the tables built from them are kept
    assert store.tables() is tables
    trace = min((tmp_path / "job").rglob("*_model_timeline.json"))
    events = json.loads(trace.read_text())
    events.append({**events[-1], "ts": events[-1]["ts"] + 1})  # the file grew (a running job's timeline)
    trace.write_text(json.dumps(events))
    store.refresh()
    assert store.tables() is not tables and len(store.events_us()) == parsed + 1


def test_timeline_file_names_in_microseconds_or_nanoseconds_date_the_files(res: Path, tmp_path: Path) -> None:
    """A timeline file's name begins with the epoch time of its last event: in µs, or in ns past 1e17."""
    reader = FrameworkMetricsReader(res / "model_timeline_traces")
    assert reader.get_timestamp_of_first_available_file("us") == pytest.approx(1590461127873222, abs=1)
    first = next((res / "model_timeline_traces").rglob("1590461127873222_0001_model_timeline.json"))
    folder = tmp_path / "framework" / "pevents" / "2020052602"
    folder.mkdir(parents=True)
    shutil.copy(first, folder / "1590461127873222000_0001_model_timeline.json")
    in_ns = FrameworkMetricsReader(tmp_path)
    assert in_ns.get_timestamp_of_first_available_file("us") == pytest.approx(1590461127873222, abs=1)


def test_a_step_event_named_by_its_mode_is_that_modes_step_whatever_its_process_is_named(tmp_path: Path) -> None:
    """The mode of a step comes from the event's own ``Step:ModeKeys.*`` name before its process's name."""
    folder = tmp_path / "framework" / "pevents" / "2020052602"
    folder.mkdir(parents=True)
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
        {
            "ph": "X",
            "name": "Step:ModeKeys.EVAL",
            "pid": 1,
            "ts": 1590461127000000,
            "dur": 500,
            "args": {"step_num": "3"},
        },
    ]
    (folder / "1590461127000500_algo-1_pythontimeline.json").write_text(json.dumps(events))
    (tab,) = FrameworkMetricsReader(tmp_path).read_tables().values()
    assert tab.steps["mode"].tolist() == [int(ModeKeys.EVAL)] and tab.steps["mode_step"].tolist() == [3]


def test_tf_detailed_profiler_trace_read_into_framework_events(res: Path) -> None:
    root = res / "tfprofiler_timeline_traces"
    reader = FrameworkMetricsReader(root)
    events = reader.get_events(0, NOW_US, unit="us")
    assert reader.source == "sagemaker" and len(events) == 798
    start = 1596659864545103  # from 80807-8c859046be41.ant.amazon.com_1596659864545103_1596659864854168.metadata
    assert events[0].start_time - start == 21307.0
    assert max(e.end_time for e in events) - start == 293205.0
    assert {e.event_phase for e in events} == {"/host:CPU"}
    assert {e.node_id for e in events} == {"80807-8c859046be41.ant.amazon.com"}
    assert any(e.event_name.startswith("Iterator::") for e in events)
    # to the microsecond (pytest.approx's default 1e-6 relative tolerance is ~27 minutes of an epoch time)
    assert reader.get_timestamp_of_first_available_file("us") == pytest.approx(1596659864854168, abs=1)
    assert newest_data_time(root) == pytest.approx(1596659864.854168, abs=1e-6)


def test_tf_trace_without_metadata_or_damaged(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    folder = tmp_path / "framework" / "tensorflow" / "detailed_profiling" / "2024010100" / "000000005"
    profile = folder / "plugins" / "profile" / "2024_01_01_00_00_00"
    profile.mkdir(parents=True)
    (profile / "host.trace.json.gz").write_bytes(b"\x1f\x8b not really gzip")
    with caplog.at_level(logging.WARNING):
        data = load_profiler_data(tmp_path)
    assert data.source == "sagemaker" and not data.framework
    assert any("host.trace.json.gz" in p for p in data.problems)
    assert any("damaged profiler data" in r.getMessage() for r in caplog.records)


# --- one sampling tick, one row ------------------------------------------------------------------------------
def _cpu_bound_job(root: Path, t0: float, ticks: int = 200, gpu_offset_s: float = 0.003) -> Path:
    """A SageMaker folder of a job that is CPU-bound throughout; GPU samples come ``gpu_offset_s`` late."""
    out = root / "profiler-output"
    lines: dict[int, list[str]] = {}
    for i in range(ticks):
        t = t0 + i * 0.5
        recs = [("cpu", f"cpu{c}", "CPUUtilization", 96.0, t) for c in range(4)]
        recs += [("gpu", "gpu0", "GPUUtilization", 3.0, t + gpu_offset_s)]
        recs += [("gpu", "gpu0", "GPUMemoryUtilization", 20.0, t + gpu_offset_s)]
        for kind, name, dim, value, ts in recs:
            rec = {"Type": kind, "Name": name, "Dimension": dim, "Value": value, "NodeId": "algo-1", "Timestamp": ts}
            lines.setdefault(int(t // 60 * 60), []).append(json.dumps(rec))
    folder = out / "system" / "incremental" / "2024010100"
    folder.mkdir(parents=True)
    for minute, text in lines.items():
        (folder / f"{minute}.algo-1.json").write_text("\n".join(text) + "\n")
    return out


@pytest.mark.parametrize("gpu_offset_s", [0.001, 0.004, -0.002])
def test_gpu_samples_a_few_ms_off_join_their_cpu_tick(tmp_path: Path, gpu_offset_s: float) -> None:
    out = _cpu_bound_job(tmp_path, 1_700_000_000.0, gpu_offset_s=gpu_offset_s)
    data = load_profiler_data(out)
    arrays = data.system["algo-1"]
    assert len(arrays) == 200 and arrays.interval_ms == 500  # not 400 half-empty rows
    assert arrays.gpus == [0] and arrays.cpu_cores == [0, 1, 2, 3]
    verdict = CPUBottleneck(patience=100).evaluate(data)
    assert verdict.status is Status.ISSUES_FOUND and verdict.details["bottlenecks"] == 200
    exact = SageMakerSystemStore(out, interval_ms=1)  # joined by exact timestamp, as before
    exact.refresh()
    joined = ProfilerData(out, "sagemaker", system=exact.nodes(), job_ended=True)
    assert len(joined.system["algo-1"]) == 400
    assert CPUBottleneck(patience=100).evaluate(joined).details["bottlenecks"] == 0


def test_samples_join_the_nearest_tick_only_within_half_an_interval(tmp_path: Path) -> None:
    out = _cpu_bound_job(tmp_path, 1_700_000_000.0, ticks=20, gpu_offset_s=0.27)
    arrays = load_profiler_data(out).system["algo-1"]
    gpu, cpu = arrays.column("gpu0_utilization_percent"), arrays.column("cpu0_utilization_percent")
    assert gpu is not None and cpu is not None
    # 270 ms late is 230 ms before the next tick: each GPU sample joins the next tick; the last one has none
    assert len(arrays) == 21 and arrays.interval_ms == 500
    assert bool(np.isnan(gpu[0])) and not np.isnan(gpu[1:20]).any()
    assert bool(np.isnan(cpu[20])) and float(gpu[20]) == 3.0


# --- final verdicts without an end marker --------------------------------------------------------------------
def test_old_sagemaker_folder_gets_final_verdicts(res: Path) -> None:
    root = res / "test_traces"
    assert run_over(root) and not run_over(root, stale_after_s=1e12)
    verdicts = evaluate(root, [OverallSystemUsage()], write=False, actions=False)
    assert verdicts[0].status is Status.NO_ISSUES_FOUND
    verdicts = evaluate(root, [OverallSystemUsage()], write=False, actions=False, stale_after_s=1e12)
    assert verdicts[0].status is Status.IN_PROGRESS
    verdicts = evaluate(root, [OverallSystemUsage()], write=False, actions=False, stale_after_s=1e12, final=True)
    assert verdicts[0].status is Status.NO_ISSUES_FOUND


def test_rules_cli_final_and_stale_after(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainspect.cli import main

    out = _cpu_bound_job(tmp_path, time.time() - 200.0)  # 100 s of samples, the last ones 100 s ago

    def status(*extra: str) -> str:
        code = main(["rules", str(out), "--rule", "OverallSystemUsage", "--json", *extra])
        assert code == 0
        return str(json.loads(capsys.readouterr().out)[0]["status"])

    assert status() == "InProgress"
    assert status("--final") == "NoIssuesFound"
    assert status("--stale-after", "30") == "NoIssuesFound"
    assert main(["rules", str(out), "--stale-after", "0"]) == 2
    assert "--stale-after 0" in capsys.readouterr().err
    main(["rules", str(out), "--json", "--final"])  # without --rule: the profiler rules of a SageMaker folder run
    verdicts = {v["rule"]: v["status"] for v in json.loads(capsys.readouterr().out)}
    assert verdicts["CPUBottleneck"] == "NoData"  # 200 samples: fewer than patience=1000
    assert main(["rules", str(out), "--rule", "CPUBottleneck", "--param", "CPUBottleneck.patience=100"]) == 1
