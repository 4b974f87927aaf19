"""The Rules and Profiler routes' additions: recommendations and first steps, tensor tags, Python hotspots,
utilisation statistics and the Chrome trace download."""

from __future__ import annotations

import json

from _support.tensorboard import PREFIX, get
from werkzeug import test as wtest

from trainspect.tb_plugin.rules_view import tensor_tag


def test_rules_rows_carry_the_first_step_and_the_recommendation(client: wtest.Client) -> None:
    rows = [r for r in get(client, "/rules")["rows"] if r["run"] == "synth"]
    vg = next(r for r in rows if r["rule"] == "VanishingGradient")
    assert vg["first_trigger_step"] is not None and vg["last_trigger_step"] >= vg["first_trigger_step"]
    assert vg["recommendation"]


def test_rule_detail_names_the_tensorboard_tag_of_each_tensor(client: wtest.Client) -> None:
    rules = [r["rule"] for r in get(client, "/rules")["rows"] if r["run"] == "torch_run"]
    d = next(d for d in (get(client, "/rule", run="torch_run", rule=r) for r in rules) if d["tensors"])
    assert d["tensor_tags"] and d["tensor_tags"][0]["tensor"] == d["tensors"][0]
    assert d["tensor_tags"][0]["tag"] == tensor_tag(d["tensors"][0], d["mode"])
    assert tensor_tag("x", "EVAL") == "eval/x" and tensor_tag("x", "TRAIN") == "x"


def test_profiler_overview_has_python_hotspots_utilisation_and_traces(client: wtest.Client) -> None:
    data = get(client, "/profiler", run="torch_run")
    assert data["python"] and {"function", "filename", "calls", "total_time_s"} <= set(data["python"][0])
    metrics = {r["metric"] for r in data["utilization"]}
    assert "cpu_memory_used_percent" in metrics and not any(m.startswith("cpu0_") for m in metrics)
    assert data["traces"] and data["traces"][0]["file"].startswith("trace_") and data["traces"][0]["bytes"] > 0
    assert get(client, "/profiler", run="halfwritten")["traces"] == []


def test_trace_download_is_the_chrome_trace(client: wtest.Client) -> None:
    trace = get(client, "/profiler", run="torch_run")["traces"][0]
    response = client.get(PREFIX + "/trace", query_string={"run": "torch_run", "id": str(trace["id"])})
    assert response.status_code == 200
    assert response.headers["Content-Disposition"].startswith('attachment; filename="torch_run_worker_0_trace_')
    body = json.loads(response.data)
    events = body["traceEvents"] if isinstance(body, dict) else body
    assert events and {"name", "ph"} <= set(events[0]) and len(response.data) == trace["bytes"]


def test_trace_ids_are_looked_up_never_joined_onto_a_path(client: wtest.Client) -> None:
    for params, status in (
        ({"run": "torch_run", "id": "../../trainspect.json"}, 400),
        ({"run": "torch_run"}, 400),
        ({"run": "torch_run", "id": "999"}, 404),
        ({"run": "nope", "id": "0"}, 404),
    ):
        response = client.get(PREFIX + "/trace", query_string=params)
        assert response.status_code == status, params
        assert "error" in json.loads(response.data)
