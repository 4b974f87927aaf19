"""What every framework hook offers the user, whatever the framework: configuration, collections, lifecycle."""

from __future__ import annotations

import inspect
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

import numpy as np

from trainspect import env
from trainspect.collections import Collection
from trainspect.hook_settings import HookSettings, check_settings
from trainspect.hooks._guard import Guarded, guarded
from trainspect.hooks.close_errors import one_line_for_write_errors
from trainspect.hooks.collector import Collector
from trainspect.hooks.hook_extras import HookExtras
from trainspect.hooks.job import active_job, join_autolog
from trainspect.hooks.shutdown import CLOSERS
from trainspect.hooks.step_driver import StepDriver
from trainspect.modes import ModeKeys, parse_mode

__all__ = ["HookAPI"]

H = TypeVar("H", bound="HookAPI")

log = logging.getLogger(__name__)

CLOSE_WAIT_S = 60.0
"""How long a ``close()`` waits for one already under way on another thread (see :meth:`HookAPI.close`)."""
_CLOSE_LOCK = threading.Lock()  # decides which of two concurrent close() calls closes the run


class HookAPI(Guarded):
    """Shared part of ``trainspect.torch.Hook`` and ``trainspect.keras.Hook`` (a mixin: call :meth:`_setup`).

    Subclasses implement :meth:`start`, build ``_driver`` (a :class:`~trainspect.hooks.step_driver.StepDriver` over
    their :class:`~trainspect.hooks.step_driver.StepParts`), list their closing steps in :meth:`_close_steps`, and
    say how a value saved by the user is held (:meth:`_as_value`, :meth:`_kept`, :meth:`_add_forced`).
    """

    collector: Collector
    _extras: HookExtras
    _driver: StepDriver

    def _setup(self, framework: str, given: dict[str, Any], always_saved: Iterable[str] = ()) -> None:
        """Check the settings (:mod:`trainspect.hook_settings`) and build the collector.

        With TRAINSPECT_DISABLE=1 the collector records nothing. Under ``trainspect run`` or ``autolog()``, a hook the
        script creates itself becomes the job's one hook: it records into the run directory of ``trainspect run``
        with the script's settings where the script gives them (see :func:`trainspect.hooks.job.join_autolog`).
        """
        values, autologger = join_autolog(framework, check_settings(framework, given).values)
        self._given = dict(values)  # what a copy of this hook in a spawned process is built from (spawn_ticket)
        if env.TRAINSPECT_DISABLE.get():
            values.update(dry_run=True, rules=None, profiler_config=None)
        settings = HookSettings(values)
        self.settings = settings
        self.local_gradients = bool(values.get("local_gradients", False))
        self._extras = HookExtras(
            rules=settings.rules, profiler_config=settings.profiler_config, mlflow_run=settings.mlflow_run
        )
        self.collector = Collector(framework, settings, rules=self._extras.rules, always_saved=always_saved)
        self.disabled = env.TRAINSPECT_DISABLE.get()
        self._pending: list[tuple[str, Any, tuple[str, ...]]] = []  # saved before the first step
        self.collector.on_open(self._run_opened)
        if autologger is not None:
            autologger.adopt(self)

    # --- configuration -------------------------------------------------------------------------------------
    @property
    def out_dir(self) -> str:
        """The run directory."""
        return str(self.collector.out_dir)

    def get_collection(self, name: str) -> Collection:
        """Return a collection, creating it when missing; a collection you configure this way is recorded."""
        coll = self.collector.collections.get(name)
        self.collector.planner.included.add(name)
        return coll

    def get_collections(self) -> dict[str, Collection]:
        """Return every collection by name."""
        return {c.name: c for c in self.collector.collections}

    def add_collection(self, collection: Collection) -> None:
        """Add a collection and record it."""
        self.collector.collections.add(collection)
        self.collector.planner.included.add(collection.name)

    @classmethod
    def create_from_json_file(cls: type[H], json_file_path: str | os.PathLike[str] | None = None) -> H:
        """Build a hook from a JSON config (smdebug's format, spec 5.2).

        The path defaults to ``TRAINSPECT_CONFIG``, else ``SMDEBUG_CONFIG_FILE_PATH``, else SageMaker's
        ``/opt/ml/input/config/debughookconfig.json``. SageMaker's own keys (``S3OutputPath``) are kept in the run's
        manifest; the run is written locally.
        """
        from trainspect.hook_config import hook_kwargs_from_dict, load_json_config, sagemaker_notes

        doc = load_json_config(json_file_path)
        kwargs = hook_kwargs_from_dict(doc)
        accepted = _settings_of(cls)
        for key in [k for k in kwargs if k not in accepted]:
            log.warning("trainspect: %s is a PyTorch hook setting; %s ignores it", key, cls.__qualname__)
            del kwargs[key]
        hook = cls(**kwargs)
        notes = sagemaker_notes(doc)
        if notes:
            hook.collector.note_config("sagemaker", notes)
        return hook

    # --- the step API -------------------------------------------------------------------------------------
    def begin_step(self, mode: ModeKeys | str | None = None) -> None:
        """Begin a step (the open one ends first), in ``mode`` if given (each mode counts its own steps).

        The way a trainer integration or a custom loop marks its steps: from the first call on, the framework's own
        events (a forward pass, ``optimizer.step()``) no longer begin or end steps of that mode, they record into the
        open one. Without it, the PyTorch hook infers the steps (see docs/architecture.md, "The step driver").

        Raises:
            ValueError: ``mode`` names no mode (the message lists them).

        Example:
            >>> import tempfile, torch, trainspect as ts
            >>> model, out = torch.nn.Linear(2, 1), tempfile.mkdtemp()
            >>> with ts.torch.Hook(out) as hook:
            ...     hook.register_module(model)
            ...     for batch in range(3):
            ...         hook.begin_step("train")
            ...         hook.record_loss("loss", model(torch.ones(1, 2)).pow(2).sum())
            ...         hook.end_step()
            >>> ts.create_trial(out).steps()
            [0, 1, 2]
        """
        self._begin_driven_step(None if mode is None else parse_mode(mode))

    @guarded()
    def _begin_driven_step(self, mode: ModeKeys | None) -> None:
        self.start()
        self._driver.drive(mode)
        self._driver.begin(mode)

    @guarded()
    def end_step(self) -> None:
        """End the open step (its record goes to the writer, the live rules and MLflow); see :meth:`begin_step`."""
        self._driver.drive(None)
        self._driver.end()

    def set_mode(self, mode: ModeKeys | str) -> None:
        """Switch between TRAIN, EVAL, PREDICT and GLOBAL; the open step ends and each mode counts its own steps.

        Until this is called, the PyTorch hook's mode follows the model: ``model.train()`` is TRAIN, ``model.eval()``
        EVAL.

        Raises:
            ValueError: ``mode`` names no mode (the message lists them).
        """
        self._set_mode(parse_mode(mode))

    @guarded()
    def _set_mode(self, mode: ModeKeys) -> None:
        self._mode_explicit = True
        self._driver.set_mode(mode)

    _mode_explicit = False

    # --- saving between the framework's events ---------------------------------------------------------------
    @guarded()
    def save_scalar(self, name: str, value: float, sm_metric: bool = False, timestamp: float | None = None) -> None:
        """Save a scalar at the current step as ``scalar/<name>`` (collection ``scalars``).

        ``sm_metric`` (SageMaker Metrics) is accepted as smdebug takes it; the scalar is also an MLflow metric when
        the run logs to MLflow.
        """
        self._save_now(f"scalar/{name}", self._scalar_value(float(value)), ("scalars",))

    @guarded()
    def save_tensor(
        self, tensor_name: str, tensor_value: Any, collections_to_write: str | list[str] = "default"
    ) -> None:
        """Save any array-like (or the framework's tensor) at the current step into the given collections."""
        colls = [collections_to_write] if isinstance(collections_to_write, str) else list(collections_to_write)
        for cname in colls:
            self.collector.collections.get(cname).add_tensor_name(tensor_name)
            self.collector.planner.included.add(cname)
        self._save_now(tensor_name, self._as_value(tensor_value), tuple(colls))

    def _save_now(self, name: str, value: Any, colls: tuple[str, ...]) -> None:
        """Save at the open step; between steps, at the last step (before the first step: at the first)."""
        self.start()
        if self.collector.state.open:
            self._add_forced(name, value, colls)
        elif self.collector.reopen_last_step():  # between steps: it belongs to the last step, never opens one
            self._add_forced(name, value, colls)
            self._added_late()
            self._extras.on_late_save(self.collector.end_step())
        else:
            self._pending.append((name, self._kept(value), colls))  # the value now

    def _save_pending(self) -> None:
        """Tensors saved before any step, when no step ever came: they make a step of their own."""
        if self._pending and self.collector.global_step < 0 and not self.collector.state.open:
            self._driver.begin()

    def _scalar_value(self, value: float) -> Any:
        """A scalar as the framework's value (a float64 array or tensor)."""
        return self._as_value(np.asarray(value, dtype=np.float64))

    def _as_value(self, value: Any) -> Any:
        """What the user saved, as a value :meth:`_add_forced` takes."""
        return value

    def _kept(self, value: Any) -> Any:
        """A copy of ``value`` as it is now (saved before the first step, added at the first)."""
        return np.array(value, copy=True)

    def _add_forced(self, name: str, value: Any, colls: tuple[str, ...]) -> None:
        """Add a tensor the user saved to the open step."""
        raise NotImplementedError

    def _added_late(self) -> None:
        """A tensor was added to the last step, reopened: hand over what the framework holds of it."""

    # --- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start writing (idempotent)."""
        raise NotImplementedError

    def _run_opened(self, collector: Collector) -> None:
        """The run opened (this worker's identity is settled): start the parts that write per worker.

        A rank of a ``torch.distributed`` job ends its run when the job's process group is destroyed: Ray Train
        ends its workers that way (their processes are then killed, no exit handler runs), as Lightning does. A run
        that a thread other than the main thread opened (Ray Train runs the training function in one) ends when that
        thread ends, for the same reason (a one-worker Ray job destroys no process group).
        """
        self._extras.start(collector)
        self._start_worker_parts()
        self._close_at_exit_once()
        ident = collector.identity
        if ident is not None and ident.source == "torch.distributed" and ident.world_size > 1:
            from trainspect.hooks.distributed import close_with_process_group

            close_with_process_group(self._on_group_destroyed)
        opener = threading.current_thread()
        if self._ends_with_its_thread and opener is not threading.main_thread():
            threading.Thread(
                target=self._close_after, args=(opener,), name="trainspect-run-thread-end", daemon=True
            ).start()

    def _close_after(self, opener: threading.Thread) -> None:
        opener.join()
        if self._closing is None:
            self._on_group_destroyed()

    def _start_worker_parts(self) -> None:
        """The framework's parts that need this worker's name (its profiling window), once the run is open."""

    def spawn_ticket(self) -> tuple[str, str, dict[str, Any]] | None:
        """What a process spawned with the hooked model needs to record into this run: (key, hook class, settings).

        ``multiprocessing``'s spawn (Lightning's ``ddp_spawn``, ``mp.spawn``) pickles the model for each child; its
        trainspect callbacks travel as this ticket, and the child builds one hook of its own from it, joining the
        job as its rank (:mod:`trainspect.hooks.torch_callbacks`). None when disabled. Settings that cannot be
        pickled are left out (their defaults apply in the child).
        """
        if self.disabled or self.collector.dry_run:
            return None
        import pickle  # only to test what the spawn can carry (it pickles the model); nothing is unpickled here

        settings: dict[str, Any] = {}
        for key, value in self._given.items():
            try:
                pickle.dumps(value)
            except Exception:
                continue
            settings[key] = value
        settings["out_dir"] = (
            str(self.collector.out_dir.resolve()) if self.collector.remote is None else (self._given["out_dir"])
        )
        cls = type(self)
        return (f"{os.getpid()}-{id(self)}", f"{cls.__module__}:{cls.__qualname__}", settings)

    def _on_group_destroyed(self) -> None:
        """The worker's run ends here: its process group is being destroyed, or the thread that trained ended."""
        job = active_job()
        (job if job is not None and job.hook is self else self).close()

    _ends_with_its_thread = False  # a framework whose steps run in the training thread (PyTorch, not Keras' callbacks)
    _nothing_recorded_why = "the hook saw no training step"
    """Why a hook that saw no step recorded nothing: what the framework's hook needs to see a step."""
    _close_at_exit: int | None = None  # the process that closes this hook at exit (a forked child: its own copy)
    _closing: tuple[threading.Thread, threading.Event] | None = None
    """Once close() began: the thread closing the run, and the event set when it has finished."""

    def _close_at_exit_once(self) -> None:
        """Have the hook closed at interpreter exit or on SIGTERM/SIGHUP if the script never closes it.

        Again in a forked child whose run opens there (Lightning's ``ddp_fork``): that child closes its copy.
        """
        if self._close_at_exit != os.getpid():
            self._close_at_exit = os.getpid()
            CLOSERS.track(self)

    def flush(self, timeout: float | None = 30.0) -> bool:
        """Block until everything recorded so far is on disk (and, when logging to MLflow, sent).

        Returns whether that happened within ``timeout`` seconds. Training never needs this; it is for reading a
        run while it is being written, from the same process.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        ok = self.collector.flush(timeout)
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._extras.flush(left) and ok

    def __enter__(self: H) -> H:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _close_steps(self) -> list[Callable[[], None]]:
        """The framework's own closing steps, run before the parts close."""
        return []

    def close(self) -> None:
        """Finish the open step, detach from the framework, flush, write verdicts and the end marker.

        Runs even after an internal error disabled the hook, so that the run directory is always finished; a second
        call does nothing (a script's own ``close()`` before ``destroy_process_group()``, which closes it too). A
        second call while the first is still closing on another thread returns when that one has finished (at most
        :data:`CLOSE_WAIT_S`): Ray Train's worker ends the run from the thread that watches its training thread
        while ``destroy_process_group()`` closes it too, and the worker is killed as soon as that returns.
        """
        CLOSERS.untrack(self)
        with _CLOSE_LOCK:
            under_way = self._closing
            if under_way is None:
                self._closing = mine = (threading.current_thread(), threading.Event())
        if under_way is not None:
            self._wait_for_close(*under_way)
            return
        try:
            with one_line_for_write_errors(self.out_dir):
                for part in [*self._close_steps(), self._close_parts, self.collector.finish_upload]:
                    try:
                        part()
                    except Exception as exc:
                        if env.TRAINSPECT_TESTING.get():
                            raise
                        self._fail("close", exc)
        finally:
            mine[1].set()

    def _wait_for_close(self, closer: threading.Thread, done: threading.Event) -> None:
        """Wait for the close under way on ``closer`` (not when it is this thread: a signal handler inside it)."""
        if closer is threading.current_thread():
            return
        deadline = time.monotonic() + CLOSE_WAIT_S
        while not done.wait(0.2):
            if not closer.is_alive():  # it died (a forked child's copy of a closing hook: that thread is not here)
                return
            if time.monotonic() > deadline:
                log.warning(
                    "trainspect: %s is still being closed by thread %s after %.0f s; going on without waiting",
                    self.out_dir,
                    closer.name,
                    CLOSE_WAIT_S,
                )
                return

    def _close_parts(self) -> None:
        self._extras.before_close(self.collector)
        self.collector.close()
        self._extras.close(self.collector)
        quiet = self.collector.dry_run or self.disabled or env.TRAINSPECT_RUN_ACTIVE.get()  # the wrapper says it
        if self.collector.global_step < 0 and not quiet:
            remote = self.collector.remote
            where = remote.url if remote is not None else self.out_dir  # a URL run: the URL, not its spool
            log.warning("trainspect: nothing was recorded in %s: %s", where, self._nothing_recorded_why)


def _settings_of(cls: type) -> set[str]:
    """The keyword settings ``cls`` takes.

    They are those of the first ``__init__`` up its MRO that names them: subclasses that pass ``*args, **kwargs``
    on, as the smdebug-named hooks do, take their base's.
    """
    for klass in cls.__mro__:
        if "__init__" not in vars(klass):
            continue
        params = inspect.signature(vars(klass)["__init__"]).parameters.values()
        if not any(p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) for p in params):
            return {p.name for p in params} - {"self"}
    return set()
