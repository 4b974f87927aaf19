"""The report tells the truth: one count of rules and steps (report, TensorBoard, ``RuleCounts``), how the job
ended (StopTraining, a script that failed before its first step), a short run is no damaged run, and the job's own
CPU beside the host's (issue 29)."""

from __future__ import annotations

import html as htmllib
import json
import re
import shutil
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from werkzeug import test as wtest
from werkzeug import wrappers

from trainspect.report import render_report
from trainspect.rules.counts import RuleCounts, steps_text
from trainspect.rules.verdict import read_verdicts
from trainspect.store.job_events import write_exit, write_stop
from trainspect.store.layout import RunLayout

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import synthetic_run  # noqa: E402

T0 = 1_700_000_000.0


def _text(html: str) -> str:
    """The page's text (tags dropped, entities decoded), scripts and styles left out."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", html, flags=re.S)
    return htmllib.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))


def _verdict_section(html: str) -> str:
    m = re.search(r'<section id="verdict" data-section="verdict">(.*?)</section>', html, re.S)
    assert m, "no verdict section"
    return m.group(1)


def _charts(html: str) -> dict[str, Any]:
    m = re.search(r'<script id="ts-charts" type="application/json">(.*?)</script>', html, re.S)
    assert m
    return json.loads(m.group(1))


def _route(run_root: Path, route: str, **args: str) -> dict[str, Any]:
    """One JSON route of the TensorBoard plugin over ``run_root`` (its log directory), through HTTP."""
    from tensorboard.plugins import base_plugin

    from trainspect.tb_plugin.plugin import TrainspectPlugin

    plugin = TrainspectPlugin(base_plugin.TBContext(logdir=str(run_root)))
    client = wtest.Client(plugin.get_plugin_apps()[route], wrappers.Response)
    resp = client.get(route, query_string=args)
    assert resp.status_code == 200, resp.get_data(as_text=True)
    return json.loads(resp.get_data(as_text=True))


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real torch run: 20 TRAIN steps and 3 EVAL steps, rules, the profiler at 100 ms (under two seconds)."""
    import torch

    import trainspect as ts
    from trainspect.rules import ExplodingTensor, LossNotDecreasing

    out = tmp_path_factory.mktemp("truth") / "logdir" / "real"
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    loss_fn = torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = ts.torch.Hook(
        str(out),
        rules=[ExplodingTensor(), LossNotDecreasing()],
        profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100),
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
        for _ in range(20):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        hook.set_mode("EVAL")
        with torch.no_grad():
            for _ in range(3):
                loss_fn(model(x), y)
    return out


@pytest.fixture(scope="module")
def rendered(real_run: Path) -> str:
    """The report of the real run (rendering records the report's verdicts: the record is read after it)."""
    return render_report(real_run)


def test_one_count_of_rules_in_the_report_the_tb_routes_and_rulecounts(real_run: Path, rendered: str) -> None:
    line = RuleCounts.of(read_verdicts(RunLayout(real_run).verdicts)).line()
    assert re.match(r"\d+ rules: \d+ judged, ", line), line
    assert line in _text(_verdict_section(rendered))  # the badge, with every rule (none hidden)
    rules = _route(real_run.parent, "/rules")
    summary = next(s for s in rules["summaries"] if s["run"] == real_run.name)
    assert summary["counts"]["line"] == line
    assert summary["counts"]["total"] == len({r["rule"] for r in rules["rows"] if r["run"] == real_run.name})
    profiler = _route(real_run.parent, "/profiler", run=real_run.name)
    assert profiler["rule_counts"]["line"] == line


def test_train_and_eval_steps_are_counted_apart_everywhere(real_run: Path, rendered: str) -> None:
    text = _text(rendered)
    assert "20 TRAIN, 3 EVAL steps" in text
    assert re.search(r"\b23 steps\b", text) is None  # never added up
    assert "Steps 20 TRAIN, 3 EVAL steps" in _text(_verdict_section(rendered))  # the job line
    profiler = _route(real_run.parent, "/profiler", run=real_run.name)
    assert profiler["step_counts"]["TRAIN"] == 20 and profiler["steps_text"] == steps_text(profiler["step_counts"])


