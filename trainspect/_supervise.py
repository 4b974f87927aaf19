"""The child process of ``trainspect run``: started in its own process group, sent every stop signal, awaited.

The wrapper stands in for the training job: SIGTERM, SIGINT and SIGHUP sent to it go to the child's whole
process group (the training script and its DataLoader workers), and the wrapper ends as the child ended.
When the wrapper owns the terminal, the terminal is handed to the child's group for the run (as a shell does
for a job), so Ctrl-C and ``breakpoint()`` reach the training script directly, then taken back.

A signal that reached the child too (a control-group kill by systemd or Slurm, ``pkill``, ``kill`` of both pids)
is not forwarded again: the child's trainspect notes each stop signal it gets on a pipe from the wrapper
(``signal.set_wakeup_fd``, written by the interpreter the moment the signal arrives), and the wrapper waits
:data:`NOTE_GRACE_S` for that note before it forwards.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import FrameType

from trainspect import env

__all__ = ["FORWARDED_SIGNALS", "NOTES_ENV", "run_child", "exit_like"]

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
NOTES_ENV = env.TRAINSPECT_SIGNAL_NOTES.name  # "<wrapper pid>:<fd>": where the child notes the stop signals it gets
NOTE_GRACE_S = 0.1  # how long the wrapper waits for the child's note before it forwards a signal


class _Notes:
    """The read end of the pipe the child notes its signals on; ``owed``: notes still due for forwarded ones."""

    def __init__(self) -> None:
        self.read, self.write = os.pipe()
        os.set_blocking(self.read, False)
        self.owed: dict[int, int] = {}

    def _drain(self) -> bytes:
        data = b""
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while chunk := os.read(self.read, 4096):
                data += chunk
        return data

    def child_got(self, signum: int) -> bool:
        """Whether the child noted ``signum`` itself (within the grace), beyond the notes of forwarded ones."""
        deadline = time.monotonic() + NOTE_GRACE_S
        while True:
            for byte in self._drain():
                if byte != signum:
                    continue
                if self.owed.get(signum, 0) > 0:
                    self.owed[signum] -= 1
                else:
                    return True
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            with contextlib.suppress(InterruptedError):
                select.select([self.read], [], [], left)

    def forwarded(self, signum: int) -> None:
        self.owed[signum] = self.owed.get(signum, 0) + 1

    def close(self) -> None:
        for fd in (self.read, self.write):
            with contextlib.suppress(OSError):
                os.close(fd)


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
def _forwarding(target: list[int], notes: _Notes) -> Iterator[list[int]]:
    """Forward the stop signals to the process group ``target[0]`` once set; keep earlier ones pending.

    A signal the child noted having got itself is not forwarded (see the module doc).

    Python handlers revert to the default at ``exec``, so the child starts with the usual dispositions.
    """
    pending: list[int] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        if target:
            if not notes.child_got(signum):
                _send(target[0], signum)
                notes.forwarded(signum)
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
    notes = _Notes()
    env = {**environ, NOTES_ENV: f"{os.getpid()}:{notes.write}"}
    with _forwarding(target, notes) as pending:
        try:
            child = subprocess.Popen(list(command), env=env, preexec_fn=_child_setup(tty), pass_fds=(notes.write,))
            target.append(child.pid)
            for signum in pending:
                _send(child.pid, signum)
            return child.wait()
        finally:
            _give_terminal(tty, os.getpgrp())
            notes.close()


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
