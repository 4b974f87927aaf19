"""Every script in examples/ runs, as a user would run it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import trainspect as ts

ROOT = Path(__file__).resolve().parent.parent


def _run(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)


def test_demo_tells_caught_then_fixed_then_compared(tmp_path: Path) -> None:
    from trainspect.report.context import ReportContext
    from trainspect.rules.profiler import Dataloader

    out = tmp_path / "demo"
    proc = _run(["examples/demo.py", "--out", str(out)], tmp_path)  # as users run it: long enough for every rule
    assert proc.returncode == 0, proc.stderr
    bad, good = out / "diverged", out / "fixed"
    # 1. the learning rate far too high: caught live, training stopped by StopTraining
    caught = {v.rule: v for v in ts.rules.load_verdicts(bad)}
    assert (
        caught["ExplodingTensor"].status is ts.rules.Status.ISSUES_FOUND and caught["ExplodingTensor"].source == "live"
    )
    assert "training stopped by trainspect: rule ExplodingTensor found issues" in proc.stdout
    assert len(ts.create_trial(bad).steps(ts.modes.TRAIN)) < 300
    # 2. the fixed run: every step, no issues from any rule (tensor rules live, profiler rules for the report)
    fixed = ts.rules.load_verdicts(good)
    assert [v.rule for v in fixed if v.status is ts.rules.Status.ISSUES_FOUND] == []
    assert {"ExplodingTensor", "VanishingGradient", "LossNotDecreasing", "InputBottleneck"} <= {v.rule for v in fixed}
    assert len(ts.create_trial(good).steps(ts.modes.TRAIN)) == 300
    assert {"Dataloader", "StepOutlier"} <= {v.rule for v in fixed}
    # Dataloader judges only runs with > 10 s of loading (a loaded machine's, not a quiet one's); its outcome must
    # not depend on that: the input wait stays below the share at which it asks for more loader processes.
    wait = next(v for v in fixed if v.rule == "InputBottleneck").details["worker_0"]["input_wait_percent"]
    assert wait < Dataloader().min_wait_percent, wait
    assert "trainspect.issues = ''" in proc.stdout and "trainspect.issues = 'ExplodingTensor" in proc.stdout
    # 3. the comparison, and data in every profiler panel of both runs (no GPU on this machine)
    assert "unlike runs: A diverged (loss NaN from step" in proc.stdout and (out / "compare.html").exists()
    assert "stopped by StopTraining at step" in proc.stdout and "not offered: unlike runs" in proc.stdout
    for run in (bad, good):
        ctx = ReportContext.load(run, evaluate_profiler_rules=False)
        assert all(ctx.has(part) for part in ("system", "steps", "operators", "python", "dataloader", "tensors"))
        assert len(next(iter(ctx.profiler.system.values()))) >= 3
        assert (run / "report.html").exists()
    assert "tensorboard --logdir" in proc.stdout


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
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert str(out) in proc.stderr
    trial = ts.create_trial(out)
    assert trial.tensor_names(collection="losses") == ["CrossEntropyLoss_output_0", "loss"]
    assert trial.steps(ts.modes.TRAIN) == list(range(40))
