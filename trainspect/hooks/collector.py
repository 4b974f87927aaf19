"""The framework-neutral collector: steps and modes, save decisions, step records, writers, rules' needs.

Framework adapters (``hooks/torch_hook.py``, ``hooks/keras_hook.py``, through ``hooks/hook_api.py``) translate
framework events into calls on this class and hand it host-side NumPy values and reductions (``torch_tensors.py``,
``keras_tensors.py``); everything else happens here. Live rule evaluation, profiling and MLflow logging are in
``hooks/hook_extras.py``. The step lifecycle is :class:`~trainspect.hooks.step_state.StepState`
(``collector.state``), changed only through its methods, by :meth:`Collector.begin_step`, :meth:`Collector.end_step`,
:meth:`Collector.reopen_last_step` and :meth:`Collector.close`; when steps begin and end is the step driver's
(:mod:`trainspect.hooks.step_driver`).
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from trainspect._version import __version__
from trainspect.collections import CollectionManager
from trainspect.config import SaveConfig
from trainspect.hook_settings import HookSettings
from trainspect.hooks._guard import Guarded, guarded
from trainspect.hooks.distributed import JobIdentity
from trainspect.hooks.run_opening import absolute_out_dir, check_before_open, open_worker, settle_identity
from trainspect.hooks.save_plan import SavePlanner, TensorPlan
from trainspect.hooks.step_state import StepState
from trainspect.modes import ModeKeys, parse_mode
from trainspect.shard import Shard
from trainspect.step import ReductionKey, Scalar, StepKey, StepRecord, TensorRecord, scalar_record
from trainspect.store.background import BackgroundWriter
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import all_workers_ended, mark_job_end, write_worker_manifest
from trainspect.store.remote import spool_for
from trainspect.store.run_writer import RunWriter

__all__ = ["Collector", "StepKey", "LateTensor"]

LateTensor = tuple[
    str,
    TensorPlan,
    "np.ndarray | None",
    "dict[ReductionKey, float] | None",
    "tuple[int, ...] | None",
    "Shard | None",
    "dict[str, float] | None",
]
"""(name, plan, raw value, reductions, shape, shard, partials) of a tensor added to a finished step."""

log = logging.getLogger(__name__)


def _out_dir_problem(path: Path) -> str | None:
    """Why ``path`` cannot hold a run (it is created when missing); None when it can."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot be created: {exc.strerror or exc}"
    if not os.access(path, os.W_OK):
        return "is not writable"
    return None


