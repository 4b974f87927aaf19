"""The plugin inside a real TensorBoard started by ``trainspect ui``: Python loading and the Rust data server."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from _support.polling import wait_for
from _support.tensorboard import PREFIX, TensorBoardProcess


def fetch(url: str) -> tuple[int, dict | list]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


@pytest.fixture
def tensorboard(logdir: Path) -> Iterator[Callable[[str], str]]:
    """Start a real TensorBoard (``load_fast``: "false" Python loading, "true" the Rust data server)."""
    started: list[TensorBoardProcess] = []

    def start(load_fast: str) -> str:
        started.append(TensorBoardProcess(logdir, load_fast))
        return started[-1].url

    yield start
    for board in started:
        board.close()


def scalar_runs(url: str) -> set[str]:
    _status, tags = fetch(url + "data/plugin/scalars/tags")
    return set(tags)


def check_plugin(url: str) -> None:
    _status, listing = fetch(url + "data/plugins_listing")
    assert listing["trainspect"]["enabled"] is True and listing["scalars"]["enabled"] is True
    _status, runs = fetch(url + PREFIX.lstrip("/") + "/runs")
    names = {r["name"]: r for r in runs["runs"]}
    assert names["torch_run"]["profiler"] and names["synth"]["verdicts"]
    status, hm = fetch(url + PREFIX.lstrip("/") + "/heatmap?run=synth&columns=200")
    assert status == 200 and hm["columns"] == 200 and len(hm["rows"]) == 72
    status, err = fetch(url + PREFIX.lstrip("/") + "/heatmap?run=..%2Fsynth")
    assert status == 404 and "error" in err


@pytest.mark.slow
def test_python_loading_serves_the_plugin_and_scalars_keep_working(tensorboard: Callable[[str], str]) -> None:
    url = tensorboard("false")
    check_plugin(url)
    runs = wait_for(lambda: {"torch_run", "tb_only"} <= scalar_runs(url) and scalar_runs(url), timeout=60.0)
    assert {"torch_run", "tb_only"} <= runs  # losses stay in TensorBoard's Scalars dashboard
    _status, tags = fetch(url + "data/plugin/scalars/tags")
    assert "CrossEntropyLoss_output_0" in tags["torch_run"] and "accuracy" in tags["tb_only"]


@pytest.mark.slow
def test_rust_data_server(tensorboard: Callable[[str], str]) -> None:
    url = tensorboard("true")  # --load_fast=true fails hard when the data server is missing
    check_plugin(url)
    runs = wait_for(lambda: {"torch_run", "tb_only"} <= scalar_runs(url) and scalar_runs(url), timeout=60.0)
    assert {"torch_run", "tb_only"} <= runs
    _status, runs_listed = fetch(url + PREFIX.lstrip("/") + "/runs")
    assert any(r["name"] == "tb_only" and not r["has_data"] for r in runs_listed["runs"])  # via the data provider


def test_trainspect_ui_rejects_a_missing_directory(tmp_path: Path) -> None:
    from trainspect.cli import main

    assert main(["ui", str(tmp_path / "missing"), "--port", "0"]) == 2
