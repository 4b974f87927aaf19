"""A hook the script never closes, and a job stopped by a signal, still leave a complete run (issue 14)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import trainspect as ts

SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, torch, trainspect as ts
    # The signals at their usual actions, as in a terminal: under nohup, or in the background of a script, the
    # parent passes SIGHUP or SIGINT on ignored, and trainspect rightly leaves an ignored signal alone.
    signal.signal(signal.SIGHUP, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    torch.set_num_threads(1)
    out, stop_at, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    if how == "user-exits":
        def on_term(signum, frame):
            open(os.path.join(out + ".user"), "w").write("called")
            raise SystemExit(3)
        signal.signal(signal.SIGTERM, on_term)
    if how == "user-continues":
        def on_term(signum, frame):
            open(os.path.join(out + ".user"), "w").write("called")
        signal.signal(signal.SIGTERM, on_term)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(out, include_collections=["weights", "gradients", "losses"],
                         save_config=ts.SaveConfig(save_interval=1), rules=[ts.rules.ExplodingTensor()])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    for step in range(60):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if step == stop_at:
            os.kill(os.getpid(), getattr(signal, how.upper(), signal.SIGTERM))
    print("finished", flush=True)
    """
)


def _run(tmp_path: Path, stop_at: int, how: str) -> tuple[subprocess.CompletedProcess[str], Path]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(script), str(out), str(stop_at), how], capture_output=True, text=True, timeout=300
    )  # the timeout only stops a hang: a loaded machine takes several times the usual 10 s
    return proc, out


def _assert_complete(out: Path, last_step: int) -> None:
    trial = ts.create_trial(str(out))
    assert trial.steps(mode=ts.modes.TRAIN) == list(range(last_step + 1))
    assert trial.tensor("MSELoss_output_0").value(last_step) is not None
    assert trial.tensor("gradient/Sequential_0.weight").steps()[-1] == last_step
    assert (out / "training_job_end.ts").exists()
    verdicts = json.loads((out / "rules" / "verdicts.json").read_text())["verdicts"]
    assert {v["rule"] for v in verdicts} >= {"ExplodingTensor"}
    assert all(v["status"] != "InProgress" for v in verdicts), verdicts


def test_a_hook_never_closed_is_closed_at_exit(tmp_path):
    proc, out = _run(tmp_path, -1, "none")
    assert proc.returncode == 0, proc.stderr
    assert "finished" in proc.stdout
    _assert_complete(out, 59)


@pytest.mark.parametrize("how", ["sigterm", "sighup"])
def test_a_terminating_signal_closes_the_run_and_the_process_still_dies_of_it(tmp_path, how):
    proc, out = _run(tmp_path, 30, how)
    assert proc.returncode == -getattr(signal, how.upper()), proc.stderr
    assert "finished" not in proc.stdout
    assert "Traceback" not in proc.stderr
    _assert_complete(out, 30)


def test_ctrl_c_raises_keyboard_interrupt_as_usual_and_the_run_is_complete(tmp_path):
    proc, out = _run(tmp_path, 30, "sigint")
    assert "KeyboardInterrupt" in proc.stderr
    # CPython ends by SIGINT after an uncaught KeyboardInterrupt only when no code runs at exit; here the hook
    # closing at exit imports and runs the rules and the report, and CPython 3.11 then exits with status 1
    assert proc.returncode == 1, proc.stderr
    _assert_complete(out, 30)


def test_a_users_sigterm_handler_still_runs_and_decides(tmp_path):
    proc, out = _run(tmp_path, 30, "user-exits")
    assert proc.returncode == 3, proc.stderr
    assert Path(str(out) + ".user").read_text() == "called"
    _assert_complete(out, 30)


def test_a_users_handler_that_lets_training_go_on_keeps_recording(tmp_path):
    proc, out = _run(tmp_path, 30, "user-continues")
    assert proc.returncode == 0, proc.stderr
    assert Path(str(out) + ".user").read_text() == "called"
    assert "finished" in proc.stdout
    _assert_complete(out, 59)


def test_forked_dataloader_workers_leave_the_parents_run_alone(tmp_path):
    script = tmp_path / "loader.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys, torch, trainspect as ts
            from torch.utils.data import DataLoader, TensorDataset
            torch.set_num_threads(1)
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            hook = ts.torch.Hook(sys.argv[1], include_collections=["losses"])
            hook.register_module(model)
            data = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, num_workers=2,
                              multiprocessing_context="fork")
            for epoch in range(2):
                for x, y in data:
                    opt.zero_grad()
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    hook.record_loss("MSELoss_output_0", loss)
                    loss.backward()
                    opt.step()
            """
        )
    )
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(script), str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "trainspect" not in proc.stderr
    trial = ts.create_trial(str(out))
    assert trial.steps() == list(range(16))
    assert (out / "training_job_end.ts").exists()
