"""``trainspect run``: stop signals reach the training job, the wrapper ends as the job ended, bad input is refused."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from _support.package import PACKAGE_ROOT

ROOT = Path(__file__).resolve().parent.parent

# The training stand-in: starts a worker in its process group (as a DataLoader does), records both pids, then
# works until stopped. ``mode`` says what it does on a stop signal.
CHILD = textwrap.dedent("""
    import os, signal, subprocess, sys, time
    pids, mode = sys.argv[1], sys.argv[2]
    # a helper process of the job (as a DataLoader worker), started before the test signals the job: it leaves
    # SIGINT to its parent (a SIGINT while it started Python printed a traceback), and its parent ends it
    worker = subprocess.Popen([sys.executable, "-c", "import signal, sys, time\\n"
                               "signal.signal(signal.SIGINT, signal.SIG_IGN)\\nopen(sys.argv[1], 'w').close()\\n"
                               "while True: time.sleep(0.05)", pids + ".worker"])
    while not os.path.exists(pids + ".worker"):
        time.sleep(0.01)
    if mode == "handler":
        def stop(signum, frame):
            open(pids + ".got", "w").write(str(signum))
            worker.terminate(); worker.wait()
            sys.exit(7)
        signal.signal(signal.SIGTERM, stop)
    with open(pids + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {worker.pid}")
    os.replace(pids + ".tmp", pids)
    try:
        while True:
            time.sleep(0.05)
    except KeyboardInterrupt:
        worker.terminate(); worker.wait()
        print("child: interrupted", file=sys.stderr)
        sys.exit(130)
""")


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie has ended; only its parent's wait is missing


def _wrapper(tmp_path: Path, *args: str, disable: bool = True) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    if disable:
        env["TRAINSPECT_DISABLE"] = "1"  # the wrapper is under test here, not the in-process hook

    def interactive_signals() -> None:
        # as from a terminal: a background job of a script starts with SIGINT ignored, and a suite run under nohup
        # passes SIGHUP ignored on (which trainspect run rightly keeps ignored for its child, as nohup asks)
        for signum in (signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)

    return subprocess.Popen(
        [sys.executable, "-m", "trainspect.cli", "run", "--out", str(tmp_path / "run"), *args],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interactive_signals,
    )


def _started(proc: subprocess.Popen[str], pids: Path) -> list[int]:
    deadline = time.monotonic() + 120
    while not pids.exists():
        assert proc.poll() is None, proc.communicate()[1]
        assert time.monotonic() < deadline, "the child never started"
        time.sleep(0.05)
    return [int(p) for p in pids.read_text().split()]


def _gone(pids: list[int]) -> bool:
    deadline = time.monotonic() + 30
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(_alive(p) for p in pids)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP])
def test_a_stop_signal_ends_the_child_group_and_the_wrapper_ends_by_it(tmp_path: Path, signum: int) -> None:
    script, pids = tmp_path / "train.py", tmp_path / "pids"
    script.write_text(CHILD)
    proc = _wrapper(tmp_path, "--", sys.executable, str(script), str(pids), "plain")
    children = _started(proc, pids)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == -signum, err
    assert _gone(children), "the training process or its worker outlived the wrapper"
    assert "Traceback" not in err


def test_the_child_handles_sigterm_and_the_wrapper_exits_with_its_code(tmp_path: Path) -> None:
    script, pids = tmp_path / "train.py", tmp_path / "pids"
    script.write_text(CHILD)
    proc = _wrapper(tmp_path, "--", sys.executable, str(script), str(pids), "handler")
    children = _started(proc, pids)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 7, err
    assert Path(str(pids) + ".got").read_text() == str(int(signal.SIGTERM))
    assert _gone(children)


def test_ctrl_c_on_the_wrapper_interrupts_the_child_without_a_wrapper_traceback(tmp_path: Path) -> None:
    script, pids = tmp_path / "train.py", tmp_path / "pids"
    script.write_text(CHILD)
    proc = _wrapper(tmp_path, "--", sys.executable, str(script), str(pids), "plain")
    children = _started(proc, pids)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "child: interrupted" in err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err
    assert _gone(children)


def test_sigterm_stops_a_real_instrumented_training(tmp_path: Path) -> None:
    script, pids = tmp_path / "train.py", tmp_path / "pids"
    script.write_text(
        textwrap.dedent(f"""
        import os, torch
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        for step in range(100000):
            opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
            if step == 5:
                open({str(pids)!r}, "w").write(str(os.getpid()))
    """)
    )
    proc = _wrapper(tmp_path, "--", sys.executable, str(script), disable=False)
    children = _started(proc, pids)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGTERM, err  # the wrapper ends by the signal that ended its child
    assert _gone(children)
    assert (tmp_path / "run").is_dir()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--profiler-interval", "123"], ["--profiler-interval", "123", "100, 200, 500"]),
        (["--config", "{missing}"], ["--config", "missing.json"]),
        (["--config", "{bad_value}"], ["save_interval", "'x'"]),
        (["--config", "{bad_json}"], ["not valid JSON"]),
    ],
)
def test_bad_flags_and_configs_are_refused_before_the_child_starts(
    tmp_path: Path, args: list[str], names: list[str]
) -> None:
    files = {"missing": tmp_path / "missing.json", "bad_value": tmp_path / "v.json", "bad_json": tmp_path / "j.json"}
    files["bad_value"].write_text('{"HookParameters": {"save_interval": "x"}}')
    files["bad_json"].write_text('{"HookParameters": ')
    marker = tmp_path / "started"
    args = [a.format(**files) for a in args]
    proc = _wrapper(tmp_path, *args, "--", sys.executable, "-c", f"open({str(marker)!r}, 'w')")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("trainspect run: "), err
    assert all(n in lines[0] for n in names), lines[0]
    assert not marker.exists() and not (tmp_path / "run").exists()


def test_a_missing_command_or_unusable_out_dir_is_one_line_and_exit_2(tmp_path: Path) -> None:
    proc = _wrapper(tmp_path, "--", "/nonexistent/cmd")
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2
    assert err.strip().splitlines() == ["trainspect run: command '/nonexistent/cmd' not found or not executable"]

    blocker = tmp_path / "file"
    blocker.write_text("")
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT)}
    for out in (blocker, blocker / "run"):
        proc2 = subprocess.run(
            [sys.executable, "-m", "trainspect.cli", "run", "--out", str(out), "--", "true"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert proc2.returncode == 2
        lines = proc2.stderr.strip().splitlines()
        assert len(lines) == 1 and "--out" in lines[0] and "not a directory" in lines[0], proc2.stderr


def test_in_a_terminal_the_training_owns_it_and_gets_ctrl_c(tmp_path: Path) -> None:
    """As a shell does for a job: the training reads the terminal (``input()``, ``breakpoint()``), Ctrl-C reaches it."""
    import pty
    import select

    code = "import sys, time\nprint('ready', flush=True)\nline = sys.stdin.readline()\n"
    code += (  # 'read' is printed inside the try: a Ctrl-C right after it is the training's to catch
        "try:\n    print('read', repr(line), flush=True)\n    time.sleep(60)\n"
        "except KeyboardInterrupt:\n    print('interrupted', flush=True)\n    sys.exit(130)\n"
    )
    argv = [
        sys.executable,
        "-m",
        "trainspect.cli",
        "run",
        "--out",
        str(tmp_path / "run"),
        "--",
        sys.executable,
        "-c",
        code,
    ]
    environ = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "TRAINSPECT_DISABLE": "1"}
    pid, fd = pty.fork()
    if pid == 0:  # the wrapper, on a new terminal as from an interactive shell
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.execve(sys.executable, argv, environ)
    seen = b""

    def until(token: bytes) -> None:
        nonlocal seen
        deadline = time.monotonic() + 120
        while token not in seen and time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    seen += os.read(fd, 4096)
                except OSError:
                    return

    try:
        until(b"ready")
        os.write(fd, b"hello\n")
        until(b"read 'hello")
        os.write(fd, b"\x03")  # Ctrl-C typed in the terminal
        until(b"run directory")
        _, status = os.waitpid(pid, 0)
    finally:
        os.close(fd)
    text = seen.decode(errors="replace")
    assert "read 'hello\\n'" in text and "interrupted" in text, text
    assert "Traceback" not in text and "KeyboardInterrupt" not in text
    assert os.waitstatus_to_exitcode(status) == 130


def test_a_job_that_trained_nothing_is_told_so_once(tmp_path: Path) -> None:
    """The script and its helper process import torch and train nothing the hook sees: one line for the job."""
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent("""
        import subprocess, sys, torch
        with torch.no_grad():
            torch.nn.Linear(4, 2).forward(torch.ones(1, 4))
        subprocess.run([sys.executable, "-c", "import torch"], check=True)
    """)
    )
    proc = _wrapper(tmp_path, "--", sys.executable, str(script), disable=False)
    _, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, err
    assert err.count("nothing was recorded") == 1, err
    assert "no process of the job ran a training step" in err
