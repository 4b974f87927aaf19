"""One worker's writer of a run directory: tensors, TensorBoard summaries and collections, off the training thread."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from itertools import chain
from pathlib import Path
from typing import Any

from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys
from trainspect.step import Scalar, ScalarStep, StepKey, StepRecord, TensorRecord
from trainspect.store.background import BackgroundWriter
from trainspect.store.gaps import GAPS_FILE, degrade, gap_line
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import mark_job_end, write_json_atomic, write_worker_manifest
from trainspect.store.tb_writer import TensorBoardWriter, tb_tag
from trainspect.store.tensor_file import TensorFileWriter, reduction_key

__all__ = ["RunWriter", "COLLECTIONS_FILE"]

log = logging.getLogger(__name__)
COLLECTIONS_FILE = "collections.json"
FLUSH_INTERVAL = 0.1
"""Seconds between the writer's batches; with :data:`_INDEX_EVERY` it bounds what a SIGKILL loses (docs/format.md)."""
_INDEX_EVERY = 0.05  # within a long batch, steps are indexed at least this often
MAX_PENDING_BYTES = 256 << 20
"""The tensor queue's byte budget: past it, steps are degraded (or training waits, ``on_backlog="block"``)."""
BACKLOG_POLICIES = ("degrade", "block")
_MODES = {int(mode): mode for mode in ModeKeys}
_NUMBERS = {mode: int(mode) for mode in ModeKeys}

ScalarItem = tuple[Any, ...]
"""A scalar-only step as it waits for the writers, one flat tuple: ``("scalars", mode number, mode step, global step,
wall time)`` then each scalar's name, value, dtype and collections (see :meth:`RunWriter.submit_scalars`)."""


def _scalar_step(item: ScalarItem, worker: str) -> ScalarStep:
    """The :class:`ScalarStep` a queued :data:`ScalarItem` stands for (made on a writer thread, where it is written)."""
    scalars = [item[i : i + 4] for i in range(5, len(item), 4)]
    return ScalarStep(_MODES[item[1]], item[2], item[3], item[4], worker, scalars)


def _histogram_of(t: TensorRecord) -> bool:
    """Whether a tensor named for a histogram gets one (not a scalar, which is a point; numbers only)."""
    value = t.value
    return value is not None and not (value.size == 1 and value.dtype.kind in "fiub") and value.dtype.kind in "fiu"


def _nbytes(record: StepRecord) -> int:
    return sum(t.value.nbytes for t in record.tensors.values() if t.value is not None)


