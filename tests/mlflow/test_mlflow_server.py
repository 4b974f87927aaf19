"""Against a real ``mlflow server``: the hook's tags, metrics and artifacts read back over REST; compare by run id."""

from __future__ import annotations

import json
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import mlflow
import pytest
from mlflow.tracking import MlflowClient
from mlflow_helpers import train

from trainspect.cli import main


def _get(uri: str, route: str, **params: str) -> Any:
    with urllib.request.urlopen(f"{uri}{route}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        return json.loads(r.read())


@pytest.fixture
def server_run(mlflow_server: str, tmp_path: Path) -> tuple[str, str, Path]:
    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.create_experiment(f"e-{tmp_path.name}")
    run = client.create_run(exp)
    out = tmp_path / "run"
    train(
        out,
        mlflow_run={
            "run": run.info.run_id,
            "tracking_uri": mlflow_server,
            "price_per_hour": 3.825,
            "log_every_n_steps": 1,
        },
    )
    return mlflow_server, run.info.run_id, out


def test_hook_logs_to_a_tracking_server(server_run: tuple[str, str, Path]) -> None:
    uri, run_id, out = server_run
    run = _get(uri, "/api/2.0/mlflow/runs/get", run_id=run_id)["run"]
    tags = {t["key"]: t["value"] for t in run["data"]["tags"]}
    assert tags["trainspect.captures"] == "tensors,rules,system,framework"
    assert tags["trainspect.rule.LossNotDecreasing"] in ("IssuesFound", "NoIssuesFound")
    metrics = {m["key"]: m["value"] for m in run["data"]["metrics"]}
    assert {
        "system/cpu_utilization_percentage",
        "system/system_memory_usage_megabytes",
        "trainspect/step_p95_s",
        "trainspect/cost",
    } <= set(metrics)
    assert metrics["trainspect/price_per_hour"] == pytest.approx(3.825)
    hist = _get(uri, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key="train/CrossEntropyLoss_output_0")
    assert sorted(m["step"] for m in hist["metrics"]) == list(range(32))
    system = _get(
        uri, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key="system/cpu_utilization_percentage"
    )["metrics"]
    assert len(system) >= 1 and all(0 <= m["value"] <= 100 for m in system)
    files = _get(uri, "/api/2.0/mlflow/artifacts/list", run_id=run_id, path="trainspect")["files"]
    assert sorted(f["path"] for f in files) == ["trainspect/report.html", "trainspect/verdicts.json"]
    report = MlflowClient(tracking_uri=uri).download_artifacts(run_id, "trainspect/report.html", str(out.parent))
    assert "Rules summary" in Path(report).read_text()


def test_compare_two_mlflow_runs_by_id(
    server_run: tuple[str, str, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    uri, run_a, _ = server_run
    client = MlflowClient(tracking_uri=uri)
    run_b = client.create_run(client.get_run(run_a).info.experiment_id, run_name="after-fix").info.run_id
    train(tmp_path / "b", mlflow_run={"run": run_b, "tracking_uri": uri}, rules=False, epochs=1)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    mlflow.set_tracking_uri(uri)
    try:
        assert main(["compare", run_a, run_b, "--price-per-hour", "A=3.825", "B=3.825"]) == 0
    finally:
        mlflow.set_tracking_uri(None)  # unset: "" would leave MLflow on ./mlflow.db, whatever the variable says
    text = capsys.readouterr().out
    name_a = client.get_run(run_a).info.run_name
    assert f"A: {name_a}" in text and "B: after-fix" in text and run_a not in text.split("comparison:")[0]
    assert "throughput (steps/s)" in text and "cost per 1,000 steps" in text and "step time p95" in text
    assert "projected cost saving for the same work" in text
    files = _get(uri, "/api/2.0/mlflow/artifacts/list", run_id=run_b, path="trainspect/compare")["files"]
    assert [f["path"] for f in files] == [f"trainspect/compare/compare-{name_a}-vs-after-fix.html"]
    page = client.download_artifacts(run_b, files[0]["path"], str(tmp_path))
    assert "cost per 1,000 steps" in Path(page).read_text()


def test_sink_retries_once_when_the_server_drops_a_kept_alive_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    """A server that closes an idle keep-alive connection just as a batch is sent (uvicorn's 5 s timeout against a
    5 s interval) answers nothing; the sink sends the batch again on a fresh connection."""
    import http.server
    import threading

    from mlflow.entities import Metric

    from trainspect.mlflow_plugin import MlflowSink

    bodies: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            bodies.append(body)
            if len(bodies) == 2:  # the second request arrives on the kept-alive connection: drop it unanswered
                self.close_connection = True
                return
            payload = b"{}"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        sink = MlflowSink("r" * 32, f"http://127.0.0.1:{server.server_address[1]}")
        sink.log([Metric("m", 1.0, 0, 0)])
        sink.log([Metric("m", 2.0, 1, 1)])  # dropped once, sent again
    finally:
        server.shutdown()
    assert [b["metrics"][0]["value"] for b in bodies] == [1.0, 2.0, 2.0]
    assert all(b["run_id"] == "r" * 32 for b in bodies)