class Collector(Guarded):
    """Step bookkeeping and writing shared by every framework hook.

    Args:
        framework: ``"pytorch"`` or ``"tensorflow"`` (recorded in the manifest).
        settings: the hook's checked settings (:mod:`trainspect.hook_settings`: ``out_dir``, ``save_config``,
            ``include_collections``, ``include_workers`` …). With ``include_workers="one"``, every rank records when
            the model's parameters are sharded (``sharded``, set by the framework hook before the run opens): rank
            0's pieces alone make no tensor.
        rules: rules evaluated live while training (their needs are recorded automatically).
        always_saved: collections this framework records every step unless configured otherwise (Keras:
            ``metrics``), besides ``losses``.
        worker: this worker's name (default ``worker_<rank>``, the rank settled when the run opens).
        job_id: identifies the job that owns ``out_dir`` (default: the job's, see :mod:`trainspect.hooks.distributed`).

    The run opens (the directory and this worker's files are claimed, the writers start) at the first step: a hook
    built before ``torch.distributed`` is initialised learns its rank from the process group
    (:mod:`trainspect.hooks.run_opening`).
    """

    # Read at every step. Slots: as plain instance attributes, more than 30 of them (CPython's limit for a class's
    # shared keys) make each instance's __dict__ a full 1.6 KB table, and every read a lookup in it.
    __slots__ = (
        "state",
        "mode",
        "global_step",
        "mode_steps",
        "planner",
        "opened",
        "_closed",
        "_record",
        "_record_step",
        "_last_step",
        "_scalars",
        "_writer",
        "_tensor_queue",
        "_known_names",
        "dry_run",
        "rank",
        "worker",
        "_wanted",
        "_job_id",
        "_histograms",
        "sharded",
        "rules",
        "remote",
        "out_dir",
        "layout",
        "include_workers",
        "identity",
        "_worker_given",
        "_tensorboard",
        "_tb_dir",
        "_on_open",
        "on_backlog",
        "framework",
        "collections",
        "_members",
        "_fresh_job_id",
        "_config_doc",
    )

    def __init__(
        self,
        framework: str,
        settings: HookSettings,
        rules: Iterable[Any] | None = None,
        always_saved: Iterable[str] = (),
        worker: str | None = None,
        job_id: str | None = None,
    ) -> None:
        self.on_backlog = settings.on_backlog
        include_workers, save_config, reduction_config = (
            settings.include_workers,
            settings.save_config,
            settings.reduction_config,
        )
        save_all, dry_run, include_regex = settings.save_all, settings.dry_run, settings.include_regex
        include_collections = settings.include_collections
        export_tensorboard, tensorboard_dir = settings.export_tensorboard, settings.tensorboard_dir
        if isinstance(include_regex, str):
            include_regex = [include_regex]
        out_dir, self.remote = spool_for(settings.out_dir, dry_run)  # a URL: a local spool, uploaded by a thread
        self.out_dir = absolute_out_dir(Path(out_dir))
        problem = None if dry_run else _out_dir_problem(self.out_dir)
        if problem is not None:  # the environment, not the configuration: training goes on, unrecorded
            log.warning("trainspect: out_dir=%r %s; nothing is recorded, training goes on", str(out_dir), problem)
            dry_run = True
        self.layout = RunLayout(self.out_dir)
        self.framework = framework
        self.identity: JobIdentity | None = None
        """Who this process is in the job (None until the run opens)."""
        self.rank = 0  # this worker's rank and name: settled when the run opens
        self.worker = worker or "worker_0"
        self._worker_given = worker
        self.include_workers = include_workers
        self.sharded = False
        """The model's parameters are sharded across the ranks (every rank records them: see ``include_workers``)."""
        self.dry_run = dry_run
        self.collections = CollectionManager()
        always_saved = tuple(always_saved)
        for name in always_saved:
            self.collections.get(name)
        self.planner = SavePlanner(
            self.collections,
            include_collections if include_collections is not None else SavePlanner.default_collections(),
            save_config or SaveConfig(),
            reduction_config,
            include_regex,
            save_all,
        )
        for name in always_saved:
            coll = self.collections.get(name)
            coll.save_config = coll.save_config or SaveConfig(save_interval=1)
            self.planner.included.add(name)
        self.rules = list(rules or [])
        for rule in self.rules:
            for req in rule.requirements():
                self.planner.add_requirement(req)
        self._tensorboard = export_tensorboard
        self._tb_dir = Path(tensorboard_dir) if tensorboard_dir else None
        self._job_id = job_id
        if not dry_run:
            check_before_open(self.layout, job_id)
        self._on_open: list[Callable[[Collector], None]] = []
        self._fresh_job_id = uuid.uuid4().hex  # a new job's id, should this process start one
        self._config_doc = {
            "save_config": (save_config or SaveConfig()).to_dict(),
            "include_collections": sorted(self.planner.included),
            "reduction_config": reduction_config.to_dict() if reduction_config else None,
            "save_all": save_all,
            "include_workers": include_workers,
            "rules": [repr(r) for r in self.rules],
        }
        self.mode = ModeKeys.GLOBAL
        self.mode_steps: dict[ModeKeys, int] = {}
        self.global_step = -1
        self._record: dict[str, TensorRecord] | None = None
        self.state = StepState()
        """The step lifecycle (hooks read ``state.open`` and ``state.saving`` at every event)."""
        self._record_step: StepKey | None = None
        self._last_step: StepKey | None = None
        self._scalars: list[Scalar] = []  # deferred scalars of the open step (see add_scalars)
        self._writer: RunWriter | None = None
        self._tensor_queue: BackgroundWriter | None = None  # the writer's queue (its ``failed``)
        self._known_names: set[str] = set()
        self._members: dict[str, set[str]] = {}
        self._histograms: set[str] = set()
        self.opened = False
        """Whether the run is open (this worker's identity settled, its files claimed, or nothing to record)."""
        self._wanted = False
        self._closed = False

    def note_config(self, key: str, value: Any) -> None:
        """Keep a setting in the manifest's ``config`` that the collector does not act on (before :meth:`start`)."""
        self._config_doc[key] = value

    # --- lifecycle -----------------------------------------------------------------------------------------
    @property
    def step_open(self) -> bool:
        """Whether a step is open (``state.open``)."""
        return self.state.open

    @property
    def records_tensors(self) -> bool:
        """Whether this worker writes tensors (``include_workers="one"`` keeps only the chief's)."""
        return not self.dry_run and (self.include_workers == "all" or self.rank == 0 or self.sharded)

    def on_open(self, callback: Callable[[Collector], None]) -> None:
        """Call ``callback(collector)`` when the run opens (at once if it is open), unless nothing is recorded."""
        self._on_open.append(callback)
        if self.opened and not self.dry_run:
            callback(self)

    def start(self) -> None:
        """The hook is attached: the run opens at the first step (or at :meth:`close` if this rank is known then).

        Not before the first step: a launcher may set up the process group later (its rank), and an engine may shard
        the model after it was registered (then every rank records, see ``include_workers``).
        """
        self._wanted = True

    def open(self, final: bool) -> None:
        """Settle this worker's identity, claim the run directory and its files, start the writers.

        ``final=False``: only when the identity can no longer change (a process group, a launcher's job id); else
        the first step opens the run (``final=True``). A conflict (another job's directory, another process
        recording this worker, ranks that disagree) records nothing, with one warning; training goes on.
        """
        if self.opened or self._closed:
            return
        ident = settle_identity(self.layout, final, self._job_id, self._fresh_job_id)
        if ident is None:
            return
        self.opened = True
        self.identity = ident
        self.rank, self.worker = ident.rank, self._worker_given or ident.worker
        self._job_id = self._job_id or ident.job_id
        if self.dry_run:
            return
        manifest = {
            "framework": self.framework,
            "trainspect_version": __version__,
            "world_size": ident.world_size,
            "config": self._config_doc,
        }
        if not open_worker(self.layout, self._job_id, manifest, self.worker, ident, self.records_tensors):
            self.dry_run = True
            return
        self._start_writers(ident)
        for callback in self._on_open:
            callback(self)

    def _start_writers(self, ident: JobIdentity) -> None:
        if self.records_tensors:
            tb_dir = self._tb_dir or self.layout.tensorboard_dir(self.worker, single=self.rank == 0)
            self._writer = RunWriter(
                self.layout,
                self.worker,
                tensorboard=self._tensorboard,
                tensorboard_dir=tb_dir,
                chief=False,
                on_backlog=self.on_backlog,
            )
            self._writer.start()
            self._tensor_queue = self._writer.tensor_queue
            self._writer.write_collections(self.collections.to_dict())
        if self.remote is not None:
            self.remote.on_full = self._pause_capture
            self.remote.start(ident.world_size)

    def _pause_capture(self, paused: bool) -> None:
        if self._writer is not None:
            self._writer.paused = paused

    def finish_upload(self) -> None:
        """URL run directories: send what is left to the store (after every other part of the hook closed)."""
        if self.remote is not None and self.opened:
            self.remote.close()
        elif self.remote is not None:
            self.remote.discard()

    @guarded()
    def close(self) -> None:
        """Finish the open step, flush everything and write the end marker."""
        if self._closed:
            return
        if not self.opened and self._wanted:
            self.open(final=False)  # a started rank that never stepped still joins (and ends) a distributed job
        self.end_step()
        self._closed = True
        self.state.close()
        if self._writer is not None:
            self._writer.write_collections(self._collections_doc())
            self._writer.close()
        if self.opened and not self.dry_run and self.identity is not None:
            try:
                write_worker_manifest(self.layout, self.worker, end_time=time.time(), last_step=self.global_step)
                if all_workers_ended(self.layout, self.identity.world_size):
                    mark_job_end(self.layout)
            except OSError as exc:
                log.warning("trainspect: could not record the end of the job in %s: %s", self.layout.root, exc)

    def flush(self, timeout: float | None = None) -> bool:
        """Block until every step handed to the writer is on disk; return whether that happened in ``timeout``."""
        return self._writer is None or self._writer.wait_idle(timeout)

    # --- steps ---------------------------------------------------------------------------------------------
    def set_mode(self, mode: ModeKeys | str) -> None:
        """Switch mode; the open step ends."""
        new = parse_mode(mode)
        if new is not self.mode:
            self.end_step()
            self.mode = new

    def begin_step(self) -> bool:
        """Open the next step (ending the open one); return whether anything is saved at it.

        Unguarded: the framework hooks' callbacks, its only callers, guard themselves. After :meth:`close` no step
        opens (returns False).
        """
        if self._record is not None:
            self.end_step()
        if self._closed:
            return False
        if not self.opened:
            self.open(final=True)
        mode, global_step = self.mode, self.global_step + 1
        mode_steps = self.mode_steps
        mode_step = mode_steps[mode] = mode_steps.get(mode, -1) + 1
        self.global_step = global_step
        saving = self.planner.begin_step(mode, mode_step)
        if saving and self._tensor_queue is not None and self._tensor_queue.failed is not None:
            saving = False  # the writer disabled itself
        self._record_step = (mode, mode_step, global_step, time.time())
        self._record = {}
        self.state.begin(saving)  # IDLE → OPEN (refused in another phase)
        return saving

    def reopen_last_step(self) -> bool:
        """Open the last finished step again for tensors saved after it ended (their record joins that step's).

        Returns False when there is no such step (none yet, one is open, or the collector is closed).
        """
        if self._record is not None or self._last_step is None or self._closed:
            return False
        self._record_step, self._record = self._last_step, {}
        self.state.begin(True)
        return True

    @property
    def writer_failed(self) -> bool:
        """Whether the writer disabled itself (disk full, …)."""
        return self._writer is not None and self._writer.failed

    def end_step(self, scalars: list[Scalar] | None = None, known: bool = False) -> StepRecord | None:
        """Close the open step and hand its record to the writer; return the record (None if nothing).

        ``scalars``: raw scalars to add first (see :meth:`add_scalars`); ``known``: each of their names was handed to
        the writer before (its collections are recorded). Unguarded, like :meth:`begin_step`.
        """
        tensors, key = self._record, self._record_step
        if tensors is None or key is None:
            return None
        self._last_step = key
        self._record = self._record_step = None
        self.state.end()  # OPEN → IDLE (refused in another phase)
        if self._scalars:
            scalars, self._scalars, known = self._scalars + (scalars or []), [], False
        if scalars:
            if not tensors:
                # the common step: its loss only, queued at once as Python values (a SIGKILL loses at most the
                # writer's interval)
                writer = self._writer
                if writer is not None:
                    writer.submit_scalars(key, scalars)
                    if not known and not self._known_names.issuperset([s[0] for s in scalars]):
                        self._note_members([(name, colls) for name, _, _, colls in scalars])
                return None
            for scalar in scalars:
                tensors[scalar[0]] = scalar_record(scalar)
        if not tensors and not self.planner.any_active:
            return None
        record = StepRecord(*key, self.worker, tensors)
        if self._writer is not None and tensors:
            self._submit(record)
        return record

    def _submit(self, record: StepRecord) -> None:
        assert self._writer is not None
        tensors = record.tensors
        hist = _NO_HISTOGRAMS
        if self._histograms and self._tensorboard:
            hist = frozenset(
                n for n, t in tensors.items() if n in self._histograms and t.value is not None and t.value.size > 1
            )
        self._writer.submit(record, hist)
        if not self._known_names.issuperset(tensors):
            self._note_members([(t.name, t.collections) for t in tensors.values()])

    def _note_members(self, tensors: list[tuple[str, Iterable[str]]]) -> None:
        """Record new tensor names as members of their collections and queue a rewrite of the collections file."""
        assert self._writer is not None
        for name, colls in tensors:
            self._known_names.add(name)
            for cname in colls:
                self._members.setdefault(cname, set()).add(name)
        self._writer.write_collections(self._collections_doc())

    # --- tensors -------------------------------------------------------------------------------------------
    def plan(self, name: str, extra: Iterable[str] = ()) -> TensorPlan:
        """Return what to save of a tensor at the open step."""
        if self._record is None:
            return _EMPTY
        return self.planner.plan(name, extra)

    def add(
        self,
        name: str,
        plan: TensorPlan,
        value: np.ndarray | None,
        reductions: dict[ReductionKey, float] | None = None,
        shape: tuple[int, ...] | None = None,
        shard: Shard | None = None,
        partials: dict[str, float] | None = None,
    ) -> None:
        """Add a host-side tensor (raw value and/or reductions) to the open step.

        ``shard``: the value is this rank's piece of a sharded tensor; ``partials``: the piece's statistics
        (:data:`~trainspect.shard.PARTIAL_KEYS`) from which the full tensor's reductions are combined.
        """
        if self._record is None:
            return
        self._record[name] = TensorRecord(name, value, reductions or {}, plan.collections, shape, shard, partials)
        self._note_histogram(name, plan)

    def _note_histogram(self, name: str, plan: TensorPlan) -> None:
        if plan.histogram:
            self._histograms.add(name)
        elif self._histograms:
            self._histograms.discard(name)

    def open_step(self) -> StepKey | None:
        """The open step's (mode, mode step, global step, wall time), for :meth:`add_late`; None between steps."""
        return self._record_step

    def add_late(self, step: StepKey, tensors: list[LateTensor]) -> None:
        """Add tensors of a finished step whose host values arrived after it ended (a device copy read later).

        They are written as a record that joins that step's, before the open step's record.
        """
        if self._writer is None or not tensors:
            return
        mode, mode_step, gs, wall = step
        records = {}
        for name, plan, value, reductions, shape, shard, partials in tensors:
            records[name] = TensorRecord(name, value, reductions or {}, plan.collections, shape, shard, partials)
            self._note_histogram(name, plan)
        self._submit(StepRecord(mode, mode_step, gs, wall, self.worker, records))

    def note_line(self, filename: str, line: str) -> None:
        """Append one line to a side file of this worker's tensor directory, through the writer thread."""
        if self._writer is not None:
            self._writer.append_line(filename, line)

    def add_scalars(self, scalars: list[Scalar]) -> None:
        """Add raw scalars ``(name, Python value, NumPy dtype, collections)`` to the open step (no reductions).

        If the step saves only scalars, its record is built on the writer thread and :meth:`end_step` returns
        None, so use this only where nothing reads the step's record (no live rules, profiler or MLflow logging).
        """
        if self._record is not None:
            self._scalars += scalars

    def _collections_doc(self) -> dict[str, Any]:
        doc = self.collections.to_dict()
        for cname, members in self._members.items():
            if cname in doc:
                doc[cname]["tensor_names"] = sorted(set(doc[cname]["tensor_names"]) | members)
        return doc


_EMPTY = TensorPlan(False, (), False, frozenset())
_NO_HISTOGRAMS: frozenset[str] = frozenset()
