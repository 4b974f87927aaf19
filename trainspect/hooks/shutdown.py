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
  The flush is bounded (10 s for all hooks); a hook not flushed by then is named in one warning (the steps still
  queued for its run directory may not be on disk) and the handler runs all the same.
- An ignored signal stays ignored; Python's own SIGINT handler (``KeyboardInterrupt``) is left alone, since the
  exit that follows closes the hooks.
- Once a close is under way (started by a signal, at exit, or by the script's ``close()``), SIGTERM, SIGHUP and
  SIGINT do not cut it: a second signal is held until the close ends (then handled as usual, unless the close
  was itself a signal's, whose process then dies of that first signal); a third ends the process at once, with
  one line saying what was not written.
- A signal that lands inside trainspect's own code (a step being opened or ended, a record being queued) is handled
  when that code returns to its caller (the framework or the script), so a close never sees a half-done step: the
  interrupted frame gets a trace function for its return (as ``pdb.set_trace`` does), held at most
  ``_DEFER_SECONDS``, after which the signal is handled where the code is.
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
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, Protocol

from trainspect import env

__all__ = ["Closable", "ShutdownCloser", "CLOSERS"]

log = logging.getLogger(__name__)

_SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")
_FLUSH_SECONDS = 10.0  # bound on the flush before a chained handler runs
_CUT_AT = 3  # the signal that ends a close under way (counting the one that started it)
_DEFER_SECONDS = 2.0  # bound on holding a signal until trainspect's interrupted code returns
# Whose code returns to the script only when the process ends: a signal there is handled at once.
_ENTRY_MODULES = ("trainspect._bootstrap", "trainspect.cli", "trainspect._supervise", __name__)


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
        self._closing: list[str] = []  # the run directories whose close is under way, outermost first
        self._signals = 0  # terminating signals received since the close began (the one that began it included)
        self._held: int | None = None  # the first signal held back until the close ends
        self._guarded: dict[int, Any] = {}  # handlers replaced while a close is under way
        self._deferred: _Deferred | None = None  # a signal waiting for trainspect's interrupted code to return

    def track(self, obj: Closable) -> None:
        """Close ``obj`` when the process ends, unless it was closed before (see :meth:`untrack`)."""
        with self._lock:
            if self._pid != os.getpid():
                self._open = []  # a forked child: what it inherited are its parent's hooks
            if not any(o is obj for o in self._open):
                self._open.append(obj)
        if self._pid != os.getpid():
            self._install()

    def open_objects(self) -> list[Closable]:
        """The hooks (and autolog patch sets) this process will close, oldest first."""
        with self._lock:
            return list(self._open) if self._pid == os.getpid() else []

    def untrack(self, obj: Closable) -> None:
        """Forget ``obj`` (it was closed by the user)."""
        with self._lock:
            self._open = [o for o in self._open if o is not obj]

    @contextmanager
    def closing(self, what: str, signum: int | None = None) -> Iterator[None]:
        """Keep SIGTERM, SIGHUP and SIGINT from cutting the close of ``what`` inside the block (see module doc).

        ``signum``: the signal that started this close (it counts as the first; the process dies of it after).
        """
        outermost = not self._closing
        self._closing.append(what)
        if outermost:
            self._signals, self._held = (1 if signum is not None else 0), None
            self._guard()
        try:
            yield
        finally:
            if outermost:
                self._unguard()
            self._closing.pop()
            held, self._held = (self._held if outermost and signum is None else None), None
            if outermost and held is not None:
                signal.raise_signal(held)  # handled now as it would have been without the close

    def _guard(self) -> None:
        if threading.current_thread() is not threading.main_thread() or self._pid != os.getpid():
            return  # a signal handler can only be set from the main thread; there, ours is set for SIGTERM/SIGHUP
        for name in _SIGNALS:
            signum = getattr(signal, name, None)
            if signum is None:
                continue
            current = signal.getsignal(signum)
            if current in (None, signal.SIG_IGN) or current == self._on_signal:
                continue
            self._guarded[signum] = current
            signal.signal(signum, self._on_signal)

    def _unguard(self) -> None:
        guarded, self._guarded = self._guarded, {}
        for signum, handler in guarded.items():
            signal.signal(signum, handler)

    def _during_close(self, signum: int) -> None:
        """A signal while a close is under way: hold it back, or cut the close at the third."""
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals < _CUT_AT:
            if self._held is None:
                self._held = signum
            log.warning(
                "trainspect: %s received while closing the run; finishing the close first (another signal ends it)",
                name,
            )
            return
        runs = list(dict.fromkeys(self._closing))
        missing = [r for r in runs if not (Path(r) / "training_job_end.ts").exists()]
        log.warning(
            "trainspect: %s received again; the close was cut: not written in %s: the end marker, the "
            "steps still queued and the final verdicts",
            name,
            ", ".join(missing or runs),
        )
        for handler in logging.getLogger("trainspect").handlers + logging.getLogger().handlers:
            handler.flush()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def close_all(self) -> None:
        """Close every open hook, newest first (only in the process that opened them)."""
        if self._pid != os.getpid():
            return
        with self.closing("the open runs"):
            self._close_each()

    def _close_each(self) -> None:
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
                done = flush(max(0.0, deadline - time.monotonic()))
            except Exception as exc:
                log.warning("trainspect: flushing %s on a signal failed: %s", type(obj).__name__, exc)
                continue
            if done is False:
                where = getattr(obj, "out_dir", None) or type(obj).__name__
                log.warning(
                    "trainspect: a signal arrived and %s was not flushed within %g s: the steps still queued "
                    "may not be on disk (not written yet: the end marker, the final verdicts); the previous "
                    "handler runs now",
                    where,
                    _FLUSH_SECONDS,
                )

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
        _note_signals_for_the_wrapper()
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
        mine = self._pid == os.getpid()
        if mine and self._closing:
            self._during_close(signum)
            return
        deferred, self._deferred = self._deferred, None
        if deferred is not None:  # another signal, or the bound: handle the first where the code is now
            deferred.cancel()
            signum = deferred.signum
        elif mine:
            inside = _trainspect_frame(frame)
            if inside is not None:
                self._deferred = _Deferred(self, signum, inside)
                return
        self._handle(signum, frame, mine)

    def _handle(self, signum: int, frame: FrameType | None, mine: bool) -> None:
        previous = self._previous.get(signum, signal.SIG_DFL)
        if callable(previous):
            if mine:
                self._flush_all()
            previous(signum, frame)
            return
        if mine:
            log.warning("trainspect: %s received; closing the run before the process ends", signal.Signals(signum).name)
            with self.closing("the open runs", signum):
                self._close_each()
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)

    def _run_deferred(self, deferred: _Deferred, frame: FrameType | None) -> None:
        """The interrupted trainspect code returned to ``frame``: handle its signal now."""
        if self._deferred is not deferred:
            return
        self._deferred = None
        self._handle(deferred.signum, frame, self._pid == os.getpid())


def _trainspect_frame(frame: FrameType | None) -> FrameType | None:
    """The outermost of the trainspect frames on top of ``frame``'s stack (None: the signal is not inside them)."""
    outer = None
    while frame is not None and frame.f_back is not None:
        name = frame.f_globals.get("__name__") or ""
        if not name.startswith("trainspect.") or name.startswith(_ENTRY_MODULES):
            break
        outer, frame = frame, frame.f_back
    return outer


class _Deferred:
    """A signal held until the trainspect frame it interrupted returns (or ``_DEFER_SECONDS`` passed).

    The frame's return is seen by a trace function on it (``sys.settrace`` turns the thread's tracing on; new
    frames are not traced); the previous trace function (a debugger, coverage) is restored first.
    """

    def __init__(self, closer: ShutdownCloser, signum: int, frame: FrameType) -> None:
        self.closer, self.signum, self.frame = closer, signum, frame
        self._trace = sys.gettrace()
        frame.f_trace_lines = False
        frame.f_trace = self._on_event
        sys.settrace(_no_new_frames)
        self._timer = threading.Timer(_DEFER_SECONDS, self._bound)
        self._timer.daemon = True
        self._timer.start()

    def _on_event(self, frame: FrameType, event: str, arg: object) -> Any:
        if event != "return":
            return self._on_event
        self.cancel()
        self.closer._run_deferred(self, frame.f_back)
        return None

    def cancel(self) -> None:
        """Stop waiting: untrace the frame, restore the thread's trace function, stop the bound's timer."""
        self._timer.cancel()
        self.frame.f_trace = None
        sys.settrace(self._trace)

    def _bound(self) -> None:
        if self.closer._deferred is self:  # still held: deliver it again, handled at once
            signal.pthread_kill(threading.main_thread().ident or 0, self.signum)


def _no_new_frames(frame: FrameType, event: str, arg: object) -> None:
    """The thread's trace function while a signal is held: no frame but the held one's is traced."""
    return None


def _note_signals_for_the_wrapper() -> None:
    """Under ``trainspect run``, have the interpreter note each signal it gets on the wrapper's pipe.

    The wrapper then does not forward a signal this process got itself (see :mod:`trainspect._supervise`). Only
    the wrapper's own child does it (not a subprocess that inherited the variable), and not over a wakeup fd
    someone else (asyncio) set.
    """
    pid, _, fd = (env.TRAINSPECT_SIGNAL_NOTES.get() or "").partition(":")
    if not fd.isdigit() or pid != str(os.getppid()):
        return
    try:
        os.set_inheritable(int(fd), False)
        os.set_blocking(int(fd), False)
        previous = signal.set_wakeup_fd(int(fd), warn_on_full_buffer=False)
    except (OSError, ValueError):
        return
    if previous not in (-1, int(fd)):
        signal.set_wakeup_fd(previous)


CLOSERS = ShutdownCloser()