def test_a_stop_is_said_at_the_top_of_the_verdict_and_in_the_rules_route(real_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "logdir" / "stopped"
    shutil.copytree(real_run, run)
    write_stop(run, "ExplodingTensor", 12, "TRAIN", "worker_0")
    section = _text(_verdict_section(render_report(run)))
    phrase = "stopped by StopTraining at step 12 (rule ExplodingTensor)"
    assert phrase in section and section.index(phrase) < section.index(" rules: ")  # above the count badge
    summary = _route(run.parent, "/rules")["summaries"][0]
    assert [s["text"] for s in summary["stops"]] == [phrase] and summary["stops"][0]["worker"] == "worker_0"


def test_no_stop_no_stop_line(rendered: str) -> None:
    assert "StopTraining" not in _text(_verdict_section(rendered))


@pytest.mark.parametrize(
    ("code", "said"),
    [
        (2, "the script failed with exit status 2 before its first step"),
        (-9, "the script was ended by signal SIGKILL before its first step"),
    ],
)
def test_a_script_that_failed_before_its_first_step(tmp_path: Path, code: int, said: str) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_exit(run, code, steps_recorded=False)
    text = _text(render_report(run))
    assert said in text.replace("The script", "the script")
    assert "--profile" not in text and "profiler_config" not in text and "Pass rules=" not in text


def test_a_failure_after_steps_is_no_early_failure(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    write_exit(run, 1, steps_recorded=True)
    text = _text(render_report(run))
    assert "before its first step" not in text and "--profile" in text  # the usual advice


def test_a_short_run_without_a_system_sample_is_not_called_damaged(real_run: Path, tmp_path: Path) -> None:
    run = tmp_path / "short"
    shutil.copytree(real_run, run)
    (run / "report.html").unlink(missing_ok=True)
    nodes = [d for d in (run / "profiler" / "system").iterdir() if d.is_dir()]
    assert nodes  # the monitor made its node folder (on a loaded machine it may not have sampled even once)
    for f in (run / "profiler" / "system").rglob("*.tsys"):  # the job ended before the monitor's first sample
        f.unlink()
    RunLayout(run).verdicts.unlink()  # the report evaluates the profiler rules itself
    text = _text(render_report(run))
    assert "damaged" not in text.lower() and "holds no .tsys file" not in text
    assert "too short for a system sample" in text


def test_a_long_run_without_system_samples_is_still_reported_damaged(tmp_path: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import synth_run

    run = synth_run.write_run(tmp_path / "long", seconds=150, interval_s=1.0, cores=2, gpus=0, steps=600, step_s=0.2)
    for f in (run / "profiler" / "system").rglob("*.tsys"):
        f.unlink()
    text = _text(render_report(run))
    assert "holds no .tsys file" in text and "too short for a system sample" not in text


@pytest.fixture(scope="module")
def shared_host_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A node whose host is ~100 % busy while the job's processes use ~10 % of it (a shared machine)."""
    run = tmp_path_factory.mktemp("busy_host") / "logdir" / "busy_host"
    synthetic_run.start_run(run, "shared-host", {"framework": "synthetic"})
    keys = ["cpu0_utilization_percent", "cpu1_utilization_percent", "process_cpu_utilization_percent"]
    times = T0 + np.arange(40) * 0.5
    values = np.tile([100.0, 98.0, 10.0], (40, 1))
    synthetic_run.write_system(run, "host-1", 500, times, keys, values, 10)
    return synthetic_run.end_run(run, [])


def test_the_heatmap_and_the_cpu_chart_show_the_jobs_cpu_beside_the_hosts(shared_host_run: Path) -> None:
    charts = _charts(render_report(shared_host_run)).values()
    heat = next(c for c in charts if c["title"]["text"].startswith("Utilisation %"))
    rows = heat["yAxis"]["data"]
    assert rows[:2] == ["job CPU", "host CPU"] and "cpu0" in rows
    by_row: dict[int, list[float]] = {}
    for _col, row, value in heat["series"][0]["data"]:
        by_row.setdefault(row, []).append(value)
    assert max(by_row[0]) == pytest.approx(10.0) and min(by_row[1]) == pytest.approx(99.0)
    usage = next(c for c in charts if c["title"]["text"].startswith("Utilisation over time"))
    names = [s["name"] for s in usage["series"]]
    assert "CPU (training job)" in names and "CPU (host)" in names
    tb = _route(shared_host_run.parent, "/heatmap", run="busy_host")
    assert tb["rows"][:2] == ["job CPU", "host CPU"] and tb["values"][0][0] == 10 and tb["values"][1][0] == 99
    series = _route(shared_host_run.parent, "/timeseries", run="busy_host")
    cpu = next(g for g in series["groups"] if g["id"] == "cpu")
    assert [s["key"] for s in cpu["series"]][:2] == ["process_cpu_utilization_percent", "cpu_utilization_percent"]
