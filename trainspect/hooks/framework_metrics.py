"""The framework-neutral recorder of framework metrics: steps, job phases, spans, dataloader waits, step metrics.

Adapters (the PyTorch hook, :mod:`trainspect.hooks.torch_profiling`) translate framework events into calls
on :class:`FrameworkRecorder`. Each call appends a tuple to a list; a background daemon thread writes the
lists about once per second as ``TABLE`` frames to ``RunLayout.framework_dir(worker)/<start ms>.tfw``
(format: docs/profiler.md). The job phases follow from the records: initialization runs from the
job's start (:func:`trainspect.hooks.job_start.job_start`: the process start, ``psutil.Process().create_time()``,
for a script's first hook; the hook's start in a notebook or for a later run of the process) to the first step's
start, the training loop from
there to the last step's end, finalization from there to :meth:`FrameworkRecorder.close`.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import psutil

from trainspect.hooks.job_start import job_start
from trainspect.hooks.system_monitor import default_node_id
from trainspect.modes import ModeKeys
from trainspect.profiler import schema
from trainspect.profiler.config import ProfilerConfig
from trainspect.profiler.writers import FrameFile
from trainspect.store.layout import RunLayout

__all__ = ["FrameworkRecorder", "SPAN_KINDS"]

logger = logging.getLogger(__name__)

SPAN_KINDS = {"forward": 1, "backward": 2, "optimizer": 3, "dataloader": 4, "backward_sync": 5}
"""Span kind -> code stored in the ``spans`` table. ``backward_sync`` lies inside a backward span: the wait from the
rank's last local gradient to the end of ``backward()`` (:mod:`trainspect.hooks.torch_sync_timer`)."""


