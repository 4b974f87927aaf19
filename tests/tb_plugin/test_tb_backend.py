"""The plugin's HTTP routes through werkzeug's test client (TensorBoard's WSGI app, Python data provider)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tb_synth as synth
from _support.tensorboard import PREFIX, XSS, get, make_client
from werkzeug import test as wtest

from trainspect.profiler import heatmap, load_profiler_data
from trainspect.rules.verdict import Status, Verdict, write_verdicts
from trainspect.store.layout import RunLayout
from trainspect.tb_plugin import metadata
from trainspect.tb_plugin.runs import RunIndex


def test_plugins_listing_enables_the_iframe_dashboard(client: wtest.Client) -> None:
    listing = json.loads(client.get("/data/plugins_listing").data)
    entry = listing["trainspect"]
    assert entry["enabled"] is True
    assert entry["loading_mechanism"] == {"type": "IFRAME", "module_path": "/data/plugin/trainspect/index.js"}


def test_runs_lists_trainspect_runs_and_tensorboard_runs(client: wtest.Client) -> None:
    runs = {r["name"]: r for r in get(client, "/runs")["runs"]}
    assert {"torch_run", "synth", XSS, "halfwritten", "corrupt"} <= set(runs)
    assert runs["torch_run"]["profiler"] and runs["torch_run"]["verdicts"] and runs["torch_run"]["ended"]
    assert runs["halfwritten"] == {
        "name": "halfwritten",
        "has_data": True,
        "manifest": True,
        "profiler": False,
        "verdicts": False,
        "ended": False,
        "profiler_at": None,
    }
    assert isinstance(runs["torch_run"]["profiler_at"], float)  # the Profiler tab opens on the newest such run
    assert runs["tb_only"]["has_data"] is False  # listed by TensorBoard's data provider, no trainspect data


def test_is_active_follows_the_logdir(tmp_path: Path) -> None:
    index = RunIndex(str(tmp_path), ttl_s=0.0)
    assert not index.is_active()
    synth.write_manifest(tmp_path / "a" / "b")
    assert index.is_active()
    assert list(index.runs()) == ["a/b"]
    assert RunIndex(str(tmp_path / "missing")).is_active() is False
    assert RunIndex("").is_active() is False


def test_profiler_overview_of_a_real_torch_run(client: wtest.Client) -> None:
    data = get(client, "/profiler", run="torch_run")
    assert data["status"] == "ended" and data["run"] == "torch_run"
    assert len(data["nodes"]) == 1 and data["nodes"][0]["cores"] >= 1 and data["nodes"][0]["interval_ms"] == 100
    assert data["workers"] == [{"name": "worker_0", "node": data["nodes"][0]["name"], "steps": 60}]
    assert sum(c for _a, _b, c in data["histogram"][0]["bins"]) == 60
    assert data["steps"][0]["count"] == 60 and data["steps"][0]["mode"] == "TRAIN"
    assert set(data["phases"]["spans"]) >= {"forward", "backward", "optimizer"}
    assert data["operators"] and {"name", "calls", "self_time_us", "percent"} <= set(data["operators"][0])
    assert data["profiler_rules"] > 0 and data["problems"] == []


def test_recommendations_are_the_triggered_profiler_rules(client: wtest.Client) -> None:
    recs = get(client, "/profiler", run="synth")["recommendations"]
    assert recs == [
        {
            "rule": "LowGPUUtilization",
            "message": "p95 GPU utilisation 12% below threshold 70%",
            "recommendation": "Increase the batch size.",
            "triggers": 5,
            "last_trigger_time": recs[0]["last_trigger_time"],
        }
    ]


def test_heatmap_matches_the_reference_analysis(client: wtest.Client, logdir: Path) -> None:
    hm = get(client, "/heatmap", run="synth", columns=120)
    assert hm["rows"] == [f"cpu{i}" for i in range(64)] + [f"gpu{g}" for g in range(8)]
    assert hm["columns"] == 120 and all(len(row) == 120 for row in hm["values"])
    ref = heatmap(load_profiler_data(logdir / "synth"), hm["start"], hm["end"], 120)
    ours = np.array(hm["values"], dtype=float)
    np.testing.assert_allclose(ours, np.array(ref["values"], dtype=float), atol=0.51)  # ours: integer percent
    assert hm["step_boundaries"] and all(hm["start"] <= t <= hm["end"] for t in hm["step_boundaries"])


def test_heatmap_zoom_and_downsampling(client: wtest.Client) -> None:
    full = get(client, "/heatmap", run="synth", columns=1000)
    assert full["columns"] == 1000 and full["samples"] == 3000
    start, end = full["full_start"] + 100, full["full_start"] + 110
    zoom = get(client, "/heatmap", run="synth", columns=1000, start=start, end=end)
    assert (zoom["start"], zoom["end"]) == (start, end)
    assert zoom["columns"] == zoom["samples"] == 101  # fewer samples than columns: one bucket per sample
    assert all(start <= t <= end for t in zoom["step_boundaries"])
    response = client.get(PREFIX + "/heatmap", query_string={"run": "synth", "columns": "1000"})
    assert len(response.data) < 1_000_000


def test_timeseries_groups(client: wtest.Client) -> None:
    ts = get(client, "/timeseries", run="synth", points=100)
    groups = {g["id"]: g for g in ts["groups"]}
    assert set(groups) == {"cpu", "memory", "gpu_memory", "io", "network"}
    assert [s["key"] for s in groups["io"]["series"]] == ["disk_read_bytes_per_second", "disk_write_bytes_per_second"]
    assert len(groups["gpu_memory"]["series"]) == 8
    assert len(ts["times"]) == 100 and all(len(s["values"]) == 100 for g in ts["groups"] for s in g["series"])


def test_rules_table_of_every_run(client: wtest.Client) -> None:
    data = get(client, "/rules")
    by_run: dict[str, list[dict]] = {}
    for row in data["rows"]:
        by_run.setdefault(row["run"], []).append(row)
    assert {r["rule"] for r in by_run["synth"]} == {"LowGPUUtilization", "VanishingGradient"}
    assert {r["rule"] for r in by_run[XSS]} == {"LowGPUUtilization", "VanishingGradient"}
    torch_rules = {r["rule"]: r for r in by_run["torch_run"]}
    assert {"VanishingGradient", "ExplodingTensor", "LossNotDecreasing", "LowGPUUtilization"} <= set(torch_rules)
    vg = next(r for r in by_run["synth"] if r["rule"] == "VanishingGradient")
    assert (vg["status"], vg["triggers"], vg["datapoints"], vg["last_trigger_step"]) == ("IssuesFound", 2, 12, 9)
    assert data["problems"] == [{"run": "corrupt", "error": "rules/verdicts.json could not be read (not valid JSON)"}]


def test_rule_detail_with_the_watched_series(client: wtest.Client) -> None:
    d = get(client, "/rule", run="synth", rule="VanishingGradient")
    assert d["parameters"] == {"threshold": 1e-7} and d["recommendation"] == "Use ReLU or batch norm."
    (series,) = d["series"]
    assert series["x"] == [float(s) for s in range(12)] and series["trigger_x"] == [7.0, 9.0]
    assert series["trigger_y"] == [pytest.approx(1e-3 / 8**3), pytest.approx(1e-3 / 10**3)]
    assert series["threshold"] == 1e-6


def test_long_series_are_thinned_but_keep_triggers(tmp_path: Path) -> None:
    from trainspect.rules.verdict import Series

    x = tuple(float(i) for i in range(50_000))
    v = Verdict(
        "StepOutlier",
        Status.ISSUES_FOUND,
        kind="profiler",
        triggers=1,
        series=(Series("step time", x, x, "step", (12_345.0,)),),
    )
    write_verdicts(RunLayout(tmp_path / "r").verdicts, [v])
    c, _plugin = make_client(tmp_path)
    (s,) = get(c, "/rule", run="r", rule="StepOutlier")["series"]
    assert len(s["x"]) <= 2000 and s["points"] == 50_000 and s["trigger_y"] == [12_345.0]


@pytest.mark.parametrize(
    ("route", "params", "status"),
    [
        ("/profiler", {}, 400),
        ("/profiler", {"run": "nope"}, 404),
        ("/heatmap", {"run": "synth", "node": "other-node"}, 404),
        ("/heatmap", {"run": "synth", "start": "abc"}, 400),
        ("/heatmap", {"run": "synth", "start": "nan"}, 400),
        ("/heatmap", {"run": "synth", "start": "2000000000", "end": "1"}, 400),
        ("/heatmap", {"run": "synth", "columns": "0"}, 400),
        ("/heatmap", {"run": "synth", "columns": "100000"}, 400),
        ("/timeseries", {"run": "synth", "points": "x"}, 400),
        ("/heatmap", {"run": "halfwritten"}, 404),
        ("/rule", {"run": "synth"}, 400),
        ("/rule", {"run": "synth", "rule": "NoSuchRule"}, 404),
        ("/rule", {"run": "corrupt", "rule": "X"}, 404),
    ],
)
def test_bad_requests_get_json_errors(client: wtest.Client, route: str, params: dict, status: int) -> None:
    assert get(client, route, status, **params)["error"]


@pytest.mark.parametrize(
    "run",
    [
        "../",
        "..",
        "../synth",
        "synth/..",
        "synth/../synth",
        "%2e%2e%2f",
        "..%2fsynth",
        "/etc",
        "/",
        "//etc/passwd",
        "synth/profiler",
        "synth%2fprofiler",
        "synth\\..\\..",
        "\x00",
        "tb_only/../../",
    ],
)
def test_run_names_cannot_escape_the_logdir(client: wtest.Client, run: str) -> None:
    for route in ("/profiler", "/heatmap", "/timeseries", "/rule"):
        assert get(client, route, 404, run=run, rule="VanishingGradient")["error"].startswith("Not found")


@pytest.mark.parametrize(
    "path",
    [
        "/static/../plugin.py",
        "/static/..%2fplugin.py",
        "/static/%2e%2e%2fplugin.py",
        "/static/%2e%2e/%2e%2e/cli.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/static/",
        "/static/nope.js",
        "/static/..%5cplugin.py",
    ],
)
def test_static_files_cannot_escape(client: wtest.Client, path: str) -> None:
    response = client.get(PREFIX + path)
    assert response.status_code == 404
    assert b"import" not in response.data and b"root:" not in response.data


def test_static_files_and_the_vendored_echarts(client: wtest.Client) -> None:
    index = client.get(PREFIX + "/index.js")
    assert index.status_code == 200 and index.mimetype == "text/javascript"
    assert b"export async function render" in index.data
    for name in ("util.js", "profiler.js", "rules.js", "heatmap.js", "style.css"):
        r = client.get(f"{PREFIX}/static/{name}")
        assert r.status_code == 200 and r.headers["X-Content-Type-Options"] == "nosniff"
    echarts = client.get(PREFIX + "/vendor/echarts.min.js")
    assert echarts.status_code == 200 and len(echarts.data) > 500_000 and b"echarts" in echarts.data[:5000]
    static = Path(__file__).parents[2] / "trainspect" / "tb_plugin" / "static"
    assert not any("http://" in p.read_text() or "https://" in p.read_text() for p in static.iterdir())  # no CDN


def test_names_are_only_inserted_as_text() -> None:
    static = Path(__file__).parents[2] / "trainspect" / "tb_plugin" / "static"
    for path in static.glob("*.js"):
        text = path.read_text()
        assert "innerHTML" not in text and "insertAdjacentHTML" not in text and "document.write" not in text, path


def test_corrupt_chunk_is_skipped_and_reported(client: wtest.Client) -> None:
    data = get(client, "/profiler", run="corrupt")
    assert data["status"] == "running" and data["problems"]
    assert "skipped damaged profiler data" in data["problems"][0] and "<run>" in data["problems"][0]
    hm = get(client, "/heatmap", run="corrupt", columns=50)
    assert hm["rows"] == ["cpu0", "cpu1", "cpu2", "cpu3", "gpu0"] and hm["samples"] > 0


def test_run_without_profiler_data(client: wtest.Client) -> None:
    data = get(client, "/profiler", run="halfwritten")
    assert data["status"] == "no_profiler_data" and data["nodes"] == [] and data["histogram"] == []
    assert get(client, "/heatmap", 404, run="halfwritten")["error"] == "Not found: this run has no system metrics"


def test_views_follow_a_running_job(tmp_path: Path) -> None:
    run = tmp_path / "live"
    synth.write_manifest(run)
    synth.write_system(run, 10, cores=2, gpus=0)
    c, plugin = make_client(tmp_path)
    first = get(c, "/heatmap", run="live")
    assert get(c, "/profiler", run="live")["status"] == "running"
    synth.write_system(run, 10, cores=2, gpus=0, t0=synth.T0 + 10)  # the monitor's next file
    second = get(c, "/heatmap", run="live")
    assert second["samples"] == 2 * first["samples"] and second["full_end"] > first["full_end"] + 9
    assert get(c, "/rules")["rows"] == []
    write_verdicts(RunLayout(run).verdicts, [Verdict("CPUBottleneck", Status.IN_PROGRESS, kind="profiler")])
    assert [r["status"] for r in get(c, "/rules")["rows"]] == ["InProgress"]
    write_verdicts(
        RunLayout(run).verdicts, [Verdict("CPUBottleneck", Status.ISSUES_FOUND, kind="profiler", triggers=3)]
    )
    assert [(r["status"], r["triggers"]) for r in get(c, "/rules")["rows"]] == [("IssuesFound", 3)]
    RunLayout(run).end_marker.write_text(str(time.time()))
    assert get(c, "/profiler", run="live")["status"] == "ended"


def test_new_runs_appear_after_the_scan_interval(tmp_path: Path) -> None:
    c, plugin = make_client(tmp_path)
    assert get(c, "/runs")["runs"] == [] and plugin.is_active() is False
    shutil.copytree(Path(__file__).parent, tmp_path / "not_a_run")  # a directory without trainspect data
    synth.write_manifest(tmp_path / "late")
    plugin._index.runs(force=True)
    assert [r["name"] for r in get(c, "/runs")["runs"]] == ["late"] and plugin.is_active() is True


def test_metadata_round_trip() -> None:
    md = metadata.create_summary_metadata("d", "desc", kind="heatmap")
    assert md.plugin_data.plugin_name == "trainspect" and md.data_class != 0
    assert metadata.parse_plugin_metadata(md.plugin_data.content) == {"version": 1, "kind": "heatmap"}
    assert metadata.parse_plugin_metadata(b"") == {"version": 0}
    with pytest.raises(ValueError, match="newer"):
        metadata.parse_plugin_metadata(b'{"version": 99}')


def test_plugin_imports_no_framework() -> None:
    code = "import sys, trainspect.tb_plugin.plugin; print(sorted(m for m in ('torch', 'tensorflow', 'trainspect.hooks') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "[]"


def test_an_internal_failure_is_a_json_500(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    synth.write_manifest(tmp_path / "r")
    c, plugin = make_client(tmp_path)

    def boom(run: str | None) -> dict:
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(plugin, "_profiler_impl", boom)
    assert get(c, "/profiler", 500, run="r")["error"].startswith("internal error in the trainspect plugin")
    assert get(c, "/runs")["runs"][0]["name"] == "r"  # the other routes keep working
