"""A second stop signal during the close does not cut it (issue 30): the end marker and every step are written."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from _support.package import PACKAGE_ROOT

import trainspect as ts

ROOT = Path(__file__).resolve().parents[2]

# Trains until stopped, printing each step once it completed (the hook has recorded it).
SCRIPT = textwrap.dedent(
    """
    import os, sys, torch, trainspect as ts
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(sys.argv[1], include_collections=["weights", "gradients", "losses"],
                         save_config=ts.SaveConfig(save_interval=1), rules=[ts.rules.ExplodingTensor()])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    print("pid", os.getpid(), flush=True)
    for step in range(100000):
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        print("step", step, flush=True)
    """
)
AFTER_STEPS = 40  # the first signal goes after this many printed steps


def _start(tmp_path: Path, wrapped: bool) -> tuple[subprocess.Popen[str], Path]:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    out = tmp_path / "run"
    command = [sys.executable, str(script), str(out)]
    if wrapped:
        command = [sys.executable, "-m", "trainspect.cli", "run", "--out", str(out), "--", *command]
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    env.pop("TRAINSPECT_TESTING", None)  # a run as users start it: a close's warnings are lines, not errors
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    return proc, out


def _steps_then(proc: subprocess.Popen[str], stop: object) -> tuple[int, list[int]]:
    """Read the child's pid and its printed steps until AFTER_STEPS, then call ``stop(pid)``."""
    assert proc.stdout is not None
    pid, printed = 0, []
    for line in proc.stdout:
        word, value = line.split()
        if word == "pid":
            pid = int(value)
            continue
        printed.append(int(value))
        if len(printed) >= AFTER_STEPS:
            break
    assert len(printed) >= AFTER_STEPS, proc.communicate(timeout=120)[1]
    stop(pid)  # type: ignore[operator]
    return pid, printed


def _finish(proc: subprocess.Popen[str], out: Path, printed: list[int]) -> str:
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err
    assert (out / "training_job_end.ts").exists(), err
    steps = ts.create_trial(str(out)).steps()
    assert set(printed) <= set(steps), (sorted(set(printed) - set(steps)), err)
    assert "Traceback" not in err, err
    return err


def _twice(*pids: int) -> None:
    for pid in pids:
        os.kill(pid, signal.SIGTERM)
    time.sleep(0.01)
    for pid in pids:
        os.kill(pid, signal.SIGTERM)


def test_a_second_sigterm_during_the_close_does_not_cut_it(tmp_path):
    proc, out = _start(tmp_path, wrapped=False)
    _, printed = _steps_then(proc, _twice)
    err = _finish(proc, out, printed)
    assert "finishing the close first" in err


def test_a_signal_to_both_wrapper_and_child_is_not_delivered_twice(tmp_path):
    proc, out = _start(tmp_path, wrapped=True)
    # as systemd's control-group kill: the wrapper and the training script both get SIGTERM, then again
    _, printed = _steps_then(proc, lambda pid: _twice(proc.pid, pid))
    _finish(proc, out, printed)


def test_a_third_signal_cuts_the_close_with_one_line(tmp_path):
    proc, out = _start(tmp_path, wrapped=False)

    def thrice(pid: int) -> None:
        for _ in range(3):
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.005)

    _steps_then(proc, thrice)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err
    cut = [line for line in err.splitlines() if "the close was cut" in line]
    if not (out / "training_job_end.ts").exists():  # the close may still have ended before the third signal
        assert len(cut) == 1, err
        assert str(out) in cut[0]


# A hook whose writer never gets idle (a stuck disk), and a SIGTERM handler of the user's, chained to.
STUCK = textwrap.dedent(
    """
    import logging, os, signal, sys, time
    logging.basicConfig(format="%(message)s")
    from trainspect.hooks import shutdown
    shutdown._FLUSH_SECONDS = 0.3  # the bound on the flush before a chained handler runs (10 s)

    class StuckHook:
        out_dir = sys.argv[1]
        def flush(self, timeout):
            print(f"flush {timeout}", flush=True)
            time.sleep(timeout)
            return False  # not everything is on disk
        def close(self):
            print("closed", flush=True)

    def users_handler(signum, frame):
        print("user's handler", flush=True)
        sys.exit(3)

    signal.signal(signal.SIGTERM, users_handler)
    shutdown.CLOSERS.track(StuckHook())
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(30)
    """
)


def test_a_flush_past_its_bound_is_named_and_the_users_handler_still_runs(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    env.pop("TRAINSPECT_TESTING", None)
    done = subprocess.run(
        [sys.executable, str(script), str(tmp_path / "run")], capture_output=True, text=True, env=env, timeout=120
    )
    flushes = [float(x.split()[1]) for x in done.stdout.splitlines() if x.startswith("flush ")]
    assert flushes and all(t <= 0.3 for t in flushes), done.stdout  # the flush was bounded, not waited for 30 s
    assert done.returncode == 3, done.stderr  # the process ends as the user's handler says
    others = [x for x in done.stdout.splitlines() if not x.startswith("flush ")]
    assert others[:2] == ["user's handler", "closed"]  # then the hook is closed at exit
    (line,) = [x for x in done.stderr.splitlines() if "not flushed" in x]
    assert f"{tmp_path / 'run'} was not flushed within 0.3 s" in line
    assert "steps still queued" in line and "the end marker" in line