class FrameworkRecorder:
    """Records one worker's framework metrics.

    Args:
        run_dir: the run directory.
        worker: the worker's name (``worker_0``…).
        config: the profiler config.
        node: the node's name (default: ``TRAINSPECT_NODE_ID`` or the host name).
        flush_interval_s: how often the background thread writes.

    Example:
        >>> import tempfile
        >>> rec = FrameworkRecorder(tempfile.mkdtemp(), "worker_0", ProfilerConfig())
        >>> rec.start(); rec.on_step_start(ModeKeys.TRAIN, 0, 0); rec.on_step_end(ModeKeys.TRAIN, 0, 0)
        >>> rec.close()
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        worker: str,
        config: ProfilerConfig | None = None,
        node: str | None = None,
        flush_interval_s: float = 1.0,
    ) -> None:
        self.worker = worker
        self.node = node or default_node_id()
        self.config = config or ProfilerConfig()
        self._layout = RunLayout(run_dir)
        self.directory = self._layout.framework_dir(worker)
        self._flush_interval_s = flush_interval_s
        self._lock = threading.Lock()
        self._steps: list[tuple[int, int, int, float, float]] = []
        self._spans: list[tuple[int, float, float, int, int]] = []
        self._metrics: list[tuple[int, float, dict[str, float]]] = []
        self._sources: dict[str, Callable[[], dict[str, float]]] = {}
        self._pending: tuple[int, int, int, float] | None = None
        self._workers = -1
        self._loader: tuple[int, int | None] | None = None
        self._events: list[dict[str, Any]] = []  # event records the writer thread writes (loader changes)
        self._file: FrameFile | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.failed = False

    def start(self) -> None:
        """Open the worker's file, write the start record, start the writer thread."""
        if self._file is not None:
            return
        self.directory = self._layout.framework_dir(self.worker)  # the worker may be settled after construction
        now = time.time()
        self._file = FrameFile(self.directory / f"{int(now * 1000):013d}{schema.FRAMEWORK_SUFFIX}")
        proc = psutil.Process()
        began, why = job_start(proc.create_time(), now)
        self._file.write_json(
            schema.KIND_EVENT,
            {
                "event": "start",
                "time": now,
                "process_start": proc.create_time(),
                "job_start": began,
                "job_start_from": why,
                "worker": self.worker,
                "node": self.node,
                "host": socket.gethostname(),
                "pid": proc.pid,
                "config": self.config.to_dict(),
            },
        )
        self._thread = threading.Thread(target=self._run, name="trainspect-framework-writer", daemon=True)
        self._thread.start()

    # --- hot path ------------------------------------------------------------------------------------
    def on_step_start(self, mode: ModeKeys, mode_step: int, global_step: int) -> None:
        """A step begins now."""
        self._pending = (int(mode), mode_step, global_step, time.time())

    def on_step_end(self, mode: ModeKeys, mode_step: int, global_step: int) -> None:
        """The step begun by the matching :meth:`on_step_start` ends now (unmatched ends are ignored)."""
        pending = self._pending
        if pending is None or pending[2] != global_step:
            return
        self._pending = None
        with self._lock:
            self._steps.append((pending[0], pending[1], global_step, pending[3], time.time()))
        if self._sources:
            self._read_sources(global_step)

    @property
    def open_step(self) -> int | None:
        """The global step begun by :meth:`on_step_start` and not ended yet, or ``None`` between steps."""
        pending = self._pending
        return None if pending is None else pending[2]

    def add_step_source(self, source: Callable[[], dict[str, float]], name: str | None = None) -> None:
        """Call ``source`` at every step end and record what it returns with :meth:`record_metrics`.

        A source that raises is dropped with one warning naming it. Adding a source under a name already
        registered replaces it (so a hook that restarts does not read twice).
        """
        self._sources[name or str(getattr(source, "name", repr(source)))] = source

    def _read_sources(self, global_step: int) -> None:
        values: dict[str, float] = {}
        for name, source in list(self._sources.items()):
            try:
                values.update(source())
            except Exception:  # never into the training loop
                del self._sources[name]
                logger.warning("trainspect: step metrics %r are no longer recorded after an error", name, exc_info=True)
        self.record_metrics(global_step, values)

    def record_span(self, kind: str, start: float, end: float, global_step: int | None = None) -> None:
        """Record a timed span (``kind``: one of :data:`SPAN_KINDS`; epoch seconds)."""
        code = SPAN_KINDS.get(kind)
        if code is None:
            raise ValueError(f"kind={kind!r}: allowed: {', '.join(SPAN_KINDS)}")
        workers = self._workers if code == 4 else -1
        with self._lock:
            self._spans.append((code, start, end, -1 if global_step is None else global_step, workers))

    def record_metrics(self, global_step: int, values: dict[str, float]) -> None:
        """Record per-step framework metrics (keys snake_case with a unit, e.g. ``gpu0_memory_allocated_bytes``).

        Written as the ``step_metrics`` table (docs/profiler.md); a key missing from a row reads as NaN.
        """
        if values:
            row = (int(global_step), time.time(), dict(values))
            with self._lock:
                self._metrics.append(row)

    def set_dataloader_workers(self, n: int) -> None:
        """The number of dataloader worker processes (recorded with each later dataloader span)."""
        if n != self._workers:
            self._workers = int(n)

    def set_dataloader(self, num_workers: int, batch_size: int | None) -> None:
        """The loader the next waits draw from: its worker processes and batch size.

        A change (a validation loader after the training loader) is written as a ``dataloader`` event, so readers
        tell which loader fed the TRAIN steps (:func:`trainspect.profiler.analysis.training_loader`).
        """
        self.set_dataloader_workers(num_workers)
        loader = (int(num_workers), None if batch_size is None else int(batch_size))
        if loader != self._loader:
            self._loader = loader
            event = {"event": "dataloader", "time": time.time(), "num_workers": loader[0], "batch_size": loader[1]}
            with self._lock:
                self._events.append(event)

    # --- writing -------------------------------------------------------------------------------------
    def _run(self) -> None:
        while not self._stop.wait(self._flush_interval_s):
            if not self._safe_flush():
                return

    def _safe_flush(self) -> bool:
        try:
            self.flush()
            return True
        except Exception:
            self.failed = True
            logger.warning("trainspect framework recorder stopped writing after an internal error", exc_info=True)
            return False

    def flush(self) -> None:
        """Write what was recorded since the last flush."""
        with self._lock:
            steps, self._steps = self._steps, []
            spans, self._spans = self._spans, []
            metrics, self._metrics = self._metrics, []
            events, self._events = self._events, []
        if self._file is None:
            return
        for event in events:
            self._file.write_json(schema.KIND_EVENT, event)
        if steps:
            cols = list(zip(*steps, strict=False))
            self._file.write(schema.KIND_TABLE, schema.encode_table("steps", _step_columns(cols)))
        if spans:
            cols = list(zip(*spans, strict=False))
            self._file.write(schema.KIND_TABLE, schema.encode_table("spans", _span_columns(cols)))
        if metrics:
            self._file.write(schema.KIND_TABLE, schema.encode_table("step_metrics", _metric_columns(metrics)))

    def close(self) -> None:
        """Write the rest and the close record (the end of finalization); idempotent."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10.0)
            self._thread = None
        if self._file is None:
            return
        if not self.failed:
            self._safe_flush()
            try:
                self._file.write_json(schema.KIND_EVENT, {"event": "close", "time": time.time()})
            except OSError:
                logger.warning("trainspect framework recorder could not write its close record", exc_info=True)
        self._file.close()
        self._file = None


def _step_columns(cols: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    return {
        "mode": np.array(cols[0], dtype=np.uint8),
        "mode_step": np.array(cols[1], dtype=np.int64),
        "global_step": np.array(cols[2], dtype=np.int64),
        "start": np.array(cols[3], dtype=np.float64),
        "end": np.array(cols[4], dtype=np.float64),
    }


def _span_columns(cols: list[tuple[Any, ...]]) -> dict[str, np.ndarray]:
    return {
        "kind": np.array(cols[0], dtype=np.uint8),
        "start": np.array(cols[1], dtype=np.float64),
        "end": np.array(cols[2], dtype=np.float64),
        "global_step": np.array(cols[3], dtype=np.int64),
        "workers": np.array(cols[4], dtype=np.int16),
    }


def _metric_columns(rows: list[tuple[int, float, dict[str, float]]]) -> dict[str, np.ndarray]:
    keys = sorted({k for _s, _t, values in rows for k in values})
    cols: dict[str, np.ndarray] = {
        "global_step": np.array([r[0] for r in rows], dtype=np.int64),
        "time": np.array([r[1] for r in rows], dtype=np.float64),
    }
    for key in keys:
        cols[key] = np.array([r[2].get(key, np.nan) for r in rows], dtype=np.float64)
    return cols
