"""The Profiler tab's card registry (issue 18): one declaration gives a route with typed arguments and a card."""

from __future__ import annotations

from pathlib import Path

import pytest
from _support.tensorboard import PREFIX, XSS, get
from tensorboard.backend import application
from tensorboard.backend.event_processing import data_provider, plugin_event_multiplexer
from tensorboard.plugins import base_plugin
from werkzeug import test as wtest
from werkzeug import wrappers

from trainspect.profiler import analysis
from trainspect.profiler.data import ProfilerData
from trainspect.tb_plugin.cards import Arg, Card, CardRegistry, Column, default_cards
from trainspect.tb_plugin.plugin import TrainspectPlugin


def _widgets(data: ProfilerData, limit: int, scale: float, label: str | None) -> dict:
    return {"limit": limit, "scale": scale, "label": label, "nodes": sorted(data.system)}


WIDGETS = Card("widgets", "Widgets", _widgets, (Arg("limit", int, 5, 1, 10), Arg("scale", float, 1.0), Arg("label")))
STEPS = Card(
    "step_table",
    "Steps per mode",
    lambda data: analysis.step_statistics(data),
    (),
    (Column("mode", "mode", "text"), Column("count", "steps", "count"), Column("p50", "p50", "s")),
)


@pytest.fixture(scope="module")
def cards_client(logdir: Path) -> wtest.Client:
    reg = default_cards(plugins=False)
    reg.register(WIDGETS)
    reg.register(STEPS)
    mux = plugin_event_multiplexer.EventMultiplexer()
    provider = data_provider.MultiplexerDataProvider(mux, str(logdir))
    plugin = TrainspectPlugin(base_plugin.TBContext(logdir=str(logdir), data_provider=provider), cards=reg)
    return wtest.Client(application.TensorBoardWSGI([plugin], data_provider=provider), wrappers.Response)


def test_a_registered_card_is_a_route_with_typed_arguments(cards_client: wtest.Client) -> None:
    got = get(cards_client, "/widgets", run="synth", limit=7, scale="2.5", label=XSS)
    assert got == {"limit": 7, "scale": 2.5, "label": XSS, "nodes": ["node-a"]}
    assert get(cards_client, "/widgets", run="synth") == {"limit": 5, "scale": 1.0, "label": None, "nodes": ["node-a"]}


@pytest.mark.parametrize(
    ("params", "message"),
    [
        ({"limit": "seven"}, "limit='seven' is not an integer"),
        ({"limit": "11"}, "limit=11 is outside 1..10"),
        ({"limit": "0"}, "limit=0 is outside 1..10"),
        ({"scale": "abc"}, "scale='abc' is not a number"),
        ({"scale": "inf"}, "scale='inf' is not a finite number"),
    ],
)
def test_a_bad_argument_is_a_400_naming_it(cards_client: wtest.Client, params: dict, message: str) -> None:
    assert get(cards_client, "/widgets", 400, run="synth", **params)["error"] == f"Invalid argument: {message}"


NOT_ASCII_DIGITS = ["\u0661\u0662", "\uff11\uff12", "\u00b2", "1_0", " 7", "+7", "9" * 19, "9" * 5000]
"""Integers Python's int() (or str.isdigit) takes, but an argument must not: Arabic-Indic, full-width and
superscript digits, underscores, spaces, a sign, 19 and 5,000 digits."""


@pytest.mark.parametrize("raw", NOT_ASCII_DIGITS)
def test_an_integer_argument_takes_only_ascii_digits(cards_client: wtest.Client, raw: str) -> None:
    error = get(cards_client, "/widgets", 400, run="synth", limit=raw)["error"]
    assert error.startswith("Invalid argument: limit=") and error.endswith("is not an integer")
    assert len(error) < 120  # a 5,000-digit number is not echoed back


@pytest.mark.parametrize("raw", ["\u0661.5", "\uff11\uff12", "1_0.5", " 1.5", "9" * 5000])
def test_a_number_argument_takes_only_ascii_digits(cards_client: wtest.Client, raw: str) -> None:
    error = get(cards_client, "/widgets", 400, run="synth", scale=raw)["error"]
    assert error.startswith("Invalid argument: scale=") and error.endswith("is not a number")


@pytest.mark.parametrize("raw", ["-7", "1e3", ".5", "2.", "-1.5E-2"])
def test_ascii_numbers_still_parse(cards_client: wtest.Client, raw: str) -> None:
    assert get(cards_client, "/widgets", run="synth", scale=raw)["scale"] == float(raw)


@pytest.mark.parametrize("raw", NOT_ASCII_DIGITS)
def test_builtin_integer_arguments_and_trace_ids_take_only_ascii_digits(client: wtest.Client, raw: str) -> None:
    assert "is not an integer" in get(client, "/heatmap", 400, run="synth", columns=raw)["error"]
    assert "is not an integer" in get(client, "/timeseries", 400, run="synth", points=raw)["error"]
    assert "must be a trace id" in get(client, "/trace", 400, run="torch_run", id=raw)["error"]


def test_unknown_runs_are_404(cards_client: wtest.Client) -> None:
    assert get(cards_client, "/widgets", 404, run="../synth")["error"].startswith("Not found")
    assert get(cards_client, "/step_table", 404, run="nope")["error"].startswith("Not found")


def test_a_table_card_serves_the_analysis_rows_and_is_listed(cards_client: wtest.Client) -> None:
    rows = get(cards_client, "/step_table", run="torch_run")["rows"]
    assert [(r["mode"], r["count"]) for r in rows] == [("TRAIN", 60)]
    listing = {c["id"]: c for c in get(cards_client, "/cards")["cards"]}
    assert list(listing)[-2:] == ["widgets", "step_table"]
    assert listing["step_table"]["columns"][1] == {"key": "count", "label": "steps", "unit": "count", "unit_from": ""}
    assert listing["widgets"]["args"][0] == {"name": "limit", "type": "integer", "default": 5}
    assert {"heatmap", "timeseries", "utilization", "python_hotspots", "dataloader"} <= set(listing)


def test_builtin_cards_keep_their_routes(client: wtest.Client) -> None:
    rows = get(client, "/python_hotspots", run="torch_run")["rows"]
    overview = get(client, "/profiler", run="torch_run")["python"]
    assert [{k: v for k, v in r.items() if k != "location"} for r in rows] == overview  # the same rows, plus location
    own = next(r for r in rows if r["filename"].endswith(".py"))
    assert own["location"] == "/".join(own["filename"].split("/")[-2:]) + f":{own['line']}"
    assert get(client, "/dataloader", run="synth")["rows"][0]["worker"] == "worker_0"
    response = client.get(PREFIX + "/static/cards.js")
    assert response.status_code == 200 and b"export class TableCard" in response.data


@pytest.mark.parametrize(
    ("card", "match"),
    [
        (Card("runs", "Runs again", _widgets), "taken"),
        (Card("widgets", "Twice", _widgets), "taken"),
        (Card("Bad-Id", "x", _widgets), "must match"),
        (Card("untitled", "", _widgets), "title"),
        (Card("runny", "x", _widgets, (Arg("run"),)), "not 'run'"),
        (Card("twice", "x", _widgets, (Arg("a"), Arg("a"))), "distinct"),
    ],
)
def test_bad_declarations_fail_at_registration(card: Card, match: str) -> None:
    reg = CardRegistry()
    reg.register(WIDGETS)
    with pytest.raises(ValueError, match=match):
        reg.register(card)
