"""Against a real ``mlflow server``: MLflow figures a user can act on.

A diverged run keeps its last finite loss and says where it diverged in one tag; evaluations are one mean each on
the training step axis; runs of different lengths compare per unit of work in what MLflow's compare page reads
(REST ``runs/search``); the hook's configuration and the loader are params; an experiment trainspect creates is a
training experiment; scalars saved after ``optimizer.step()`` reach MLflow (live and through ``mlflow-sync``).
"""

from __future__ import annotations

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
from mlflow.tracking import MlflowClient

import trainspect as ts
from trainspect.cli import main
from trainspect.mlflow_plugin.session import EXPERIMENT_KIND_TAG, EXPERIMENT_KIND_TRAINING
from trainspect.rules.counts import RuleCounts

LOSS = "train/CrossEntropyLoss_output_0"
EVAL_LOSS = "eval/CrossEntropyLoss_output_0"


def _get(uri: str, route: str, **params: str) -> Any:
    with urllib.request.urlopen(f"{uri}{route}?{urllib.parse.urlencode(params)}", timeout=30) as r:
        return json.loads(r.read())


def _post(uri: str, route: str, body: dict[str, Any]) -> Any:
    req = urllib.request.Request(
        f"{uri}{route}", data=json.dumps(body).encode(), method="POST", headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=30) as r:
        return json.loads(r.read())


def _history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    points = _get(uri, "/api/2.0/mlflow/metrics/get-history", run_id=run_id, metric_key=key).get("metrics", [])
    return sorted((int(m["step"]), float(m["value"])) for m in points)


def _new_run(uri: str, name: str) -> str:
    client = MlflowClient(tracking_uri=uri)
    return client.create_run(client.create_experiment(name)).info.run_id


def _train(
    out: Path,
    mlflow_run: Any,
    steps: int = 12,
    nan_at: int | None = None,
    eval_every: int | None = None,
    sleep_s: float = 0.0,
    profile: bool = True,
    rules: Any = None,
) -> None:
    """A real small training run; ``save_scalar("acc")`` after each ``optimizer.step()``, ``"inner"`` inside."""
    import torch

    torch.manual_seed(0)
    model, loss_fn = torch.nn.Linear(16, 4), torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    data = torch.utils.data.TensorDataset(torch.randn(8 * steps, 16), torch.randint(0, 4, (8 * steps,)))
    held_out = [(torch.randn(8, 16), torch.randint(0, 4, (8,))) for _ in range(3)]
    profiler = ts.ProfilerConfig(system_monitor_interval_millis=100) if profile else None
    hook = ts.torch.Hook(str(out), rules=rules, profiler_config=profiler, mlflow_run=mlflow_run)
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for step, (x, y) in enumerate(torch.utils.data.DataLoader(data, batch_size=8)):
            if step == nan_at:
                with torch.no_grad():
                    model.weight.fill_(float("nan"))
            opt.zero_grad()
            out_ = model(x)
            hook.save_scalar("inner", float(step))  # inside the step
            loss_fn(out_, y).backward()
            opt.step()
            hook.save_scalar("acc", float((out_.argmax(1) == y).float().mean()))  # after the step ended
            time.sleep(sleep_s)
            if eval_every and (step + 1) % eval_every == 0:
                model.eval()
                with torch.no_grad():
                    for xe, ye in held_out:
                        loss_fn(model(xe), ye)
                model.train()


def test_a_diverged_run_keeps_its_last_finite_loss_and_one_readable_tag(mlflow_server: str, tmp_path: Path) -> None:
    run_id = _new_run(mlflow_server, f"e-{tmp_path.name}")
    _train(
        tmp_path / "run",
        {"run": run_id, "tracking_uri": mlflow_server},
        steps=16,
        nan_at=13,
        profile=False,
        rules="default",
    )
    loss = _history(mlflow_server, run_id, LOSS)
    assert [s for s, _ in loss] == [0, 10, 12]  # every 10th, and step 12, the last finite one (off the interval)
    recorded = ts.create_trial(tmp_path / "run").tensor("CrossEntropyLoss_output_0")
    assert loss[-1][1] == pytest.approx(float(recorded.value(12)), rel=1e-6) and np.isfinite(loss[-1][1])
    tags = {
        t["key"]: t["value"]
        for t in _get(mlflow_server, "/api/2.0/mlflow/runs/get", run_id=run_id)["run"]["data"]["tags"]
    }
    ours = {k: v for k, v in tags.items() if k.startswith("trainspect.") and not k.startswith("trainspect.rule.")}
    assert len(ours) <= 7 and all(len(k) < 250 for k in tags), sorted(ours)  # not 20+ tags per tensor
    assert "forward pass of TRAIN step 13" in tags["trainspect.nan_origin"]  # where the NaN came from, one tag
    assert not any("nonfinite" in k for k in tags)
    assert tags["trainspect.diverged"].startswith("loss NaN from step 13 (first non-finite: ")
    assert "CrossEntropyLoss_output_0" in tags["trainspect.diverged"]
    detail = json.loads(tags["trainspect.diverged.detail"])
    assert detail["step"] == 13 and detail["last_finite_step"] == 12 and len(tags["trainspect.diverged.detail"]) <= 5000
    metrics = {
        m["key"]: m for m in _get(mlflow_server, "/api/2.0/mlflow/runs/get", run_id=run_id)["run"]["data"]["metrics"]
    }
    assert metrics["trainspect/first_nonfinite_step"]["value"] == 13
    counted = RuleCounts.of(ts.rules.load_verdicts(tmp_path / "run"))  # the count every screen shows
    assert "ExplodingTensor" in counted.issues and tags["trainspect.rule_counts"] == counted.line()


