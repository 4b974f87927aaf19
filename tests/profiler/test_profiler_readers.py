"""Readers: units, events, DataFrames, SageMaker folders, analyses on loaded data."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import numpy as np
import pytest

from trainspect.profiler import (
    FrameworkMetricsReader,
    SystemMetricsReader,
    heatmap,
    job_statistics,
    load_profiler_data,
    phase_ratios,
    step_statistics,
    utilization_statistics,
)
from trainspect.profiler.detailed import write_table
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.rules.profiler import LowGPUUtilization, StepOutlier
from trainspect.rules.verdict import Status

T = 1591160640.0


def _sagemaker(root: Path, bad_line: bool = True) -> Path:
    out = root / "profiler-output"
    sys_dir = out / "system" / "incremental" / "2020060305"
    sys_dir.mkdir(parents=True)
    lines = []
    metrics = [
        ("cpu0", "CPUUtilization", 50.0),
        ("cpu1", "CPUUtilization", 70.0),
        ("gpu0", "GPUUtilization", 5.0),
        ("gpu0", "GPUMemoryUtilization", 30.0),
        ("cpu0", "I/OWaitPercentage", 2.0),
        ("MemoryUsedPercent", "Memory", 40.0),
    ]
    for i in range(40):
        for name, dim, value in metrics:
            kind = name[:3] if name[:3] in ("cpu", "gpu") else "cpu"
            record = {"Type": kind, "Name": name, "Dimension": dim, "Value": value, "NodeId": "algo-1"}
            lines.append(json.dumps({**record, "Timestamp": T + i * 0.5}))
    if bad_line:
        lines.insert(10, '{"Type": "cpu", "Name": "cpu0", "Dime')
    (sys_dir / f"{int(T)}.algo-1.json").write_text("\n".join(lines) + "\n")
    fw_dir = out / "framework" / "pevents" / "2020060305"
    fw_dir.mkdir(parents=True)
    base = int(T * 1e6)
    events: list[dict[str, object]] = [
        {"name": "process_name", "ph": "M", "pid": 0, "args": {"start_time_since_epoch_in_micros": base}},
        {"name": "process_name", "ph": "M", "pid": 1, "args": {"name": "Step:ModeKeys.TRAIN"}},
        {"name": "process_name", "ph": "M", "pid": 2, "args": {"name": "DataLoaderIter"}},
    ]
    for i in range(30):
        events.append(
            {
                "name": "Step:ModeKeys.TRAIN",
                "ph": "X",
                "pid": 1,
                "tid": 1,
                "ts": i * 600_000,
                "dur": 500_000,
                "args": {"step_num": str(i)},
            }
        )
        events.append(
            {
                "name": "DataLoaderIter",
                "ph": "X",
                "pid": 2,
                "tid": 1,
                "ts": i * 600_000 - 50_000,
                "dur": 40_000,
                "args": {"pid": 123},
            }
        )
    (fw_dir / f"{base + 18_000_000}_algo-1_pythontimeline.json").write_text(json.dumps(events))
    return out


def test_sagemaker_folder_auto_detected(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    root = _sagemaker(tmp_path)
    with caplog.at_level(logging.WARNING):
        reader = SystemMetricsReader(tmp_path)  # the parent of profiler-output works too
        events = reader.get_events(T, T + 100)
    assert reader.source == "sagemaker"
    assert len([r for r in caplog.records if "damaged" in r.getMessage()]) == 1
    assert len(events) == 40 * 6  # the inserted corrupt line is skipped, every good one kept
    gpu = [e for e in events if e.dimension == "GPUUtilization"]
    assert gpu[0].type == "gpu" and gpu[0].name == "gpu0" and gpu[0].node_id == "algo-1" and gpu[0].value == 5.0
    assert reader.get_timestamp_of_first_available_file(unit="us") == pytest.approx(T * 1e6, abs=1)
    arrays = reader.read_arrays()["algo-1"]
    assert arrays.gpus == [0] and arrays.cpu_cores == [0, 1]
    assert np.nanmean(arrays.column("cpu_iowait_percent")) == pytest.approx(2.0)  # type: ignore[arg-type]
    fw = FrameworkMetricsReader(root)
    tabs = fw.read_tables()
    assert tabs["algo-1"].step_count == 30
    assert tabs["algo-1"].steps["start"][1] == pytest.approx(T + 0.6, abs=1e-6)
    steps = [e for e in fw.get_events(T, T + 100) if e.event_name.startswith("Step")]
    assert len(steps) == 30 and steps[3].event_args["step_num"] == "3"
    data = load_profiler_data(root)
    assert data.source == "sagemaker"
    v = LowGPUUtilization(patience=10, window=10).evaluate(data)
    assert v.status is Status.ISSUES_FOUND and "5.0%" in v.message


def test_units_dataframes_and_analyses_on_a_written_run(tmp_path: Path) -> None:
    from trainspect.hooks.framework_metrics import FrameworkRecorder
    from trainspect.modes import ModeKeys

    writer = SystemChunkWriter(tmp_path / "profiler" / "system" / "n0", "n0", 500)
    t0 = 1.7e9
    for i in range(20):
        writer.append(
            t0 + i * 0.5,
            {"cpu0_utilization_percent": float(i), "cpu1_utilization_percent": 50.0, "gpu0_utilization_percent": 80.0},
        )
    writer.close()
    rec = FrameworkRecorder(tmp_path, "worker_0", node="n0")
    rec.start()
    for i in range(5):
        rec.on_step_start(ModeKeys.TRAIN, i, i)
        rec.record_span("forward", t0, t0 + 0.1, i)
        rec.on_step_end(ModeKeys.TRAIN, i, i)
    rec.on_step_start(ModeKeys.EVAL, 0, 5)
    rec.on_step_end(ModeKeys.EVAL, 0, 5)
    rec.close()
    sys_reader = SystemMetricsReader(tmp_path)
    ev_s = sys_reader.get_events(t0, t0 + 1)
    ev_ms = sys_reader.get_events(t0 * 1e3, (t0 + 1) * 1e3, unit="ms")
    assert len(ev_s) == len(ev_ms) == 3 * 3 and ev_ms[0].timestamp == pytest.approx(t0 * 1e3, abs=1e-3)
    frame = sys_reader.to_dataframe()
    assert len(frame) == 60 and set(frame["dimension"]) >= {"CPUUtilization", "GPUUtilization"}
    fw = FrameworkMetricsReader(tmp_path)
    names = {e.event_name for e in fw.get_events(0, 1e16, unit="us")}
    assert {"Step:ModeKeys.TRAIN", "Step:ModeKeys.EVAL", "Forward", "Initialization", "TrainingLoop"} <= names
    forward = [e for e in fw.get_events(t0, t0 + 1) if e.event_name == "Forward"]  # seconds: the spans as recorded
    assert len(forward) == 5 and forward[0].start_time == pytest.approx(t0, abs=1e-4)
    assert forward[0].end_time == pytest.approx(t0 + 0.1, abs=1e-4)
    data = load_profiler_data(tmp_path)
    stats = step_statistics(data)
    assert set(stats["mode"]) == {"TRAIN", "EVAL"} and int(stats.loc[stats["mode"] == "TRAIN", "count"].iloc[0]) == 5
    job = job_statistics(data)
    assert job["initialization_s"] > 0 and job["finalization_s"] is not None
    util = utilization_statistics(data)
    row = util[(util["metric"] == "cpu0_utilization_percent")].iloc[0]
    assert row["max"] == pytest.approx(19.0) and row["min"] == 0.0 and row["p50"] == pytest.approx(9.5)
    assert row["unit"] == "percent"
    ratios = phase_ratios(data)
    assert set(ratios["modes"]) == {"train", "eval", "other"}
    hm = heatmap(data, max_columns=4)
    assert hm["rows"] == ["cpu0", "cpu1", "gpu0"] and len(hm["times"]) == 4
    assert hm["values"][1] == [50.0] * 4 and hm["values"][0][0] == pytest.approx(2.0)  # mean of 0..4
    assert all(v is None or 0 <= v <= 100 for row_ in hm["values"] for v in row_)
    assert StepOutlier().evaluate(data).status is Status.NO_DATA  # 5 steps: too few
    detailed = tmp_path / "profiler" / "detailed" / "worker_0"  # a profiled window's operator table
    write_table(
        detailed,
        "operators",
        "worker_0",
        2,
        4,
        [{"name": "aten::mm", "calls": 3, "self_time_us": 9.0, "total_time_us": 12.0, "device": "cpu"}],
    )
    ops = fw.dataframe("operators")
    assert ops["name"].tolist() == ["aten::mm"] and ops["calls"].tolist() == [3]
    assert fw.dataframe("python").empty  # no Python table was written


def test_rules_and_report_commands_on_a_sagemaker_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from trainspect.cli import main

    root = _sagemaker(tmp_path, bad_line=False)
    (root / "training_job_end.ts").write_text("1\n")  # a downloaded, finished job
    code = main(["rules", str(root), "--rule", "CPUBottleneck", "--rule", "OverallSystemUsage", "--json"])
    assert code == 0  # no rule found an issue
    verdicts = {v["rule"]: v for v in json.loads(capsys.readouterr().out)}
    assert verdicts["OverallSystemUsage"]["status"] == "NoIssuesFound"
    assert verdicts["CPUBottleneck"]["status"] == "NoData"  # 40 samples, patience 1000
    assert "patience=1000" in verdicts["CPUBottleneck"]["message"]
    report = tmp_path / "report.html"
    assert main(["report", str(root), "-o", str(report)]) == 0
    html = report.read_text()
    assert "algo-1" in html and "CPU" in html
