"""The background writer: every byte a hook writes goes through here, off the training thread."""

from __future__ import annotations

import functools
import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

__all__ = ["BackgroundWriter"]

log = logging.getLogger(__name__)
_STOP = object()


class BackgroundWriter:
    """A daemon thread that hands queued items to ``handle`` in batches and calls ``flush`` at least every interval.

    The training thread only enqueues. If the pending bytes exceed ``max_pending_bytes`` (the disk is slower than
    training), new items are dropped with one warning rather than stalling training. If ``handle`` or ``flush``
    raises (disk full, unwritable file), the writer logs one warning naming what is disabled and drops everything
    from then on; what was written before stays readable.

    Args:
        name: what the writer writes, used in the warning (``"tensor capture"``).
        handle: called on the writer thread with a list of items.
        flush: called on the writer thread after each batch and at least every ``flush_interval`` seconds.
        max_pending_bytes: memory bound of the queue.
        flush_interval: seconds between flushes while items keep coming.
    """

    def __init__(
        self,
        name: str,
        handle: Callable[[list[Any]], None],
        flush: Callable[[], None] | None = None,
        max_pending_bytes: int = 1 << 30,
        flush_interval: float = 0.5,
    ) -> None:
        self.name = name
        self._handle = handle
        self._flush = flush or (lambda: None)
        self._max_pending = max_pending_bytes
        self._interval = flush_interval
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._pending = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._dropped_warned = False
        self.failed: BaseException | None = None
        self._idle = threading.Event()
        self._idle.set()

    def start(self) -> None:
        """Start the thread (idempotent)."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name=f"trainspect-{self.name}", daemon=True)
            self._thread.start()

    def submit(self, item: Any, nbytes: int = 0) -> bool:
        """Enqueue an item; return False when it was dropped (writer failed or too far behind)."""
        if self.failed is not None:
            return False
        with self._lock:
            if self._pending + nbytes > self._max_pending and self._pending > 0:
                if not self._dropped_warned:
                    self._dropped_warned = True
                    log.warning(
                        "trainspect: %s is falling behind training; dropping data to keep training fast", self.name
                    )
                return False
            self._pending += nbytes
            self._idle.clear()
        self._queue.put((item, nbytes))
        return True

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until everything submitted so far was handled and flushed."""
        return self._idle.wait(timeout)

    def close(self, timeout: float = 60.0) -> None:
        """Write what is queued, flush, and stop the thread."""
        if self._thread is None:
            return
        self._queue.put((_STOP, 0))
        self._thread.join(timeout)
        self._thread = None

    def _run(self) -> None:
        last_flush = time.monotonic()
        while True:
            try:
                first = self._queue.get(timeout=self._interval)
            except queue.Empty:
                self._safe(self._flush)
                last_flush = time.monotonic()
                continue
            batch, stop = self._drain(first)
            if batch:
                self._safe(functools.partial(self._handle, batch))
            if stop or time.monotonic() - last_flush >= self._interval or self._queue.empty():
                self._safe(self._flush)
                last_flush = time.monotonic()
            if self._queue.empty():
                self._idle.set()
            if stop:
                self._idle.set()
                return

    def _drain(self, first: tuple[Any, int]) -> tuple[list[Any], bool]:
        items, stop, size = [], False, 0
        entry: tuple[Any, int] | None = first
        while entry is not None:
            item, nbytes = entry
            if item is _STOP:
                stop = True
            else:
                items.append(item)
                size += nbytes
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                entry = None
        with self._lock:
            self._pending -= size
        return items, stop

    def _safe(self, fn: Callable[[], None]) -> None:
        if self.failed is not None:
            return
        try:
            fn()
        except Exception as exc:  # a writer failure must never reach training
            self.failed = exc
            log.warning(
                "trainspect: %s disabled after a write error (%s: %s); training continues and the data "
                "written before stays readable",
                self.name,
                type(exc).__name__,
                exc,
            )
