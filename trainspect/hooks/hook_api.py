"""What every framework hook offers the user, whatever the framework: configuration, collections, lifecycle."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from trainspect import env
from trainspect.collections import Collection
from trainspect.config import ReductionConfig, SaveConfig
from trainspect.hooks._guard import Guarded
from trainspect.hooks.close_errors import one_line_for_write_errors
from trainspect.hooks.collector import Collector
from trainspect.hooks.hook_extras import HookExtras
from trainspect.hooks.job import join_autolog
from trainspect.hooks.shutdown import CLOSERS

__all__ = ["HookAPI"]

H = TypeVar("H", bound="HookAPI")


class HookAPI(Guarded):
    """Shared part of ``trainspect.torch.Hook`` and ``trainspect.keras.Hook`` (a mixin: call :meth:`_setup`).

    Subclasses implement :meth:`start`, and list their closing steps in :meth:`_close_steps`.
    """

    collector: Collector
    _extras: HookExtras

    def _setup(
        self,
        framework: str,
        out_dir: str | os.PathLike[str],
        export_tensorboard: bool = True,
        tensorboard_dir: str | None = None,
        dry_run: bool = False,
        reduction_config: ReductionConfig | None = None,
        save_config: SaveConfig | None = None,
        include_regex: Iterable[str] | str | None = None,
        include_collections: Iterable[str | Collection] | None = None,
        save_all: bool = False,
        include_workers: str = "one",
        rules: Iterable[Any] | str | None = None,
        profiler_config: Any = None,
        mlflow_run: Any = None,
        always_saved: Iterable[str] = (),
    ) -> None:
        """Validate the configuration and build the collector (with TRAINSPECT_DISABLE=1, one that records nothing).

        Under ``trainspect run`` or ``autolog()``, a hook the script creates itself becomes the job's one hook: it
        records into the run directory of ``trainspect run`` with the script's settings where the script gives them
        (see :func:`trainspect.hooks.job.join_autolog`).
        """
        given: dict[str, Any] = {
            "out_dir": out_dir, "export_tensorboard": export_tensorboard, "tensorboard_dir": tensorboard_dir,
            "dry_run": dry_run, "reduction_config": reduction_config, "save_config": save_config,
            "include_regex": include_regex, "include_collections": include_collections, "save_all": save_all,
            "include_workers": include_workers, "rules": rules, "profiler_config": profiler_config,
            "mlflow_run": mlflow_run,
        }  # fmt: skip
        given, autologger = join_autolog(framework, given)
        if env.TRAINSPECT_DISABLE.get():
            given.update(dry_run=True, rules=None, profiler_config=None)
        self._extras = HookExtras(
            rules=given["rules"], profiler_config=given["profiler_config"], mlflow_run=given["mlflow_run"]
        )
        self.collector = Collector(
            given["out_dir"], framework, save_config=given["save_config"],
            include_collections=given["include_collections"], include_regex=given["include_regex"],
            reduction_config=given["reduction_config"], save_all=given["save_all"],
            export_tensorboard=given["export_tensorboard"], tensorboard_dir=given["tensorboard_dir"],
            dry_run=given["dry_run"], include_workers=given["include_workers"], rules=self._extras.rules,
            always_saved=always_saved,
        )  # fmt: skip
        self.disabled = env.TRAINSPECT_DISABLE.get()
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
        hook = cls(**hook_kwargs_from_dict(doc))
        notes = sagemaker_notes(doc)
        if notes:
            hook.collector.note_config("sagemaker", notes)
        return hook

    # --- lifecycle -----------------------------------------------------------------------------------------
    def start(self) -> None:
        """Start writing (idempotent)."""
        raise NotImplementedError

    _close_at_exit = False

    def _close_at_exit_once(self) -> None:
        """Have the hook closed at interpreter exit or on SIGTERM/SIGHUP if the script never closes it."""
        if not self._close_at_exit:
            self._close_at_exit = True
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

        Runs even after an internal error disabled the hook, so that the run directory is always finished.
        """
        CLOSERS.untrack(self)
        with one_line_for_write_errors(self.out_dir):
            for part in [*self._close_steps(), self._close_parts, self.collector.finish_upload]:
                try:
                    part()
                except Exception as exc:
                    if env.TRAINSPECT_TESTING.get():
                        raise
                    self._fail("close", exc)

    def _close_parts(self) -> None:
        self._extras.before_close(self.collector)
        self.collector.close()
        self._extras.close(self.collector)
