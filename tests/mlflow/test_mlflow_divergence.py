"""Against a real ``mlflow server``: a diverging run shows where it diverged (one tag, live and at close),
``trainspect.issues`` is set while training and at close, per-rule tags keep their full names."""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from mlflow.tracking import MlflowClient

from trainspect.mlflow_plugin import MlflowSink, verdict_tags
from trainspect.rules.verdict import Status, Verdict

LOSS = "train/CrossEntropyLoss_output_0"


def _tags(uri: str, run_id: str) -> dict[str, str]:
    query = urllib.parse.urlencode({"run_id": run_id})
    with urllib.request.urlopen(f"{uri}/api/2.0/mlflow/runs/get?{query}", timeout=30) as r:
        run = json.loads(r.read())["run"]
    return {t["key"]: t["value"] for t in run["data"].get("tags", [])}


def _wait_for_tag(hook: Any, uri: str, run_id: str, key: str, timeout_s: float = 60.0) -> dict[str, str]:
    """Flush the hook until the run has ``key`` (the live rules write their verdicts about once a second)."""
    deadline = time.monotonic() + timeout_s
    while True:
        hook.flush()
        tags = _tags(uri, run_id)
        if tags.get(key) or time.monotonic() > deadline:
            return tags
        time.sleep(0.3)


def test_a_diverging_run_is_tagged_where_it_diverged_live_and_at_close(mlflow_server: str, tmp_path: Path) -> None:
    import torch

    import trainspect as ts
    from trainspect.rules import ExplodingTensor

    client = MlflowClient(tracking_uri=mlflow_server)
    run_id = client.create_run(client.create_experiment(f"e-{tmp_path.name}")).info.run_id
    torch.manual_seed(0)
    model, loss_fn = torch.nn.Linear(4, 2), torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    hook = ts.torch.Hook(
        str(tmp_path / "run"),
        rules=[ExplodingTensor()],
        mlflow_run={"run": run_id, "tracking_uri": mlflow_server, "interval_s": 60},
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for step in range(16):
            if step == 6:  # not a logged step (every 10th is): the mark must not depend on it
                with torch.no_grad():
                    model.weight.fill_(float("nan"))
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if step == 9:
                live = _wait_for_tag(hook, mlflow_server, run_id, "trainspect.issues")
    assert live["trainspect.diverged"].startswith("loss NaN from step 6 (first non-finite: ")
    assert "ExplodingTensor" in live["trainspect.issues"].split(", ")  # while training
    assert live["trainspect.rule.ExplodingTensor"] == "IssuesFound"
    tags = _tags(mlflow_server, run_id)
    assert "ExplodingTensor" in tags["trainspect.issues"].split(", ")  # the report's rules may add LossNotDecreasing
    assert tags["trainspect.diverged"] == live["trainspect.diverged"]
    assert not any("nonfinite" in k for k in tags)
    data = client.get_run(run_id).data
    assert data.metrics["trainspect/first_nonfinite_step"] == 6
    history = client.get_metric_history(run_id, LOSS)
    # step 0 (the interval) and step 5, the last finite value, off the interval; steps 6, 10 and 15: NaN
    assert [m.step for m in history] == [0, 5] and all(m.value == m.value for m in history)


def test_per_rule_tags_keep_full_names(mlflow_server: str, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=mlflow_server)
    run_id = client.create_run(client.create_experiment(f"e-{tmp_path.name}")).info.run_id
    long_name = "MyTeamsVeryDescriptiveCustomRuleThatChecksTheAttentionEntropyOfEveryHead" * 2
    verdicts = [Verdict(long_name, Status.ISSUES_FOUND), Verdict("LossNotDecreasing", Status.NO_ISSUES_FOUND)]
    MlflowSink(run_id, mlflow_server).log([], verdict_tags(verdicts))
    tags = _tags(mlflow_server, run_id)
    assert tags[f"trainspect.rule.{long_name}"] == "IssuesFound"
    assert tags["trainspect.rule.LossNotDecreasing"] == "NoIssuesFound"
    assert tags["trainspect.issues"] == long_name
