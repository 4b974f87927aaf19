"""A hook's URL run directory: a local spool the writers write into, and a thread that uploads it.

The training thread never waits for the network: the writers write the spool as they write any run directory, and
:class:`RemoteRun`'s thread sends new parts every upload interval. When the store is slow or down, the bytes not yet
sent grow; past the spool size, tensor capture pauses (one warning) until they are sent. At close, what is left is
sent with a bounded wait, then the end marker; if the store is still down, the spool stays on disk for
``trainspect sync SPOOL URL``.
"""

from __future__ import annotations

import logging
import os
import secrets
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainspect import env
from trainspect.store.layout import safe_component
from trainspect.store.remote.uploader import MANIFEST, SpoolSync
from trainspect.store.remote.url import StoreUnavailable, describe, join, open_store, probe

__all__ = ["RemoteRun", "SpoolSettings"]

log = logging.getLogger(__name__)
_MAX_BACKOFF = 30.0


@dataclass(frozen=True)
class SpoolSettings:
    """How a URL run directory is spooled and uploaded (defaults from ``TRAINSPECT_SPOOL_*`` / ``_UPLOAD_*``).

    Attributes:
        spool_dir: parent of the spool folders (default: the temp directory).
        spool_bytes: bytes written and not yet uploaded beyond which tensor capture pauses (default 1 GiB).
        interval: seconds between uploads (default 5).
        close_timeout: seconds close waits for the last uploads (default 60).
    """

    spool_dir: str | None = None
    spool_bytes: int = 1 << 30
    interval: float = 5.0
    close_timeout: float = 60.0

    @classmethod
    def from_env(cls) -> SpoolSettings:
        """The settings the environment gives."""
        interval = env.TRAINSPECT_UPLOAD_INTERVAL_MS.get() / 1000.0
        spool_bytes = env.TRAINSPECT_SPOOL_MB.get() << 20
        return cls(env.TRAINSPECT_SPOOL_DIR.get(), spool_bytes, interval, float(env.TRAINSPECT_UPLOAD_CLOSE_S.get()))