class RunWriter:
    """Writes the steps of one worker through a :class:`BackgroundWriter`.

    When writing falls behind training (more than ``max_pending_bytes`` queued), a step is never dropped whole:
    with ``on_backlog="degrade"`` (default) its losses and scalars are kept and raw tensor values dropped, largest
    first, keeping their reductions, and the gap is recorded (:mod:`trainspect.store.gaps`); with
    ``on_backlog="block"`` training waits for the writer (smdebug's behaviour). A paused writer (a URL run's full
    spool) degrades every step the same way.

    Args:
        layout: the run directory.
        worker: this worker's name (``worker_0``).
        tensorboard: also write TensorBoard summaries.
        tensorboard_dir: where the event files go (default: the run root, so the run is named after it).
        chief: this worker writes the end marker at close.
        on_backlog: ``"degrade"`` or ``"block"``.
        max_pending_bytes: the byte budget of the queue (default :data:`MAX_PENDING_BYTES`).
    """

    def __init__(
        self,
        layout: RunLayout,
        worker: str,
        tensorboard: bool = True,
        tensorboard_dir: Path | None = None,
        chief: bool = True,
        on_backlog: str = "degrade",
        max_pending_bytes: int | None = None,
    ) -> None:
        if on_backlog not in BACKLOG_POLICIES:
            raise ConfigError(f"on_backlog={on_backlog!r}: expected one of {', '.join(BACKLOG_POLICIES)}")
        self.on_backlog = on_backlog
        self.layout = layout
        self.worker = worker
        self.chief = chief
        self.paused = False
        """While True (a URL run's spool is full), raw tensors are dropped (gaps recorded); losses and scalars kept."""
        self.gap_steps = 0
        """Steps written without some of their raw values (see :mod:`trainspect.store.gaps`)."""
        self._tensor_dir = layout.tensor_dir(worker)
        self._files: TensorFileWriter | None = None
        self._tb: TensorBoardWriter | None = None
        self._tb_dir = (tensorboard_dir or layout.tensorboard_dir(worker)) if tensorboard else None
        failures: list[BaseException] = []  # shared: a full disk stops both writers with one warning
        self._bg = BackgroundWriter(
            "tensor capture",
            self._handle,
            self._flush,
            flush_interval=FLUSH_INTERVAL,
            on_failure=self._salvage,
            failures=failures,
            max_pending_bytes=MAX_PENDING_BYTES if max_pending_bytes is None else max_pending_bytes,
        )
        self._tb_bg = BackgroundWriter(
            "TensorBoard export", self._handle_tb, self._flush_tb, flush_interval=0.5, failures=failures
        )

    def start(self) -> None:
        """Open the files and start the writer thread."""
        self._files = TensorFileWriter(self._tensor_dir)
        if self._tb_dir is not None:
            self._tb = TensorBoardWriter(self._tb_dir, filename_suffix=f".{self.worker}")
        write_worker_manifest(self.layout, self.worker, start_time=time.time())
        self._bg.start()
        if self._tb is not None:
            self._tb_bg.start()

    @property
    def failed(self) -> bool:
        """Whether the writer disabled itself after an error."""
        return self._bg.failed is not None

    def submit(self, record: StepRecord, histograms: frozenset[str] = frozenset()) -> bool:
        """Queue one step; ``histograms`` names the tensors that also get a TensorBoard histogram.

        Returns False only when the writer failed: behind training, the step is degraded (or waited for), not lost.
        """
        nbytes = _nbytes(record)
        if not self.paused and self._bg.room(nbytes):
            return self._bg.submit(("step", record, histograms), nbytes)
        if not self.paused and self.on_backlog == "block" and self._bg.wait_room(nbytes):
            return self._bg.submit(("step", record, histograms), nbytes)
        light, dropped = degrade(record, 0)
        reason = "spool full" if self.paused else "writer backlog"
        ok = self._bg.submit(("step", light, histograms), _nbytes(light), force=True)
        if dropped and ok:
            self.gap_steps += 1
            self.append_line(GAPS_FILE, gap_line(record, dropped, reason))
        return ok

    def append_line(self, filename: str, line: str) -> None:
        """Queue one line for a small side file of this worker's tensor directory (gaps, NaN origins)."""
        self._bg.submit(("line", line, filename), 0, force=True)

    def submit_scalars(self, key: StepKey, scalars: Sequence[Scalar]) -> bool:
        """Queue a step that saved only scalars (most steps save only their loss) as Python values.

        Its index entry and TensorBoard event are made on the writer threads. Until then it waits as one flat tuple
        of atoms (:data:`ScalarItem`: the mode as its number, a loss's collections a tuple of its own), which Python's
        garbage collector stops tracking at its first collection. A list, a frozenset, an enum member or a tuple
        made with it would keep the steps the writer has not reached yet tracked: each collection would move them to
        an older generation, and the full collections that follow walk the whole heap on the training thread
        (docs/architecture.md, "What the garbage collector sees").
        """
        mode, mode_step, global_step, wall = key
        number = _NUMBERS[mode]
        fields: ScalarItem
        if len(scalars) == 2:  # a step's loss and the loss module's output it is: built field by field (no list)
            (a0, a1, a2, a3), (b0, b1, b2, b3) = scalars
            fields = ("scalars", number, mode_step, global_step, wall, a0, a1, a2, a3, b0, b1, b2, b3)
        elif len(scalars) == 1:
            ((a0, a1, a2, a3),) = scalars
            fields = ("scalars", number, mode_step, global_step, wall, a0, a1, a2, a3)
        else:
            fields = ("scalars", number, mode_step, global_step, wall, *chain.from_iterable(scalars))
        return self._bg.submit(fields, 0, True)  # forced: losses and scalars are never dropped

    @property
    def tensor_queue(self) -> BackgroundWriter:
        """The tensor writer's queue (the collector reads its ``failed`` at every step)."""
        return self._bg

    def write_collections(self, collections: dict[str, Any]) -> None:
        """Queue a rewrite of the collections file (names, regexes and members of every collection)."""
        self._bg.submit(("collections", collections, None), 0)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Block until everything queued is on disk (TensorBoard's summaries included)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._bg.wait_idle(timeout):
            return False
        return self._tb_bg.wait_idle(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _handle(self, batch: list[Any]) -> None:
        """Write a batch into the tensor files, indexed as it goes, then hand it to the TensorBoard writer.

        The Trial, the rules and a SIGKILL's survivors depend on the tensor files; TensorBoard's histograms cost
        several times more and have a thread of their own, so when writing falls behind training they lag, not the
        index.
        """
        files = self._files
        assert files is not None
        index_at = time.monotonic() + _INDEX_EVERY
        written: list[ScalarItem | tuple[StepRecord, frozenset[str]]] = []
        nbytes = 0
        for item in batch:
            kind, payload, extra = item[0], item[1], item[2]
            if kind == "collections":
                doc = {"schema_version": 1, "collections": payload}
                write_json_atomic(self._tensor_dir / COLLECTIONS_FILE, doc)
                continue
            if kind == "line":
                with open(self._tensor_dir / extra, "a", encoding="utf-8") as fh:
                    fh.write(payload)
                continue
            if kind == "scalars":  # most steps save only scalars (their loss): no record is built for them
                files.write_scalars(_scalar_step(item, self.worker))
                written.append(item)  # as it came, for the TensorBoard thread (see submit_scalars)
            else:
                files.write(payload)
                written.append((payload, extra))
                nbytes += _nbytes(payload)
            if time.monotonic() > index_at:  # a long batch (a backlog) becomes readable as it goes
                files.flush()
                index_at = time.monotonic() + _INDEX_EVERY
        files.flush()
        if self._tb is not None and written:
            self._tb_bg.submit(written, nbytes)

    def _handle_tb(self, batches: list[list[ScalarItem | tuple[StepRecord, frozenset[str]]]]) -> None:
        assert self._tb is not None
        for batch in batches:
            for item in batch:
                if type(item[0]) is StepRecord:
                    self._write_tb(*item)
                else:
                    self._write_tb_scalars(_scalar_step(item, self.worker))

    def _write_tb_scalars(self, step: ScalarStep) -> None:
        """A scalar-only step's TensorBoard scalars, from its Python values (what :meth:`_write_tb` makes of them)."""
        assert self._tb is not None
        for name, value, dtype, _ in step.scalars:
            if dtype.kind in "fiub" and not isinstance(value, complex):
                self._tb.scalar(tb_tag(name, step.mode), float(value), step.global_step, step.wall_time)

    def _write_tb(self, record: StepRecord, histograms: frozenset[str]) -> None:
        """A step's TensorBoard events, in its tensors' order: scalars, histograms (made together), reductions."""
        tb = self._tb
        assert tb is not None
        step, wall = record.global_step, record.wall_time
        hist = [t for t in record.tensors.values() if t.name in histograms and _histogram_of(t)] if histograms else []
        events = dict(
            zip(
                [t.name for t in hist],
                tb.histogram_events([(tb_tag(t.name, record.mode), t.value) for t in hist], step, wall),  # type: ignore[misc]
                strict=True,
            )
        )
        for t in record.tensors.values():
            tag = tb_tag(t.name, record.mode)
            if t.value is not None and t.value.size == 1 and t.value.dtype.kind in "fiub":
                tb.scalar(tag, float(t.value.reshape(-1)[0]), step, wall)
            elif events.get(t.name) is not None:
                tb.write_event(events[t.name])  # type: ignore[arg-type]
            for (name, absolute), value in t.reductions.items():
                tb.scalar(f"{tag}/{reduction_key(name, absolute)}", value, step, wall)

    def _salvage(self) -> None:
        if self._files is not None:
            self._files.salvage()

    def _flush(self) -> None:
        if self._files is not None:
            self._files.flush()

    def _flush_tb(self) -> None:
        if self._tb is not None:
            self._tb.flush()

    def close(self, end_job: bool | None = None) -> None:
        """Drain the queue, close the files, record the worker's end, and (chief) write the end marker."""
        if not self._bg.close() or not self._tb_bg.close():
            return  # a writer thread still owns the files; it was told to drop the rest
        for closer in (self._files, self._tb):
            if closer is not None:
                try:
                    closer.close()
                except OSError as exc:
                    if not self.failed:  # after a write error the one warning was already given
                        log.warning("trainspect: closing %s failed: %s", self._tensor_dir, exc)
        self._files = self._tb = None
        try:
            write_worker_manifest(self.layout, self.worker, end_time=time.time())
            if self.chief if end_job is None else end_job:
                mark_job_end(self.layout)
        except OSError as exc:
            log.warning("trainspect: could not record the end of the job in %s: %s", self.layout.root, exc)
