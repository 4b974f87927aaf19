"""A stop signal that lands inside trainspect's own code waits for that code to return (the CI failure of stop 37).

A SIGTERM handled while ``Collector.begin_step`` had set its record but not yet opened the step made the close
refuse the transition: the hook was disabled, no end marker was written. The child below calls the real handler
at a chosen line of trainspect's code, as a signal arriving there would (the handler gets that frame).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _support.package import PACKAGE_ROOT

import trainspect as ts

ROOT = Path(__file__).resolve().parents[2]

# argv: out, how ("count": print the number of trainspect lines run in step 10; "at": the signal lands at line
# event N of trainspect's code from step 10 on; "stuck": it lands in trainspect code that does not return).
SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, time, types, torch, trainspect as ts
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    torch.set_num_threads(1)
    out, how, nth = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if how == "continue":
        def on_term(signum, frame):
            stack = []
            while frame is not None:
                stack.append(frame.f_globals.get("__name__", ""))
                frame = frame.f_back
            print("user handler", sum(name.startswith("trainspect.hooks") for name in stack), flush=True)
        signal.signal(signal.SIGTERM, on_term)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(out, include_collections=["weights", "gradients", "losses"],
                         save_config=ts.SaveConfig(save_interval=1), rules=[ts.rules.ExplodingTensor()])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(16, 8), torch.randn(16, 1)
    seen = [0]

    def land(frame):
        sys.settrace(None)
        frame.f_trace = None
        signal.getsignal(signal.SIGTERM)(signal.SIGTERM, frame)  # as the signal arriving at this line

    def local(frame, event, arg):
        if event == "line":
            seen[0] += 1
            if seen[0] == nth:
                land(frame)
                return frame.f_trace
        return local

    def calls(frame, event, arg):
        name = frame.f_globals.get("__name__") or ""
        return local if name.startswith("trainspect.") and frame.f_code.co_name != "_no_new_frames" else None

    stuck = types.ModuleType("trainspect.hooks.stuck")  # trainspect code that does not return for a minute
    exec("import time\\ndef wait(land):\\n    land(sys._getframe())\\n    end = time.monotonic() + 60\\n"
         "    while time.monotonic() < end:\\n        time.sleep(0.01)\\n", stuck.__dict__)
    stuck.sys = sys
    for step in range(30):
        if step == 10 and how in ("count", "at", "continue"):
            sys.settrace(calls)
        if step == 10 and how == "stuck":
            print("stuck", flush=True)
            stuck.wait(land)
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
        if step == 10 and how == "count":
            sys.settrace(None)
            print("lines", seen[0], flush=True)
        print("step", step, flush=True)
    """
)


def _run(tmp_path: Path, name: str, how: str, nth: int = 0) -> subprocess.Popen[str]:
    script = tmp_path / f"train_{name}.py"  # one each: children start while the next is written (an empty read)
    script.write_text(SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    env.pop("TRAINSPECT_TESTING", None)  # a run as users start it
    command = [sys.executable, str(script), str(tmp_path / name), how, str(nth)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _steps(stdout: str) -> list[int]:
    return [int(line.split()[1]) for line in stdout.splitlines() if line.startswith("step ")]


def _assert_closed_whole(proc: subprocess.Popen[str], out: Path) -> None:
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == -signal.SIGTERM, err
    assert "internal error" not in err and "Traceback" not in err, err
    assert (out / "training_job_end.ts").exists(), err
    assert set(_steps(stdout)) <= set(ts.create_trial(str(out)).steps()), err


def test_a_signal_at_any_line_of_trainspect_code_still_closes_the_run_whole(tmp_path):
    counting = _run(tmp_path, "count", "count")
    stdout, err = counting.communicate(timeout=300)
    assert counting.returncode == 0, err
    lines = int(next(line.split()[1] for line in stdout.splitlines() if line.startswith("lines")))
    assert lines > 50, stdout  # one step runs through begin/end of the step, staging, the writer's queue
    # the first lines of the step (the step boundary: begin_step ending the last step and opening the next), then
    # positions spread over the rest of it
    positions = sorted({*range(1, 31, 3), *range(31, lines + 1, max(1, (lines - 31) // 8))})
    for first in range(0, len(positions), 4):  # four children at a time
        group = positions[first : first + 4]
        procs = {n: _run(tmp_path, f"at{n}", "at", n) for n in group}
        for n, proc in procs.items():
            _assert_closed_whole(proc, tmp_path / f"at{n}")


def test_a_signal_inside_trainspect_code_that_does_not_return_is_handled_within_the_bound(tmp_path):
    proc = _run(tmp_path, "stuck", "stuck")
    _assert_closed_whole(proc, tmp_path / "stuck")  # within 2 s of the signal, not after the minute


@pytest.mark.parametrize("nth", [5, 40])
def test_a_users_handler_runs_after_trainspect_code_returned_and_training_goes_on(tmp_path, nth):
    proc = _run(tmp_path, "go_on", "continue", nth)
    stdout, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "user handler 0" in stdout, stdout  # no trainspect.hooks frame under the user's handler
    assert _steps(stdout) == list(range(30))
    assert ts.create_trial(str(tmp_path / "go_on")).steps() == list(range(30))