class RemoteRun:
    """The spool and uploader of one hook writing to ``url``.

    Args:
        url: the run directory in the store (``s3://bucket/runs/exp1``).
        settings: spool and upload settings (default: from the environment).

    Raises:
        UnsupportedURL: no fsspec implementation for the URL's scheme is installed.
    """

    def __init__(self, url: str, settings: SpoolSettings | None = None) -> None:
        self.url = url.rstrip("/")
        self.settings = settings or SpoolSettings.from_env()
        self.fs, self.root = open_store(self.url, "out_dir")
        parent = Path(self.settings.spool_dir or tempfile.gettempdir()) / "trainspect-spool"
        name = f"{safe_component(self.root)[-80:]}-{os.getpid()}-{secrets.token_hex(3)}"
        self.spool = parent / name
        self.spool.mkdir(parents=True, exist_ok=True)
        self.sync = SpoolSync(self.spool, self.fs, self.root, self.url)
        self.on_full: Callable[[bool], None] | None = None
        self.world_size = 1
        self._thread: threading.Thread | None = None
        self._watcher: threading.Thread | None = None
        self._watch_lock = threading.Lock()
        self._stop = threading.Event()
        self._down_since: float | None = None
        self._full = False
        self._lock = threading.Lock()
        self.reachable = self._check()

    def _check(self) -> bool:
        """Probe the store and fetch the job manifest there (so another job's run is refused as locally)."""
        try:
            probe(self.fs, self.root)
            key = join(self.root, MANIFEST)
            if self.fs.exists(key):
                (self.spool / MANIFEST).write_bytes(self.fs.cat_file(key))
                self.sync.manifest_sent = True
            return True
        except StoreUnavailable as exc:
            log.warning(
                "trainspect: out_dir %s is unreachable (%s); recording into %s and retrying the upload",
                self.url,
                exc,
                self.spool,
            )
            self._down_since = time.monotonic()
            return False

    def start(self, world_size: int = 1) -> None:
        """Start the upload thread."""
        self.world_size = world_size
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="trainspect-upload", daemon=True)
            self._thread.start()
            # the backlog is watched apart from the uploads: a sweep against a store that is down can block for
            # many seconds (the client's retries), while training fills the spool
            self._watcher = threading.Thread(target=self._watch, name="trainspect-spool-watch", daemon=True)
            self._watcher.start()

    def _watch(self) -> None:
        while not self._stop.wait(min(1.0, self.settings.interval)):
            self._watch_backlog()

    def _run(self) -> None:
        backoff = 0.0
        next_send = time.monotonic() + self.settings.interval
        while not self._stop.wait(min(1.0, self.settings.interval)):
            if time.monotonic() < next_send:
                continue
            ok = self._sweep()
            backoff = 0.0 if ok else min(_MAX_BACKOFF, max(self.settings.interval, backoff * 2 or 1.0))
            next_send = time.monotonic() + (self.settings.interval if ok else backoff)

    def _sweep(self, with_end: bool = False) -> bool:
        with self._lock:
            try:
                self.sync.sweep(with_end)
            except Exception as exc:  # the store's errors: retried with backoff, training goes on
                if self._down_since is None:
                    self._down_since = time.monotonic()
                    log.warning(
                        "trainspect: %s; training continues, the parts wait in %s and are retried",
                        self.sync.failure(exc),
                        self.spool,
                    )
                self._last_error = exc
                return False
        if self._down_since is not None:
            log.warning("trainspect: uploads to %s resumed", self.url)
            self._down_since = None
        self._watch_backlog()
        return True

    def _watch_backlog(self) -> None:
        with self._watch_lock:
            self._update_full(self.sync.backlog())

    def _update_full(self, backlog: int) -> None:
        full = backlog > self.settings.spool_bytes if not self._full else backlog > self.settings.spool_bytes // 2
        if full != self._full:
            self._full = full
            if full:
                log.warning(
                    "trainspect: %d MiB wait in the spool %s for upload to %s (limit %d MiB); tensor capture "
                    "pauses until they are sent",
                    backlog >> 20,
                    self.spool,
                    self.url,
                    self.settings.spool_bytes >> 20,
                )
            if self.on_full is not None:
                self.on_full(full)

    def flush(self, timeout: float = 30.0) -> bool:
        """Upload what is in the spool now (for reading a run in progress from the same process)."""
        deadline = time.monotonic() + timeout
        while not self._sweep():
            if time.monotonic() > deadline:
                return False
            time.sleep(0.2)
        return True

    def close(self, timeout: float | None = None) -> bool:
        """Send the rest with a bounded wait, then the end marker; delete the spool once everything is in the store.

        Returns whether everything reached the store; if not, the spool is kept and one warning says how to send it.
        """
        if self._stop.is_set() and self._thread is None:
            return not self.spool.exists()  # closed before
        self._stop.set()
        for thread in (self._thread, self._watcher):
            if thread is not None:
                thread.join()
        self._thread = self._watcher = None
        deadline = time.monotonic() + (self.settings.close_timeout if timeout is None else timeout)
        delay = 0.2
        while True:
            if self._sweep(with_end=True) and self._finish():
                shutil.rmtree(self.spool, ignore_errors=True)
                return True
            if time.monotonic() + delay > deadline:
                break
            time.sleep(delay)
            delay = min(delay * 2, 5.0)
        error = getattr(self, "_last_error", None)
        log.warning(
            "trainspect: %s is unreachable at close (%s); the run is kept in %s: upload it later with "
            "`trainspect sync %s %s`",
            self.url,
            describe(error) if error else "timed out",
            self.spool,
            self.spool,
            self.url,
        )
        return False

    def discard(self) -> None:
        """Remove the spool of a hook that never started (nothing was written)."""
        shutil.rmtree(self.spool, ignore_errors=True)

    def _finish(self) -> bool:
        """Write the end marker once every worker of the job recorded its end (the spool's marker was sent)."""
        if self.world_size <= 1:
            return True
        try:
            if self.sync.all_workers_ended(self.world_size):
                self.sync.mark_end()
            return True
        except Exception as exc:
            self._last_error = exc
            return False
