"""The background writer: every byte a hook writes goes through here, off the training thread."""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundWriter"]

log = logging.getLogger(__name__)


class _Sized:
    """A queued item that counts against the memory bound (an item of no bytes is queued as it is)."""

    __slots__ = ("item", "nbytes")

    def __init__(self, item: Any, nbytes: int) -> None:
        self.item, self.nbytes = item, nbytes


class BackgroundWriter:
    """A daemon thread that hands queued items to ``handle`` in batches and calls ``flush`` at least every interval.

    The training thread only appends to a deque (an item of no bytes as it is: a tuple of atoms stays one, which
    the garbage collector stops tracking, see ``RunWriter.submit_scalars``): the writer thread is not woken per item
    but every ``flush_interval`` seconds (or once ``wake_bytes`` are pending, or when asked to drain), so a step costs
    the training thread no thread switch. If the pending bytes exceed ``max_pending_bytes`` (the disk is slower than
    training), :meth:`room` says so: the caller degrades the item (the run writer keeps losses and scalars and drops
    raw tensors, recording the gap), or waits (:meth:`wait_room`); an item that still does not fit is dropped with
    one warning rather than stalling training. If ``handle`` or ``flush`` raises (disk full, unwritable file), the
    writer logs one warning naming what is disabled and drops everything from then on; what was written before stays
    readable.

    Args:
        name: what the writer writes, used in the warning (``"tensor capture"``).
        handle: called on the writer thread with a list of items.
        flush: called on the writer thread after each batch.
        on_failure: called once on the writer thread right after ``handle`` or ``flush`` failed, to keep what reached
            the disk readable (the writer is disabled by then).
        failures: a list shared by writers that fail together (a full disk): only the first failure is announced.
        max_pending_bytes: memory bound of what is not yet written: the queue and the batch being written (its
            bytes leave the count once written and flushed).
        flush_interval: seconds between batches (so data reaches the disk at least this often).
        wake_bytes: pending bytes that wake the writer before the interval ends.
    """

    def __init__(
        self,
        name: str,
        handle: Callable[[list[Any]], None],
        flush: Callable[[], None] | None = None,
        max_pending_bytes: int = 1 << 30,
        flush_interval: float = 0.5,
        wake_bytes: int = 32 << 20,
        on_failure: Callable[[], None] | None = None,
        failures: list[BaseException] | None = None,
    ) -> None:
        self.name = name
        self._handle = handle
        self._flush = flush or (lambda: None)
        self._max_pending = max_pending_bytes
        self._interval = flush_interval
        self._wake_bytes = wake_bytes
        self._on_failure = on_failure
        self._failures = [] if failures is None else failures
        self._items: deque[Any] = deque()  # items, those with bytes as _Sized
        self._pending = 0
        self._lock = threading.Lock()
        self._drained = threading.Condition(self._lock)
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._dropped_warned = False
        self.failed: BaseException | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._busy = False  # mirrors "not _idle.is_set()" under the lock (submit reads it without a call)

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is None:
            self._stop = False
            self._thread = threading.Thread(target=self._run, name=f"trainspect-{self.name}", daemon=True)
            self._thread.start()

    def room(self, nbytes: int) -> bool:
        """Whether an item of ``nbytes`` fits the memory bound now (an empty queue takes anything)."""
        pending = self._pending
        return pending == 0 or pending + nbytes <= self._max_pending

    def wait_room(self, nbytes: int, timeout: float | None = None) -> bool:
        """Block until an item of ``nbytes`` fits (``on_backlog="block"``: training waits); False on timeout/failure."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._drained:
            while not self.room(nbytes) and self.failed is None and self._thread is not None:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return False
                self._wake.set()
                self._drained.wait(0.1 if left is None else min(0.1, left))
        return self.failed is None

    def submit(self, item: Any, nbytes: int = 0, force: bool = False) -> bool:
        """Enqueue an item; return False when it was dropped (writer failed or too far behind).

        ``force``: past the memory bound (a degraded step: its losses and scalars are never dropped).
        """
        if self.failed is not None:
            return False
        if self._busy and not nbytes:  # the common item (a loss-only step): no accounting, no state to change
            self._items.append(item)  # deque.append: thread-safe without the lock
            return True
        with self._lock:
            if not force and self._pending + nbytes > self._max_pending and self._pending > 0:
                if not self._dropped_warned:
                    self._dropped_warned = True
                    log.warning(
                        "trainspect: %s is falling behind training; dropping data to keep training fast", self.name
                    )
                return False
            self._pending += nbytes
            self._items.append(_Sized(item, nbytes) if nbytes else item)
            if not self._busy:
                self._busy = True
                self._idle.clear()
            wake = self._pending >= self._wake_bytes
        if wake:
            self._wake.set()
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until everything submitted so far was handled and flushed."""
        with self._lock:
            if self._items and not self._busy:  # appended as the writer went idle (``submit``'s lock-free path)
                self._busy = True
                self._idle.clear()
        if self._idle.is_set():
            return True
        self._wake.set()
        return self._idle.wait(timeout)

    def close(self, timeout: float = 60.0) -> bool:
        """Write what is queued, flush, and stop the thread; return False if it did not finish within ``timeout``.

        When it did not finish, the rest of the queue is dropped with one warning; the thread may still be inside
        the current batch, so the caller must not close the files it writes to.
        """
        if self._thread is None:
            return True
        self._stop = True
        self._wake.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            dropped = len(self._drain()[0])
            self.failed = TimeoutError(f"still writing after {timeout:.0f} s at close")
            log.warning(
                "trainspect: %s could not finish writing within %.0f s at close; %d queued step(s) dropped",
                self.name,
                timeout,
                dropped,
            )
            return False
        self._thread = None
        return True

    def _run(self) -> None:
        while True:
            self._wake.wait(self._interval)
            self._wake.clear()
            stop = self._stop
            batch, nbytes = self._drain()
            if batch:
                self._safe(functools.partial(self._handle, batch))
            self._safe(self._flush)
            with self._lock:
                self._pending -= nbytes  # only now: the budget bounds every byte not yet written, the batch's too
                self._drained.notify_all()
                if not self._items or stop:
                    self._busy = False
                    self._idle.set()
            if stop:
                return

    def _drain(self) -> tuple[list[Any], int]:
        """Take the queue as one batch: its items and their bytes (still counted as pending until written)."""
        items = self._items
        with self._lock:
            entries = [items.popleft() for _ in range(len(items))]  # popleft: items appended meanwhile stay
        batch, nbytes = [], 0
        for entry in entries:
            if type(entry) is _Sized:
                batch.append(entry.item)
                nbytes += entry.nbytes
            else:
                batch.append(entry)
        return batch, nbytes

    def _safe(self, fn: Callable[[], None]) -> None:
        if self.failed is not None:
            return
        try:
            fn()
        except Exception as exc:  # a writer failure must never reach training
            self.failed = exc
            if self._on_failure is not None:
                try:
                    self._on_failure()
                except Exception as salvage_exc:
                    log.debug("trainspect: %s could not save what was written: %s", self.name, salvage_exc)
            self._failures.append(exc)
            if len(self._failures) > 1:
                log.debug("trainspect: %s disabled too (%s)", self.name, exc)
                return
            log.warning(
                "trainspect: %s disabled after a write error (%s: %s); training continues and the data "
                "written before stays readable",
                self.name,
                type(exc).__name__,
                exc,
            )
