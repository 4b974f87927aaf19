"""Closing open hooks when the process ends: at interpreter exit and on SIGTERM, SIGHUP and SIGINT.

A hook that the script never closes (most SageMaker example scripts end without ``hook.close()``), a job stopped by
Kubernetes, Slurm or SageMaker (SIGTERM), a closed terminal (SIGHUP) or Ctrl-C would otherwise lose the steps still
queued for the background writer, the end marker and the final verdicts.

- At interpreter exit (also after an uncaught ``KeyboardInterrupt``) every open hook is closed, newest first.
- A signal whose handler is the default action (the process would die without cleaning up) gets a handler that
  closes the open hooks, then restores the default action and sends the signal again: the process ends as it would
  have without trainspect (killed by that signal; the parent sees the same status).
- A handler the user or a framework installed before trainspect is chained to: the hooks are flushed (what was
  recorded is on disk), then that handler runs unchanged; the hooks close at exit or when it ends the process.
- An ignored signal stays ignored; Python's own SIGINT handler (``KeyboardInterrupt``) is left alone, since the
  exit that follows closes the hooks.
- A forked child (a DataLoader worker) inherits the handlers but never closes its parent's hooks; a hook whose run
  opens in a child (Lightning's ``ddp_fork``) is that child's, closed when it ends (``multiprocessing`` children end
  in ``os._exit``, after their finalizers, not ``atexit``).

Handlers are installed by the first hook that starts in the main thread, never at import. ``CLOSERS`` is the one
registry of the process (signals and ``atexit`` are process-wide themselves).
"""

from __future__ import annotations

import atexit
import logging
import multiprocessing
import multiprocessing.util
import os
import signal
import threading
import time
from types import FrameType
from typing import Any, Protocol

__all__ = ["Closable", "ShutdownCloser", "CLOSERS"]

log = logging.getLogger(__name__)

_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")
_FLUSH_SECONDS = 10.0  # bound on the flush before a chained handler runs


class Closable(Protocol):
    """What the registry closes: a hook or an autolog patch set (a ``flush(timeout)`` method is used when present)."""

    def close(self) -> None:
        """Finish and release everything (idempotent)."""


class ShutdownCloser:
    """The open hooks of this process, closed at exit or on a terminating signal."""

    def __init__(self) -> None:
        self._open: list[Closable] = []
        self._lock = threading.Lock()
        self._pid: int | None = None
        self._previous: dict[int, Any] = {}

    def track(self, obj: Closable) -> None:
        """Close ``obj`` when the process ends, unless it was closed before (see :meth:`untrack`)."""
        with self._lock:
            if self._pid != os.getpid():
                self._open = []  # a forked child: what it inherited are its parent's hooks
            if not any(o is obj for o in self._open):
                self._open.append(obj)
        if self._pid != os.getpid():
            self._install()

    def untrack(self, obj: Closable) -> None:
        """Forget ``obj`` (it was closed by the user)."""
        with self._lock:
            self._open = [o for o in self._open if o is not obj]

    def close_all(self) -> None:
        """Close every open hook, newest first (only in the process that opened them)."""
        if self._pid != os.getpid():
            return
        while True:
            with self._lock:
                if not self._open:
                    return
                obj = self._open.pop()
            try:
                obj.close()
            except Exception as exc:  # closing one hook must not keep the others open
                log.warning("trainspect: closing %s at exit failed: %s", type(obj).__name__, exc)

    def _flush_all(self) -> None:
        deadline = time.monotonic() + _FLUSH_SECONDS
        for obj in list(self._open):
            flush = getattr(obj, "flush", None)
            if flush is None:
                continue
            try:
                flush(max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                log.warning("trainspect: flushing %s on a signal failed: %s", type(obj).__name__, exc)

    # --- installation ----------------------------------------------------------------------------------------
    def _install(self) -> None:
        self._pid = os.getpid()
        self._previous.clear()
        atexit.register(self.close_all)
        if multiprocessing.parent_process() is not None:
            # a multiprocessing child (Lightning's ddp_fork, a Pool worker) ends in os._exit, after its finalizers
            multiprocessing.util.Finalize(None, self.close_all, exitpriority=100)
        if threading.current_thread() is not threading.main_thread():
            return  # signal handlers can only be set from the main thread; atexit still closes the hooks
        for name in _SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue  # no SIGHUP on Windows
            current = signal.getsignal(signum)
            if current in (signal.SIG_IGN, signal.default_int_handler) or current is None:
                continue  # ignored, Python's KeyboardInterrupt, or set outside Python: leave it alone
            self._previous[signum] = current
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        mine = self._pid == os.getpid()
        if callable(previous):
            if mine:
                self._flush_all()
            previous(signum, frame)
            return
        if mine:
            log.warning("trainspect: %s received; closing the run before the process ends", signal.Signals(signum).name)
            self.close_all()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


CLOSERS = ShutdownCloser()
