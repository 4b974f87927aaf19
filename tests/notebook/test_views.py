"""The notebook views on small synthetic runs: what they draw, refresh, empty runs, selections, escaping."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import nb_synth
import numpy as np
import pandas as pd
import pytest
import synthetic_run

import trainspect.notebook as tsnb
from trainspect.notebook._view import RunSource
from trainspect.profiler import FrameworkMetricsReader, SystemMetricsReader
from trainspect.profiler.arrays import FrameworkTables, SystemArrays

VIEWS = (tsnb.MetricsHistogram, tsnb.StepHistogram, tsnb.Heatmap, tsnb.Timeline, tsnb.Verdicts)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return nb_synth.full_run(tmp_path_factory.mktemp("nb") / "run")


class MarkupNames(RunSource):
    """The run's data with every node and worker renamed to markup (names on disk are sanitised, names read from
    SageMaker output or other writers need not be)."""

    def system(self) -> dict[str, SystemArrays]:
        return {f"{nb_synth.XSS}{n}": replace(a, node=f"{nb_synth.XSS}{n}") for n, a in super().system().items()}

    def framework(self) -> dict[str, FrameworkTables]:
        return {f"{nb_synth.XSS}{w}": replace(t, worker=f"{nb_synth.XSS}{w}") for w, t in super().framework().items()}


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.__name__)
def test_each_view_draws_svg_and_escapes_every_name(view: type, run: Path) -> None:
    out = view(MarkupNames(run))._repr_html_()
    assert out.startswith('<div class="trainspect-nb"') and "<svg" in out and "data-empty" not in out
    assert "<img" not in out and "<script" not in out
    assert "http" not in out.replace('xmlns="http://www.w3.org/2000/svg"', "")  # nothing to fetch
    assert html.escape(nb_synth.XSS) in out  # a node's, worker's or verdict's name, shown escaped


def test_labels_and_figures(run: Path) -> None:
    hist = tsnb.MetricsHistogram(run)
    assert 'data-node="node-a"' in hist.html() and "gpu1 (60 samples" in hist.html()
    fig = hist.figure()
    assert len(fig) == 2 and sum(fig["node-a"]["gpu0"]["counts"]) == 60
    steps = tsnb.StepHistogram(run).figure()
    assert set(steps) == {"worker_0", "worker_1"} and set(steps["worker_0"]) == {"Step:ModeKeys.TRAIN"}
    assert steps["worker_1"]["Step:ModeKeys.TRAIN"]["outliers"] == 1  # the one 0.9 s step among 0.1 s ones
    assert steps["worker_0"]["Step:ModeKeys.TRAIN"]["outliers"] == 0
    spans = tsnb.StepHistogram(run, events=["DataLoader", "Forward"], workers=["_1$"]).figure()
    assert list(spans) == ["worker_1"] and set(spans["worker_1"]) == {"DataLoaderIter", "Forward"}
    assert list(tsnb.StepHistogram(run, combine_workers=True).figure()) == ["all workers"]
    heat = tsnb.Heatmap(run, rows=["^gpu"]).figure()
    assert heat["node-a"]["rows"] == ["gpu0", "gpu1"] and heat["node-a"]["step_boundaries"]
    assert 'class="ts-step"' in tsnb.Heatmap(run).html()
    timeline = tsnb.Timeline(run)
    tl = timeline.figure()
    assert isinstance(tl["steps"], pd.DataFrame) and len(tl["steps"]) == 40
    assert {p["phase"] for p in tl["phases"]} >= {"training_loop"} and len(tl["system"]["node-a"]["time"]) == 60
    assert "TRAIN steps" in timeline.html() and "dataloader" in timeline.html()
    verdicts = tsnb.Verdicts(run).figure()
    assert list(verdicts["rule"]) == ["LowGPUUtilization", "StepOutlier"]


def test_step_histogram_counts_match_numpy(run: Path) -> None:
    fig = tsnb.StepHistogram(run, bins=7).figure()["worker_0"]["Step:ModeKeys.TRAIN"]
    durations = np.asarray(fig["durations"])
    counts, edges = np.histogram(durations, bins=7, range=(durations.min(), durations.max()))
    assert fig["counts"] == counts.tolist() and fig["edges"] == pytest.approx(edges.tolist())


def test_refresh_picks_up_new_data(tmp_path: Path) -> None:
    nb_synth.write_system(tmp_path, 20, node="node-a")
    nb_synth.write_steps(tmp_path, np.full(5, 0.1))
    reader = SystemMetricsReader(tmp_path)
    hist, steps = tsnb.MetricsHistogram(reader), tsnb.StepHistogram(FrameworkMetricsReader(tmp_path))
    heat, timeline = tsnb.Heatmap(tmp_path), tsnb.Timeline(tmp_path)
    assert hist.figure()["node-a"]["cpu0"]["samples"] == 20
    nb_synth.write_system(tmp_path, 30, node="node-a", t0=nb_synth.T0 + 10)
    nb_synth.write_steps(tmp_path, np.full(7, 0.2), worker="worker_1", t0=nb_synth.T0 + 10)
    assert hist.figure()["node-a"]["cpu0"]["samples"] == 20  # nothing read until refresh()
    assert hist.refresh().figure()["node-a"]["cpu0"]["samples"] == 50
    assert steps.refresh().figure()["worker_1"]["Step:ModeKeys.TRAIN"]["count"] == 7
    assert heat.refresh().figure()["node-a"]["times"][-1] > nb_synth.T0 + 10
    assert timeline.refresh().figure()["window"][1] >= nb_synth.T0 + 12.9
    assert tsnb.Verdicts(tmp_path).figure().empty
    synthetic_run.end_run(tmp_path, nb_synth.verdicts())


@pytest.mark.parametrize("view", VIEWS, ids=lambda v: v.__name__)
def test_an_empty_or_missing_run_shows_an_empty_state(view: type, tmp_path: Path) -> None:
    for path in (tmp_path, tmp_path / "not-there"):
        v = view(path)
        out = v.html()
        assert 'data-empty="1"' in out and "recorded yet" in out
        assert v.refresh() is v
        fig = v.figure()
        assert fig.empty if isinstance(fig, pd.DataFrame) else not fig or fig.get("window", 0) is None


def test_a_selection_naming_nothing_says_what_exists(run: Path) -> None:
    with pytest.raises(ValueError, match=r"no device matches \['tpu'\]; this run has: cpu_total, cpu0, cpu1, gpu0"):
        tsnb.MetricsHistogram(run, devices=["tpu"])
    with pytest.raises(ValueError, match=r"no event matches .*Step:ModeKeys.TRAIN, Backward|no event matches"):
        tsnb.StepHistogram(run, events=["Nope"])
    with pytest.raises(ValueError, match="this run has: worker_0, worker_1"):
        tsnb.Timeline(run, workers=["worker_9"])
    with pytest.raises(ValueError, match="no row matches"):
        tsnb.Heatmap(run, rows=["cpu99"])
    with pytest.raises(ValueError, match="this run has: LowGPUUtilization, StepOutlier"):
        tsnb.Verdicts(run, rules=["Vanishing"])
    with pytest.raises(ValueError, match="node"):
        tsnb.MetricsHistogram(run, nodes=["["])  # a broken expression: one ValueError naming it


def test_show_outside_a_kernel_returns_the_view_and_save_writes_a_page(run: Path, tmp_path: Path) -> None:
    view = tsnb.Verdicts(run)
    assert view.show() is view
    page = view.save(tmp_path / "v.html").read_text()
    assert page.startswith("<!doctype html>") and "LowGPUUtilization" in page
