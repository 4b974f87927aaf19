"""Issue 13: `trainspect rules DIR` is quiet on healthy trainings and names the problem of broken ones.

The corpus (corpus.py) is trained once per session into a temporary directory; every run is then judged by
the real CLI in a subprocess, with every applicable rule at its defaults.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support.package import PACKAGE_ROOT
from corpus import SCENARIOS

import trainspect as ts

HEALTHY = [name for name, (expected, _) in SCENARIOS.items() if expected is None]
BROKEN = [name for name, (expected, _) in SCENARIOS.items() if expected is not None]
JUDGED_ON_HEALTHY = {"VanishingGradient", "ExplodingTensor", "LossNotDecreasing", "Overfit", "Overtraining"}
"""Rules that must have judged every healthy run (quiet because they looked, not because they did not run)."""


def cli(run: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), *sys.path])}
    return subprocess.run(
        [sys.executable, "-m", "trainspect.cli", "rules", str(run), "--json", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def _judge_all(runs: dict[str, Path]) -> dict[str, tuple[int, list[dict]]]:
    """Run the CLI over every run, two at a time."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PACKAGE_ROOT), *sys.path])}
    results: dict[str, tuple[int, list[dict]]] = {}
    names = list(runs)
    for i in range(0, len(names), 2):
        procs = {
            n: subprocess.Popen(
                [sys.executable, "-m", "trainspect.cli", "rules", str(runs[n]), "--json"],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                env=env,
            )
            for n in names[i : i + 2]
        }
        for n, proc in procs.items():
            out, err = proc.communicate(timeout=300)
            assert out.strip(), f"{n}: trainspect rules printed nothing: {err[-2000:]}"
            results[n] = (proc.returncode, json.loads(out))
    return results


@pytest.fixture(scope="module")
def corpus_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("calibration")
    runs = {}
    for name, (_, train) in SCENARIOS.items():
        runs[name] = root / name
        train(runs[name])
    return runs


@pytest.fixture(scope="module")
def verdicts(corpus_runs: dict[str, Path]) -> dict[str, tuple[int, list[dict]]]:
    return _judge_all(corpus_runs)


def issues(result: tuple[int, list[dict]]) -> list[str]:
    return [v["rule"] for v in result[1] if v["status"] == "IssuesFound"]


def explain(result: tuple[int, list[dict]]) -> str:
    return "\n".join(f"{v['rule']}: {v['message']}" for v in result[1] if v["status"] == "IssuesFound")


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_training_gets_no_issues(name: str, verdicts: dict[str, tuple[int, list[dict]]]) -> None:
    rc, found = verdicts[name]
    assert rc == 0 and not issues(verdicts[name]), explain(verdicts[name])
    judged = {v["rule"] for v in found if v["status"] == "NoIssuesFound"}
    assert JUDGED_ON_HEALTHY <= judged, JUDGED_ON_HEALTHY - judged


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_training_is_named_by_its_rule(name: str, verdicts: dict[str, tuple[int, list[dict]]]) -> None:
    expected = SCENARIOS[name][0]
    rc, _ = verdicts[name]
    found = issues(verdicts[name])
    assert rc == 1 and expected in found, explain(verdicts[name])
    assert len(set(found) - {expected}) <= 1, explain(verdicts[name])


def test_relu_outputs_are_found_by_module_type(corpus_runs: dict[str, Path]) -> None:
    for name in ("dead_relu_sequential", "dead_relu_save_all"):
        relu = ts.create_trial(corpus_runs[name]).tensor_names(collection="relu_output")
        assert relu == ["1_output_0", "3_output_0"], (name, relu)  # nn.Sequential: no module is named "relu"


def test_literal_parameter_restores_smdebugs_false_alarms(corpus_runs: dict[str, Path]) -> None:
    run = corpus_runs["mlp_sgd_momentum"]
    for rule in ("LossNotDecreasing", "Overtraining"):
        proc = cli(run, "--rule", rule, "--param", f"{rule}.literal=true")
        assert proc.returncode == 1, (rule, proc.stdout[-1000:], proc.stderr[-1000:])
        proc = cli(run, "--rule", rule)
        assert proc.returncode == 0, (rule, proc.stdout[-1000:])


def test_verdict_steps_and_message_agree_and_name_the_mode(verdicts: dict[str, tuple[int, list[dict]]]) -> None:
    (lnd,) = [v for v in verdicts["lr_nan"][1] if v["rule"] == "LossNotDecreasing"]
    assert f"first at step {lnd['first_trigger_step']}" in lnd["message"] and "TRAIN" in lnd["message"]
    assert f"at step {lnd['first_trigger_step']}:" in lnd["message"]


def test_live_verdicts_agree_with_the_cli(tmp_path: Path) -> None:
    from corpus import _kill_relus, mlp, teacher_task, train
    from torch.optim import Adam

    from trainspect.rules import DeadRelu, LossNotDecreasing, Overfit, Overtraining, VanishingGradient

    rules = [VanishingGradient(), LossNotDecreasing(), Overfit(), Overtraining(), DeadRelu()]
    model = mlp([16, 64, 64, 4])
    _kill_relus(model)
    train(tmp_path / "run", model, Adam(model.parameters(), lr=1e-3), teacher_task(seed=14), steps=200, rules=rules)
    names = {r.name for r in rules}  # the report adds the other applicable rules at close: compare the hook's own
    live = {v.rule: v.status.value for v in ts.rules.load_verdicts(tmp_path / "run") if v.rule in names}
    proc = cli(tmp_path / "run", *[arg for r in rules for arg in ("--rule", r.name)])
    assert live == {v["rule"]: v["status"] for v in json.loads(proc.stdout)}
    assert live["DeadRelu"] == "IssuesFound" and live["VanishingGradient"] == "NoIssuesFound"