def test_eval_loss_is_one_mean_per_evaluation_on_the_train_step_axis(mlflow_server: str, tmp_path: Path) -> None:
    run_id = _new_run(mlflow_server, f"e-{tmp_path.name}")
    _train(tmp_path / "run", {"run": run_id, "tracking_uri": mlflow_server}, steps=12, eval_every=4, profile=False)
    trial = ts.create_trial(tmp_path / "run")
    tensor = trial.tensor("CrossEntropyLoss_output_0")
    eval_steps = tensor.steps(ts.modes.ModeKeys.EVAL)
    assert eval_steps == list(range(9))  # 3 evaluations of 3 batches
    means = [
        np.mean([float(tensor.value(s, ts.modes.ModeKeys.EVAL)) for s in eval_steps[i : i + 3]]) for i in (0, 3, 6)
    ]
    got = _history(mlflow_server, run_id, EVAL_LOSS)
    assert [s for s, _ in got] == [4, 8, 12]  # after 4, 8 and 12 training steps
    np.testing.assert_allclose([v for _, v in got], means, rtol=1e-6)
    assert [s for s, _ in _history(mlflow_server, run_id, LOSS)] == [0, 10, 11]  # the same axis: train steps


def test_runs_of_different_lengths_compare_per_unit_of_work(mlflow_server: str, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.create_experiment(f"e-{tmp_path.name}")
    long_fast = client.create_run(exp, run_name="long-fast").info.run_id
    short_slow = client.create_run(exp, run_name="short-slow").info.run_id
    # sleeps bound the step time from below: the long run does more work in more time, but less time per step
    _train(tmp_path / "a", {"run": long_fast, "tracking_uri": mlflow_server}, steps=60, sleep_s=0.01)
    _train(tmp_path / "b", {"run": short_slow, "tracking_uri": mlflow_server}, steps=8, sleep_s=0.08)
    # what MLflow's compare-runs page reads: runs/search, here ordered as its table sorts
    found = _post(
        mlflow_server,
        "/api/2.0/mlflow/runs/search",
        {"experiment_ids": [exp], "order_by": ["metrics.`trainspect/steps_per_s` DESC"]},
    )["runs"]
    assert [r["info"]["run_id"] for r in found] == [long_fast, short_slow]
    metrics = {r["info"]["run_id"]: {m["key"]: m["value"] for m in r["data"]["metrics"]} for r in found}
    params = {r["info"]["run_id"]: {p["key"]: p["value"] for p in r["data"].get("params", [])} for r in found}
    a, b = metrics[long_fast], metrics[short_slow]
    assert a["trainspect/steps"] == 60 and b["trainspect/steps"] == 8
    assert a["trainspect/loop_s"] > b["trainspect/loop_s"]  # the totals say the long run is slower
    assert a["trainspect/steps_per_s"] > b["trainspect/steps_per_s"]
    assert a["trainspect/time_per_1k_steps_s"] < b["trainspect/time_per_1k_steps_s"]
    assert a["trainspect/samples_per_s"] == pytest.approx(8 * a["trainspect/steps_per_s"])
    for m in (a, b):
        assert "trainspect/job_s" in m and not any("duration" in k for k in m)  # MLflow shows its own duration
    for p in params.values():
        assert p["batch_size"] == "8" and p["num_workers"] == "0"
        assert p["trainspect.save_interval"] and p["trainspect.collections"]
        assert p["trainspect.profiler"] == "system every 100 ms, framework" and p["trainspect.rules"] == "none"
        assert p["trainspect.run_dir"] in ("a", "b") and all(len(v) <= 6000 for v in p.values())


def test_the_experiment_trainspect_creates_is_a_training_experiment(mlflow_server: str, tmp_path: Path) -> None:
    client = MlflowClient(tracking_uri=mlflow_server)
    created_name, user_name = f"ts-{tmp_path.name}", f"user-{tmp_path.name}"
    user_exp = client.create_experiment(user_name)
    for name, out in ((created_name, "a"), (user_name, "b")):
        _train(tmp_path / out, {"run": True, "tracking_uri": mlflow_server, "experiment": name}, steps=2, profile=False)

    def kind(name: str) -> str | None:
        exp = _get(mlflow_server, "/api/2.0/mlflow/experiments/get-by-name", experiment_name=name)["experiment"]
        return {t["key"]: t["value"] for t in exp.get("tags", [])}.get(EXPERIMENT_KIND_TAG)

    assert kind(created_name) == EXPERIMENT_KIND_TRAINING == "custom_model_development"
    assert kind(user_name) is None  # the user's experiment is left as it is
    for name in (created_name, user_name):
        exp_id = client.get_experiment_by_name(name).experiment_id
        runs = client.search_runs([exp_id])
        assert len(runs) == 1 and runs[0].info.status == "FINISHED" and LOSS in runs[0].data.metrics
    assert client.get_experiment_by_name(user_name).experiment_id == user_exp


def test_scalars_saved_after_the_optimizer_step_reach_mlflow(mlflow_server: str, tmp_path: Path) -> None:
    every = _new_run(mlflow_server, f"e-{tmp_path.name}")
    _train(tmp_path / "every", {"run": every, "tracking_uri": mlflow_server, "log_every_n_steps": 1}, profile=False)
    for key in ("train/scalar/acc", "train/scalar/inner", LOSS):
        assert [s for s, _ in _history(mlflow_server, every, key)] == list(range(12)), key
    assert [v for _, v in _history(mlflow_server, every, "train/scalar/inner")] == [float(s) for s in range(12)]

    run_id = _new_run(mlflow_server, f"s-{tmp_path.name}")
    out = tmp_path / "sync"
    _train(out, {"run": run_id, "tracking_uri": mlflow_server}, profile=False)
    assert [s for s, _ in _history(mlflow_server, run_id, "train/scalar/acc")] == [0, 10, 11]  # as the loss
    recorded = ts.create_trial(out).tensor("scalar/acc")
    assert main(["mlflow-sync", str(out)]) == 0
    acc = _history(mlflow_server, run_id, "train/scalar/acc")
    assert [s for s, _ in acc] == recorded.steps() == list(range(12))
    np.testing.assert_allclose([v for _, v in acc], [float(recorded.value(s)) for s in range(12)], rtol=1e-6)


def test_a_comparison_reads_an_mlflow_runs_name_divergence_and_batch_size(
    mlflow_server: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trainspect.report import summary_for

    client = MlflowClient(tracking_uri=mlflow_server)
    exp = client.create_experiment(f"e-{tmp_path.name}")
    rank_diverged = client.create_run(exp, run_name="before-fix").info.run_id
    client.log_metric(rank_diverged, "trainspect/steps", 40.0)
    client.log_metric(rank_diverged, "worker_1/trainspect/first_nonfinite_step", 7.0)  # rank 1 alone went NaN
    client.log_param(rank_diverged, "batch_size", "32")
    tagged = client.create_run(exp, run_name="tagged").info.run_id
    client.set_tag(tagged, "trainspect.diverged", "loss NaN from step 13 (first non-finite: loss)")
    single = client.create_run(exp, run_name="single").info.run_id
    client.log_param(single, "batch_size", "1")  # one sample per step is a batch size; 0 steps per epoch is none
    client.log_param(single, "steps_per_epoch", "0")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", mlflow_server)
    mlflow.set_tracking_uri(mlflow_server)  # an earlier test's URI would win over the variable
    try:
        a, b, one = summary_for(rank_diverged), summary_for(tagged, batch_size=8), summary_for(single)
    finally:
        mlflow.set_tracking_uri(None)  # unset: "" would leave MLflow on ./mlflow.db, whatever the variable says
    assert (a.name, a.steps, a.batch_size) == ("before-fix", 40, 32)
    assert a.diverged == "a logged value NaN/Inf from step 7" and a.report == "MLflow artifact trainspect/report.html"
    assert (b.name, b.diverged, b.batch_size) == ("tagged", "loss NaN from step 13", 8)
    assert (one.batch_size, one.steps_per_epoch, one.diverged) == (1, None, "")
