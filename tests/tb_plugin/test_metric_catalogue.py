"""The metric catalogue (issue 18): a metric declared only there reaches the report, the TensorBoard plugin's JSON
and MLflow; a metric it does not declare is shown under its own key, never dropped, and stays escaped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import tb_synth as synth
from _support.tensorboard import get, make_client

from trainspect.mlflow_plugin.keys import system_key, system_metrics
from trainspect.profiler.events import key_for, smdebug_names
from trainspect.profiler.metrics import CATALOGUE, Group, Metric
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.report import render_report
from trainspect.store.layout import RunLayout

WIDGETS = Metric(
    "widget{i}_spin_count",
    "count",
    label="Widget {i} spins",
    short="widget {i}",
    group="widgets",
    smdebug=("widget", "widget{i}", "WidgetSpins"),
    mlflow="widget_{i}_spins",
)
UNKNOWN = "mystery_gauge_watts"
HOSTILE = "<img src=x onerror=window.__xss=1>_percent"


@pytest.fixture()
def declared() -> Iterator[Metric]:
    """The test metric, declared only in the catalogue for the test's duration."""
    CATALOGUE.declare_group(Group("widgets", "Widgets spinning", "count"))
    CATALOGUE.declare(WIDGETS)
    yield WIDGETS
    CATALOGUE.remove(WIDGETS.key)
    CATALOGUE.remove_group("widgets")


def write_run(run: Path, seconds: int = 20) -> None:
    """A run whose system samples hold the host CPU, two widgets, an undeclared metric and a hostile key."""
    synth.write_manifest(run)
    writer = SystemChunkWriter(RunLayout(run).system_dir("node-a"), "node-a", 100)
    for i in range(seconds * 10):
        writer.append(
            synth.T0 + i / 10,
            {
                "cpu_utilization_percent": 40.0,
                "widget0_spin_count": 12.0,
                "widget1_spin_count": float(3 + i % 2),
                UNKNOWN: 250.0,
                HOSTILE: 5.0,
            },
        )
        if i % 10 == 9:
            writer.flush()
    writer.close()


def test_a_metric_declared_only_in_the_catalogue_reaches_every_consumer(tmp_path: Path, declared: Metric) -> None:
    write_run(tmp_path / "r")
    html = render_report(tmp_path / "r")
    assert "Widget 0 spins" in html and "Widget 1 spins" in html  # the report's table, labelled
    c, _plugin = make_client(tmp_path)
    rows = {r["metric"]: r for r in get(c, "/profiler", run="r")["utilization"]}
    assert rows["widget0_spin_count"]["label"] == "Widget 0 spins" and rows["widget0_spin_count"]["unit"] == "count"
    assert rows["widget0_spin_count"]["p50"] == 12.0
    card = {r["metric"]: r for r in get(c, "/utilization", run="r", node="node-a")["rows"]}
    assert card["widget1_spin_count"]["label"] == "Widget 1 spins"
    groups = {g["id"]: g for g in get(c, "/timeseries", run="r", points=10)["groups"]}
    assert groups["widgets"]["title"] == "Widgets spinning" and groups["widgets"]["unit"] == ""
    assert [(s["key"], s["label"]) for s in groups["widgets"]["series"]] == [
        ("widget0_spin_count", "widget 0"),
        ("widget1_spin_count", "widget 1"),
    ]
    assert list(groups) == ["cpu", "widgets"]  # the catalogue's group order
    assert system_key("widget1_spin_count", "algo-2") == ("system/algo-2/widget_1_spins", 1.0)
    assert system_metrics({"widget0_spin_count": 12.0}) == {"system/widget_0_spins": 12.0}
    assert smdebug_names("widget3_spin_count") == ("widget", "widget3", "WidgetSpins")
    assert key_for("widget", "widget3", "WidgetSpins") == "widget3_spin_count"


def test_the_count_is_formatted_as_a_count_in_the_report(tmp_path: Path, declared: Metric) -> None:
    write_run(tmp_path / "r")
    html = render_report(tmp_path / "r")
    row = html[html.index("Widget 0 spins") :].split("</tr>")[0]
    assert ">12<" in row and "%" not in row


def test_undeclared_metrics_are_shown_under_their_key_and_escaped(tmp_path: Path) -> None:
    assert not CATALOGUE.known(UNKNOWN) and CATALOGUE.describe(UNKNOWN).unit == "W"
    write_run(tmp_path / "r")
    html = render_report(tmp_path / "r")
    row = html[html.index(UNKNOWN) :].split("</tr>")[0]
    assert "250 W" in row  # unit read from the key's suffix
    assert "<img src=x" not in html and "&lt;img src=x onerror=window.__xss=1&gt;_percent" in html
    assert "widget0_spin_count" in html  # not declared in this test: shown under its key
    c, _plugin = make_client(tmp_path)
    rows = {r["metric"]: r for r in get(c, "/profiler", run="r")["utilization"]}
    assert rows[UNKNOWN]["label"] == UNKNOWN and rows[UNKNOWN]["unit"] == "W" and rows[UNKNOWN]["max"] == 250.0
    assert rows[HOSTILE]["label"] == HOSTILE and rows["widget0_spin_count"]["unit"] == "count"  # suffix _count
    assert system_key(UNKNOWN) == ("system/mystery_gauge_watts", 1.0)
    assert system_key(HOSTILE)[0] == "system/_img src_x onerror_window.__xss_1__percent"
    assert smdebug_names(UNKNOWN) == ("other", UNKNOWN, UNKNOWN)


