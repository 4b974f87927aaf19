"""The child process of ``trainspect run``: started in its own process group, sent every stop signal, awaited.

The wrapper stands in for the training job: SIGTERM, SIGINT and SIGHUP sent to it go to the child's whole
process group (the training script and its DataLoader workers), and the wrapper ends as the child ended.
When the wrapper owns the terminal, the terminal is handed to the child's group for the run (as a shell does
for a job), so Ctrl-C and ``breakpoint()`` reach the training script directly, then taken back.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType

__all__ = ["FORWARDED_SIGNALS", "run_child", "exit_like"]

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


def _foreground_tty() -> int | None:
    """The terminal's descriptor when this process's group owns it, else None."""
    try:
        fd = sys.stdin.fileno()
        if os.isatty(fd) and os.tcgetpgrp(fd) == os.getpgrp():
            return fd
    except (OSError, ValueError, AttributeError):
        pass
    return None


def _give_terminal(fd: int | None, pgid: int) -> None:
    """Make ``pgid`` the terminal's foreground group (SIGTTOU ignored meanwhile, as shells do)."""
    if fd is None:
        return
    previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
    try:
        os.tcsetpgrp(fd, pgid)
    except OSError:
        pass
    finally:
        signal.signal(signal.SIGTTOU, previous)


def _child_setup(tty: int | None) -> Callable[[], None]:
    def setup() -> None:  # runs in the child between fork and exec
        os.setpgid(0, 0)
        _give_terminal(tty, os.getpgrp())

    return setup


def _send(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signum)


@contextlib.contextmanager
def _forwarding(target: list[int]) -> Iterator[list[int]]:
    """Forward the stop signals to the process group ``target[0]`` once set; keep earlier ones pending.

    Python handlers revert to the default at ``exec``, so the child starts with the usual dispositions.
    """
    pending: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if target:
            _send(target[0], signum)
        else:
            pending.append(signum)

    # A signal ignored here (nohup, a background job's SIGINT) stays ignored by the child, as without trainspect.
    kept = [sig for sig in FORWARDED_SIGNALS if signal.getsignal(sig) is not signal.SIG_IGN]
    previous = {sig: signal.signal(sig, forward) for sig in kept}
    try:
        yield pending
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def run_child(command: Sequence[str], environ: Mapping[str, str]) -> int:
    """Run ``command`` in its own process group, forwarding the stop signals, and return its exit status.

    Returns:
        The child's exit code, or minus the signal number that ended it (as :attr:`subprocess.Popen.returncode`).

    Raises:
        OSError: the command could not be started.
    """
    tty = _foreground_tty()
    target: list[int] = []
    with _forwarding(target) as pending:
        try:
            child = subprocess.Popen(list(command), env=dict(environ), preexec_fn=_child_setup(tty))
            target.append(child.pid)
            for signum in pending:
                _send(child.pid, signum)
            return child.wait()
        finally:
            _give_terminal(tty, os.getpgrp())


def exit_like(returncode: int) -> int:
    """End this process as the child ended: by the same signal when a signal killed it.

    Returns:
        The exit status to use when the signal did not end this process (128 + the signal number), else
        ``returncode`` itself.
    """
    if returncode >= 0:
        return returncode
    signum = -returncode
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    with contextlib.suppress(OSError, ValueError):
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
    return 128 + signum
