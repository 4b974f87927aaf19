"""The utilisation-histogram card (issue 31): a registry card whose route answers numpy's counts, drawn as a table."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import synthetic_run
import tb_synth
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from test_tb_backend import get
from werkzeug import test as wtest
from werkzeug import wrappers

from trainspect.tb_plugin.histogram_view import sparkline
from trainspect.tb_plugin.plugin import TrainspectPlugin

T0 = tb_synth.T0
KEYS = ["cpu0_utilization_percent", "cpu1_utilization_percent", "gpu0_utilization_percent", "gpu1_utilization_percent"]


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, np.ndarray]:
    """A log directory: run ``hist`` (one node, 2 cores, 2 GPUs, 200 samples at 0.5 s) and a run without samples."""
    root = tmp_path_factory.mktemp("hist_logdir")
    rng = np.random.default_rng(7)
    values = np.round(np.clip(np.array([30.0, 95.0, 85.0, 20.0]) + rng.normal(0, 8, (200, 4)), 0, 100), 2)
    tb_synth.write_manifest(root / "hist")
    synthetic_run.write_system(root / "hist", "node-a", 500, T0 + np.arange(200) * 0.5, KEYS, values, 50)
    tb_synth.write_manifest(root / "no_system")
    return root, values


@pytest.fixture(scope="module")
def hist_client(written: tuple[Path, np.ndarray]) -> wtest.Client:
    """The plugin over the log directory; an empty multiplexer, as ``cards_client``: no event files to load."""
    logdir = str(written[0])
    provider = data_provider.MultiplexerDataProvider(plugin_event_multiplexer.EventMultiplexer(), logdir)
    plugin = TrainspectPlugin(base_plugin.TBContext(logdir=logdir, data_provider=provider))
    return wtest.Client(application.TensorBoardWSGI([plugin], data_provider=provider), wrappers.Response)


def _counts(values: np.ndarray, bins: int = 20) -> list[int]:
    return np.histogram(values, bins=np.linspace(0, 100, bins + 1))[0].tolist()


def test_the_card_route_answers_numpys_counts_per_device(hist_client: wtest.Client, written: tuple) -> None:
    values = written[1]
    rows = {r["device"]: r for r in get(hist_client, "/utilisation_histograms", run="hist")["rows"]}
    assert list(rows) == ["cpu_total", "cpu0", "cpu1", "gpu0", "gpu1", "gpu_total"]
    for j, device in enumerate(("cpu0", "cpu1", "gpu0", "gpu1")):
        assert rows[device]["counts"] == _counts(values[:, j]), device
        assert rows[device]["samples"] == 200 and rows[device]["mean"] == pytest.approx(values[:, j].mean(), abs=1e-3)
        assert rows[device]["distribution"] == sparkline(rows[device]["counts"])
    assert rows["cpu_total"]["counts"] == _counts(values[:, :2].mean(axis=1))
    assert rows["gpu_total"]["counts"] == _counts(values[:, 2:].mean(axis=1))
    assert rows["gpu0"]["edges"] == np.linspace(0, 100, 21).tolist() and rows["gpu0"]["node"] == "node-a"


def test_node_window_and_bins_are_typed_arguments(hist_client: wtest.Client, written: tuple) -> None:
    values = written[1]
    got = get(hist_client, "/utilisation_histograms", run="hist", node="node-a", bins=4, start=T0, end=T0 + 49.9)
    gpu0 = next(r for r in got["rows"] if r["device"] == "gpu0")
    assert gpu0["counts"] == _counts(values[:100, 2], bins=4) and gpu0["samples"] == 100
    assert get(hist_client, "/utilisation_histograms", run="no_system")["rows"] == []


@pytest.mark.parametrize(
    ("params", "status", "message"),
    [
        ({"bins": "many"}, 400, "bins='many' is not an integer"),
        ({"bins": "0"}, 400, "bins=0 is outside 1..100"),
        ({"start": "soon"}, 400, "start='soon' is not a number"),
        ({"start": str(T0 + 10), "end": str(T0)}, 400, "is before start"),
        ({"node": "nope"}, 404, "no node named 'nope'"),
    ],
)
def test_a_bad_argument_is_a_json_error(hist_client: wtest.Client, params: dict, status: int, message: str) -> None:
    assert message in get(hist_client, "/utilisation_histograms", status, run="hist", **params)["error"]


def test_the_card_is_listed_as_a_generic_table(hist_client: wtest.Client) -> None:
    card = {c["id"]: c for c in get(hist_client, "/cards")["cards"]}["utilisation_histograms"]
    assert [c["key"] for c in card["columns"]] == ["node", "device", "samples", "mean", "distribution"]
    assert [a["name"] for a in card["args"]] == ["node", "start", "end", "bins"]
    assert sparkline([0, 1, 4, 8]) == "·▁▄█" and sparkline([0, 0]) == "··"
