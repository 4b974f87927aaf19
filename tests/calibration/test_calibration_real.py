"""Issue 28: verdicts hold on real (small) third-party-style training code, judged by `trainspect rules DIR`.

The trainings (real_code.py) run once per module into a temporary directory; the input-bound loader and a
healthy profiled MLP run while a CPU hog keeps a core busy. Every run is then judged by the real CLI in a
subprocess, with every applicable rule at its defaults: healthy runs exit 0 with no IssuesFound, broken runs
exit 1 and name their rule.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from _support.package import PACKAGE_ROOT
from real_code import EVALUATES, LOADED, SCENARIOS
from test_calibration import JUDGED_ON_HEALTHY, issues

import trainspect as ts
from trainspect.exceptions import NotARunDirectory

HEALTHY = [name for name, (expected, _) in SCENARIOS.items() if expected is None]
BROKEN = [name for name, (expected, _) in SCENARIOS.items() if expected is not None]
EXTRA_JUDGED = {
    "gcn_custom_names": {"WeightUpdateRatio"},  # `kernel` is a weight: the rule must look, not say NoData
    "mlp_sgd_loaded_machine": {"StepOutlier"},  # profiled beside the CPU hog
}


def judged_on(name: str) -> set[str]:
    """The rules that must have judged a healthy run: Overfit and Overtraining only where the code evaluates."""
    rules = set(JUDGED_ON_HEALTHY) if name in EVALUATES else JUDGED_ON_HEALTHY - {"Overfit", "Overtraining"}
    return rules | EXTRA_JUDGED.get(name, set())


def judge_all(runs: dict[str, Path]) -> dict[str, tuple[int, list[dict]]]:
    """Run the CLI over every run, two at a time; a run the CLI cannot judge gets one ``cli`` Error verdict."""
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
            found = json.loads(out) if out.strip() else [{"rule": "cli", "status": "Error", "message": err[-2000:]}]
            results[n] = (proc.returncode, found)
    return results


def explain(result: tuple[int, list[dict]]) -> str:
    return "\n".join(f"{v['rule']}: {v['message']}" for v in result[1] if v["status"] in ("IssuesFound", "Error"))


@pytest.fixture(scope="module")
def real_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("calibration_real")
    runs = {name: root / name for name in SCENARIOS}
    for name, (_, train) in SCENARIOS.items():
        if name not in LOADED:
            train(runs[name])
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        for name in LOADED:
            SCENARIOS[name][1](runs[name])
    finally:
        hog.kill()
        hog.wait(timeout=30)
    return runs


@pytest.fixture(scope="module")
def verdicts(real_runs: dict[str, Path]) -> dict[str, tuple[int, list[dict]]]:
    return judge_all(real_runs)


@pytest.mark.parametrize("name", HEALTHY)
def test_a_healthy_real_training_gets_no_issues(name: str, verdicts: dict[str, tuple[int, list[dict]]]) -> None:
    rc, found = verdicts[name]
    assert rc == 0 and not issues(verdicts[name]), explain(verdicts[name])
    judged = {v["rule"] for v in found if v["status"] == "NoIssuesFound"}
    missing = judged_on(name) - judged
    assert not missing, {v["rule"]: f"{v['status']}: {v['message']}" for v in found if v["rule"] in missing}


@pytest.mark.parametrize("name", BROKEN)
def test_a_broken_real_training_is_named_by_its_rule(name: str, verdicts: dict[str, tuple[int, list[dict]]]) -> None:
    expected = SCENARIOS[name][0]
    rc, found = verdicts[name]
    own = [f"{v['rule']} {v['status']}: {v['message']}" for v in found if v["rule"] == expected]
    assert rc == 1 and expected in issues(verdicts[name]), "\n".join([*own, explain(verdicts[name])])


def test_forward_calls_are_recorded(real_runs: dict[str, Path]) -> None:
    try:
        trial = ts.create_trial(real_runs["forward_forward"])
    except NotARunDirectory as exc:
        pytest.fail(f"layers trained through layer.forward(x): nothing recorded ({exc})")
    assert trial.steps(), "layers trained through layer.forward(x): no step recorded"
    assert trial.tensor_names(collection="losses"), "layers trained through layer.forward(x): no loss recorded"