def test_existing_names_are_unchanged() -> None:
    """MLflow keys and smdebug names of the built-in metrics, as before the catalogue (docs/mlflow.md, profiler.md)."""
    assert [
        system_key(k)[0]
        for k in (
            "cpu_utilization_percent",
            "cpu_memory_used_percent",
            "cpu_iowait_percent",
            "cpu7_utilization_percent",
            "gpu2_utilization_percent",
            "gpu2_memory_used_percent",
            "gpu2_power_watts",
            "gpu2_temperature_celsius",
            "disk_read_bytes_per_second",
        )
    ] == [
        "system/cpu_utilization_percentage",
        "system/system_memory_usage_percentage",
        "system/cpu_iowait_percentage",
        "system/cpu_7_utilization_percentage",
        "system/gpu_2_utilization_percentage",
        "system/gpu_2_memory_usage_percentage",
        "system/gpu_2_power_usage_watts",
        "system/gpu_2_temperature_celsius",
        "system/disk_read_bytes_per_second",
    ]
    assert system_key("cpu_memory_used_bytes") == ("system/system_memory_usage_megabytes", 1e-6)
    assert system_key("gpu0_memory_used_bytes") == ("system/gpu_0_memory_usage_megabytes", 1e-6)
    for key in (
        "cpu3_utilization_percent",
        "cpu_utilization_percent",
        "cpu_iowait_percent",
        "cpu_memory_used_bytes",
        "network_received_bytes_per_second",
        "gpu1_temperature_celsius",
        "gpu1_memory_used_percent",
    ):
        assert key_for(*smdebug_names(key)) == key
    assert smdebug_names("cpu_iowait_percent") == ("cpu", "total", "I/OWaitPercentage")
    assert key_for("cpu", "anything", "I/OWaitPercentage") == "cpu_iowait_percent"


def test_declarations_are_checked() -> None:
    with pytest.raises(ValueError, match="already declared"):
        CATALOGUE.declare(Metric("cpu_utilization_percent", "percent"))
    with pytest.raises(ValueError, match="unit='furlongs'; allowed: percent"):
        CATALOGUE.declare(Metric("x_furlongs", "furlongs"))
    with pytest.raises(ValueError, match="group='nope'"):
        CATALOGUE.declare(Metric("x_percent", "percent", group="nope"))
    with pytest.raises(ValueError, match="unit 'bytes' differs from its group's"):
        CATALOGUE.declare(Metric("gpu{i}_x_bytes", "bytes", group="gpu_memory"))
    with pytest.raises(ValueError, match="aggregate='median'"):
        CATALOGUE.declare(Metric("x_percent", "percent", aggregate="median"))
    with pytest.raises(ValueError, match="used by"):
        CATALOGUE.remove_group("cpu")
    assert not CATALOGUE.known("x_percent")


def test_every_builtin_key_a_sampler_writes_is_declared() -> None:
    """The keys the samplers document (docs/profiler.md's table) are all in the catalogue, none generic."""
    keys = [
        "cpu0_utilization_percent",
        "cpu_utilization_percent",
        "cpu_iowait_percent",
        "cpu_memory_used_percent",
        "cpu_memory_used_bytes",
        "disk_read_bytes_per_second",
        "disk_write_bytes_per_second",
        "network_sent_bytes_per_second",
        "network_received_bytes_per_second",
        "gpu0_utilization_percent",
        "gpu0_memory_used_percent",
        "gpu0_memory_used_bytes",
        "gpu0_power_watts",
        "gpu0_temperature_celsius",
        "process_cpu_utilization_percent",
        "process_memory_used_bytes",
        "process_count",
    ]
    assert [k for k in keys if not CATALOGUE.known(k)] == []
    assert np.unique([CATALOGUE.describe(k).unit for k in keys]).tolist() == [
        "W",
        "bytes",
        "bytes/s",
        "count",
        "percent",
        "°C",
    ]


def test_a_peak_metric_is_logged_to_mlflow_as_its_maximum(tmp_path: Path) -> None:
    """A per-device peak (as CUDA's peak memory will be) declared with ``aggregate="max"``: one declaration."""
    from trainspect.mlflow_plugin.sync import system_history
    from trainspect.mlflow_plugin.system_tail import SystemTail
    from trainspect.profiler import load_profiler_data

    peak = Metric(
        "gpu{i}_test_peak_bytes",
        "bytes",
        "GPU {i} test peak",
        aggregate="max",
        mlflow="gpu_{i}_test_peak_megabytes",
        mlflow_factor=1e-6,
    )
    CATALOGUE.declare(peak)
    try:
        run = tmp_path / "r"
        synth.write_manifest(run)
        writer = SystemChunkWriter(RunLayout(run).system_dir("node-a"), "node-a", 100)
        for i in range(30):  # 3 s at 100 ms: the peak rises within each second, the load does not
            row = {"gpu0_test_peak_bytes": 1e6 * (i % 10), "cpu_utilization_percent": 10.0 * (i % 10)}
            writer.append(synth.T0 + i / 10, row)
        writer.close()
        ((_last, polled),) = SystemTail(run).poll().values()
        assert polled == {"gpu0_test_peak_bytes": 9e6, "cpu_utilization_percent": pytest.approx(45.0)}
        history = system_history(load_profiler_data(run).system, interval_s=1.0)
        by_key: dict[str, list[float]] = {}
        for m in history:
            by_key.setdefault(m.key, []).append(m.value)
        assert by_key["system/gpu_0_test_peak_megabytes"] == [9.0, 9.0, 9.0]  # the peak of each second, in MB
        assert by_key["system/cpu_utilization_percentage"] == pytest.approx([45.0, 45.0, 45.0])  # the mean
        assert "GPU 0 test peak" in render_report(run)
    finally:
        CATALOGUE.remove(peak.key)
