"""The system monitor: one background daemon thread per node sampling host and GPU metrics.

An orchestrator plus tiny samplers (:mod:`trainspect.hooks.samplers`). Only one process per node samples:
:meth:`SystemMonitor.start` claims ``<system_dir>/monitor.lock`` with ``O_EXCL`` (a stale claim, whose
process is gone, is taken over). Every process of the job on the node registers its pid under
``<system_dir>/procs/`` so that the sampling process also sums the CPU and memory of the other workers' process
trees (``process_*`` metrics) beside the host-wide ones. Samples are buffered and written about once per second
as compressed columnar chunks (:class:`trainspect.profiler.writers.SystemChunkWriter`). A sampling failure stops the
monitor with one warning; the training never notices.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import psutil

from trainspect import env
from trainspect.hooks.samplers import GPUSampler, Sampler, default_samplers
from trainspect.hooks.samplers.gpu import GPUUnavailable
from trainspect.hooks.samplers.process import ProcessTreeSampler
from trainspect.profiler.config import ProfilerConfig
from trainspect.profiler.writers import SystemChunkWriter
from trainspect.store.layout import RunLayout

__all__ = ["SystemMonitor", "NodeClaim", "default_node_id"]

logger = logging.getLogger(__name__)
LOCK_NAME = "monitor.lock"
PROCS_DIR = "procs"


def default_node_id() -> str:
    """Return the node name: ``TRAINSPECT_NODE_ID`` or the host name."""
    return env.TRAINSPECT_NODE_ID.get() or socket.gethostname()


class NodeClaim:
    """An exclusive claim on a node's system directory, held by one live process.

    Args:
        directory: the node's system directory.
    """

    def __init__(self, directory: str | os.PathLike[str]) -> None:
        self.path = Path(directory) / LOCK_NAME
        self.held = False

    def acquire(self) -> bool:
        """Take the claim; ``False`` when another live process holds it."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                if self._holder_alive():
                    return False
                self.path.unlink(missing_ok=True)
                continue
            me = psutil.Process()
            info = {"pid": me.pid, "host": socket.gethostname(), "create_time": me.create_time()}
            with os.fdopen(fd, "w") as fh:
                json.dump(info, fh)
            self.held = True
            return True
        return False

    def _holder_alive(self) -> bool:
        try:
            info = json.loads(self.path.read_text())
            pid, created = int(info["pid"]), float(info["create_time"])
        except (OSError, ValueError, KeyError, TypeError):
            # Being written right now, or garbage: treat a fresh file as alive, an old one as stale.
            try:
                return time.time() - self.path.stat().st_mtime < 5.0
            except OSError:
                return False
        if info.get("host") not in (None, socket.gethostname()):
            return True  # another host shares the directory: trust its claim
        try:
            return abs(psutil.Process(pid).create_time() - created) < 1.0
        except (psutil.NoSuchProcess, psutil.AccessDenied, ValueError):
            return False

    def release(self) -> None:
        """Give the claim up (only if held)."""
        if self.held:
            self.path.unlink(missing_ok=True)
            self.held = False


