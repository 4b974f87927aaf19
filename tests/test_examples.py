"""Every script in examples/ runs, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trainspect as ts

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_demo_runs_and_prints_where_the_run_is(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    proc = _run(["examples/demo.py", "--out", str(out), "--steps", "60"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"run directory: {out}" in proc.stdout
    assert "tensorboard --logdir" in proc.stdout
    assert len(ts.create_trial(out).steps(ts.modes.TRAIN)) == 60


def test_manual_hook_example(tmp_path: Path) -> None:
    out = tmp_path / "manual"
    proc = _run(["examples/manual_hook.py", "--out", str(out), "--steps", "120"], tmp_path)
    assert proc.returncode == 0, proc.stderr
    trial = ts.create_trial(out)
    assert "gradient/Sequential_0.weight" in trial.tensor_names(collection="gradients")
    assert trial.tensor("Sequential_0.weight").steps(ts.modes.TRAIN) == [0, 25, 50, 75, 100]
    assert len(trial.steps(ts.modes.EVAL)) == 1


def test_unmodified_script_under_trainspect_run(tmp_path: Path) -> None:
    out = tmp_path / "zcc"
    cli = [str(Path(sys.executable).parent / "trainspect"), "run", "--out", str(out), "--"]
    proc = subprocess.run(
        [*cli, sys.executable, "examples/unmodified_train.py", "--steps", "40"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stderr
    trial = ts.create_trial(out)
    assert trial.tensor_names(collection="losses") == ["CrossEntropyLoss_output_0", "loss"]
    assert trial.steps(ts.modes.TRAIN) == list(range(40))