class SystemMonitor:
    """Samples system metrics of this node into ``RunLayout(run_dir).system_dir(node)``.

    Args:
        run_dir: the run directory.
        node: the node's name (default: :func:`default_node_id`).
        config: the profiler config (its ``system_monitor_interval_millis`` sets the interval).
        samplers: the samplers to drive (default: CPU, memory, disk, network, plus GPU when NVML works).
        flush_interval_s: how often buffered samples are written.

    Example:
        >>> import tempfile
        >>> monitor = SystemMonitor(tempfile.mkdtemp(), node="n0", samplers=[])
        >>> monitor.start(), monitor.close()
        (True, None)
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        node: str | None = None,
        config: ProfilerConfig | None = None,
        samplers: Sequence[Sampler] | None = None,
        flush_interval_s: float = 1.0,
    ) -> None:
        self.config = config or ProfilerConfig()
        self.node = node or default_node_id()
        self.directory = RunLayout(run_dir).system_dir(self.node)
        self._samplers: list[Sampler] | None = list(samplers) if samplers is not None else None
        self._flush_interval_s = flush_interval_s
        self._claim = NodeClaim(self.directory)
        self._registration: Path | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.writer: SystemChunkWriter | None = None
        self.failed = False

    @classmethod
    def for_run(cls, run_dir: str | os.PathLike[str], config: ProfilerConfig | None = None) -> SystemMonitor | None:
        """A monitor for this node of the run, or ``None`` when the config turns profiling off."""
        config = config or ProfilerConfig()
        if not config.enabled or env.TRAINSPECT_DISABLE.get():
            return None
        return cls(run_dir, config=config)

    @property
    def running(self) -> bool:
        """Whether the sampling thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> bool:
        """Claim the node and start sampling; ``False`` when another process samples this node.

        Returns:
            Whether this process samples the node.
        """
        if self._thread is not None or not self.config.enabled or env.TRAINSPECT_DISABLE.get():
            return False
        self._register()
        if not self._claim.acquire():
            logger.debug("node %s is sampled by another process", self.node)
            return False
        if self._samplers is None:
            tree = ProcessTreeSampler(self.job_pids)
            self._samplers = [*default_samplers(), tree, *_gpu_samplers(tree.pids)]
        self.writer = SystemChunkWriter(self.directory, self.node, self.config.system_monitor_interval_millis)
        self._thread = threading.Thread(target=self._run, name="trainspect-system-monitor", daemon=True)
        self._thread.start()
        return True

    def _register(self) -> None:
        """Announce this process as part of the job on this node (best effort)."""
        try:
            me = psutil.Process()
            folder = self.directory / PROCS_DIR
            folder.mkdir(parents=True, exist_ok=True)
            path = folder / f"{socket.gethostname()}-{me.pid}.json"
            path.write_text(json.dumps({"pid": me.pid, "create_time": me.create_time(), "host": socket.gethostname()}))
            self._registration = path
        except OSError as exc:
            logger.debug("could not register pid for the process-tree metrics: %s", exc)

    def job_pids(self) -> list[int]:
        """Return the process-tree roots: this process and the job's registered live processes on this host."""
        pids = {os.getpid()}
        host = socket.gethostname()
        for path in (self.directory / PROCS_DIR).glob(f"{host}-*.json"):
            try:
                info = json.loads(path.read_text())
                pid = int(info["pid"])
                if abs(psutil.Process(pid).create_time() - float(info["create_time"])) < 1.0:
                    pids.add(pid)
            except (OSError, ValueError, KeyError, TypeError, psutil.Error):
                continue
        return sorted(pids)

    def _tick(self, samplers: list[Sampler]) -> dict[str, float]:
        row: dict[str, float] = {}
        for sampler in samplers:
            sampler.collect()
            row.update(sampler.aggregate())
            sampler.reset()
        return row

    def _run(self) -> None:
        samplers, writer = self._samplers or [], self.writer
        assert writer is not None
        interval = self.config.interval_s
        try:
            self._tick(samplers)  # prime the counters
            next_at = last_flush = time.monotonic()
            while not self._stop.wait(max(0.0, next_at + interval - time.monotonic())):
                next_at = max(next_at + interval, time.monotonic() - interval)
                row = self._tick(samplers)
                if row:
                    writer.append(time.time(), row)
                if time.monotonic() - last_flush >= self._flush_interval_s:
                    writer.flush()
                    last_flush = time.monotonic()
            if time.monotonic() - next_at > 0.05:  # a last sample, so that even a short job has one
                row = self._tick(samplers)
                if row:
                    writer.append(time.time(), row)
            writer.flush()
        except Exception:
            self.failed = True
            logger.warning("trainspect system monitor stopped after an internal error", exc_info=True)

    def close(self) -> None:
        """Stop the thread, write what is buffered, release the claim (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
        if self.writer is not None:
            try:
                self.writer.close()
            except OSError:
                logger.warning("trainspect system monitor could not write its last samples", exc_info=True)
            self.writer = None
        for sampler in self._samplers or []:
            sampler.close()
        self._claim.release()
        if self._registration is not None:
            self._registration.unlink(missing_ok=True)
            self._registration = None

    def __enter__(self) -> SystemMonitor:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _gpu_samplers(job_pids: Callable[[], list[int]]) -> list[Sampler]:
    """The GPU sampler, or none with one line why (a warning when a GPU seemed to be there)."""
    try:
        return [GPUSampler(job_pids)]
    except GPUUnavailable as exc:
        level = logging.INFO if exc.expected else logging.WARNING
        logger.log(level, "trainspect: GPU metrics are not recorded: %s", exc)
        return []
