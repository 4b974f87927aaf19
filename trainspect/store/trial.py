"""The Trial: query what a job saved, by tensor, step, mode and worker, while it runs or after (spec 5.6)."""

from __future__ import annotations

import contextlib
import enum
import logging
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trainspect.collections import Collection
from trainspect.exceptions import NoMoreData, StepUnavailable, TensorUnavailable
from trainspect.modes import ModeKeys, parse_mode
from trainspect.store.gaps import gaps_summary, read_gaps
from trainspect.store.index import Source, TrialIndex
from trainspect.store.remote.url import is_url
from trainspect.store.tensor import Tensor

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["Trial", "StepState", "create_trial"]

log = logging.getLogger(__name__)
_RECHECK_S = 2.0
"""While the job runs, its files are checked for damage at most this often."""


class StepState(enum.Enum):
    """Whether a step can be read (``has_passed_step``)."""

    UNAVAILABLE = 0
    AVAILABLE = 1
    NOT_YET_AVAILABLE = 2


class Trial:
    """A run directory opened for reading.

    Every query first reads what the job wrote since the last query (unless the job has ended and everything is
    loaded, or inside :meth:`no_refresh`).

    Args:
        path: the run directory (trainspect's, or an smdebug trial directory).
        name: a display name (default: the folder's name).
        source: the reader to use (default: detected from the folder).
    """

    def __init__(self, path: str | Path, name: str | None = None, source: Source | None = None) -> None:
        if source is None and is_url(path):  # s3://…, gs://…: read through a local copy (store/remote)
            from trainspect.store.remote.reader import open_remote

            source, path, name = open_remote(str(path), name)
        self.path = Path(path)
        self.name = name or self.path.name
        if source is None:
            from trainspect.store.detect import detect_source  # the readers load only when a Trial is opened

            source = detect_source(self.path)
        self._source: Source = source
        self._index = TrialIndex()
        self._refresh_enabled = True
        self._ended = False
        self._collections: dict[str, Collection] | None = None
        self._tensors: dict[str, Tensor] = {}
        self._notes: list[str] = []
        self._checked_over = False
        self._checked_at = float("-inf")
        self.refresh()

    # --- loading -------------------------------------------------------------------------------------------
    def refresh(self) -> None:
        """Read whatever was written since the last refresh."""
        ended_before = self._source.ended()
        if self._source.refresh(self._index):
            self._collections = None
        self._ended = ended_before
        if not self._checked_over and time.monotonic() - self._checked_at > _RECHECK_S:
            self._check_files()

    def _maybe_refresh(self) -> None:
        if self._refresh_enabled and not self._ended:
            self.refresh()

    @contextlib.contextmanager
    def no_refresh(self) -> Iterator[Trial]:
        """Within this block, queries read nothing new (consistent snapshots for rules)."""
        previous, self._refresh_enabled = self._refresh_enabled, False
        try:
            yield self
        finally:
            self._refresh_enabled = previous

    @property
    def loaded_all_steps(self) -> bool:
        """True once the end marker is seen and everything written was read."""
        self._maybe_refresh()
        return self._ended

    @property
    def job_ended(self) -> bool:
        """Whether the job wrote its end marker."""
        return self._ended or self._source.ended()

    def _check_files(self) -> None:
        """Name the files of the run that are missing or damaged (checked again until the job is over)."""
        from trainspect.store import inventory
        from trainspect.store.source import TrainspectSource

        if not isinstance(self._source, TrainspectSource):
            self._checked_over = True
            return
        layout = self._source.layout
        self._checked_at = time.monotonic()
        over = self._ended or inventory.job_over(layout)
        for problem in inventory.tensor_problems(layout, over):
            self._note(problem)
        self._checked_over = over

    def _note(self, message: str) -> None:
        """Record a problem of the run directory and log it once."""
        if message not in self._notes:
            self._notes.append(message)
            log.warning("trainspect: %s", message)

    @property
    def problems(self) -> list[str]:
        """What could not be read, and what was never written, one line each.

        Missing or damaged files and skipped records name the file; the gaps the writer recorded when it fell
        behind training (:mod:`trainspect.store.gaps`) are one line.
        """
        return list(dict.fromkeys([*self._notes, *getattr(self._source, "problems", []), *self._gap_notes()]))

    def _gap_notes(self) -> list[str]:
        path = getattr(self, "path", None)
        if path is None:
            return []
        text = gaps_summary(read_gaps(path))
        return [f"{path}: {text}"] if text else []

    @property
    def corrupt_records(self) -> int:
        """How many corrupt or truncated records were skipped so far."""
        return self._source.corrupt_records

    # --- steps and modes -----------------------------------------------------------------------------------
    def steps(self, mode: ModeKeys | str = ModeKeys.GLOBAL, show_incomplete_steps: bool = False) -> list[int]:
        """Return the saved steps: global steps, or the mode steps of ``mode``."""
        self._maybe_refresh()
        mode = parse_mode(mode)
        steps = self._index.sorted_steps
        if not show_incomplete_steps and not (self._ended or len(self._index.workers) <= 1):  # else all complete
            steps = [s for s in steps if self._complete(s)]
        if mode is ModeKeys.GLOBAL:
            return list(steps)
        return [self._index.steps[s].mode_step for s in steps if self._index.steps[s].mode is mode]

    def _complete(self, global_step: int) -> bool:
        if self._ended or len(self._index.workers) <= 1:
            return True
        return len(self._index.steps[global_step].workers) >= len(self._index.workers)

    def modes(self) -> list[ModeKeys]:
        """Return the modes that have data."""
        self._maybe_refresh()
        return sorted(m for m, steps in self._index.by_mode.items() if steps)

    def mode(self, global_step: int) -> ModeKeys:
        """Return the mode of a global step."""
        return self._step_info(global_step).mode

    def mode_step(self, global_step: int) -> int:
        """Return the mode step of a global step."""
        return self._step_info(global_step).mode_step

    def global_step(self, mode: ModeKeys | str, mode_step: int) -> int:
        """Return the global step of a mode step.

        Raises:
            StepUnavailable: no such step was saved.
        """
        mode = parse_mode(mode)
        if mode is ModeKeys.GLOBAL:
            return mode_step
        gs = self._index.by_mode.get(mode, {}).get(mode_step)
        if gs is None:
            self._maybe_refresh()
            gs = self._index.by_mode.get(mode, {}).get(mode_step)
        if gs is None:
            raise StepUnavailable(mode_step, mode)
        return gs

    def step_wall_time(self, global_step: int) -> float | None:
        """Return the wall time (epoch seconds) at which a step was recorded."""
        info = self._index.steps.get(global_step)
        return info.wall_time if info else None

    def _step_info(self, global_step: int) -> Any:
        info = self._index.steps.get(global_step)
        if info is None:
            self._maybe_refresh()
            info = self._index.steps.get(global_step)
        if info is None:
            raise StepUnavailable(global_step, ModeKeys.GLOBAL)
        return info

    @property
    def last_complete_step(self) -> int | None:
        """The newest global step every worker wrote."""
        done = [s for s in self._index.sorted_steps if self._complete(s)]
        return done[-1] if done else None

    def has_passed_step(self, step: int, mode: ModeKeys | str = ModeKeys.GLOBAL) -> StepState:
        """Return whether a step is available, not yet available, or will never be (spec 5.6)."""
        self._maybe_refresh()
        mode = parse_mode(mode)
        steps = self.steps(mode, show_incomplete_steps=True)
        if step in steps:
            gs = self.global_step(mode, step)
            return StepState.AVAILABLE if self._complete(gs) else StepState.NOT_YET_AVAILABLE
        later = [s for s in steps if s > step]
        if later:
            last = self.last_complete_step
            nxt = self.global_step(mode, later[0])
            return StepState.UNAVAILABLE if last is not None and last >= nxt else StepState.NOT_YET_AVAILABLE
        return StepState.UNAVAILABLE if self._ended else StepState.NOT_YET_AVAILABLE

    def wait_for_steps(
        self,
        steps: Iterable[int],
        mode: ModeKeys | str = ModeKeys.GLOBAL,
        poll: float = 2.0,
        timeout: float | None = None,
    ) -> None:
        """Block until every step is available.

        Raises:
            StepUnavailable: a step will never exist (or ``timeout`` passed).
            NoMoreData: the job ended before the step.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        for step in steps:
            while True:
                state = self.has_passed_step(step, mode)
                if state is StepState.AVAILABLE:
                    break
                if state is StepState.UNAVAILABLE:
                    done = self.steps(mode)
                    if self._ended and (not done or step > done[-1]):
                        raise NoMoreData(step, parse_mode(mode), done[-1] if done else None)
                    raise StepUnavailable(step, parse_mode(mode))
                if deadline is not None and time.monotonic() > deadline:
                    raise StepUnavailable(step, parse_mode(mode))
                time.sleep(poll)
                self.refresh()

    def incomplete_steps(self) -> dict[int, list[str]]:
        """Return ``{global step: workers that did not write it}`` for steps some worker is missing.

        While the job runs these may still complete; after the end (or a crash) they are the steps a dead or slow
        rank never wrote. They are left out of :meth:`steps` unless ``show_incomplete_steps=True``.
        """
        self._maybe_refresh()
        expected = set(self.workers())
        out: dict[int, list[str]] = {}
        if len(expected) <= 1:
            return out
        counts = self._index.worker_counts()
        if counts is not None:  # only the steps some worker did not write are looked at one by one
            steps, written = counts
            candidates = steps[written < len(expected)].tolist()
        else:
            candidates = self._index.sorted_steps
        for step in candidates:
            missing = expected - self._index.steps[step].workers
            if missing:
                out[step] = sorted(missing)
        return out

    # --- workers, collections, tensors ---------------------------------------------------------------------
    def workers(self) -> list[str]:
        """Return the sorted worker names (``worker_0`` …)."""
        self._maybe_refresh()
        return sorted(self._index.workers | set(self._source.worker_names()))

    def collections(self) -> dict[str, Collection]:
        """Return the collections, by name."""
        if self._collections is None:
            self._collections = self._source.collections()
        return self._collections

    def collection(self, name: str) -> Collection:
        """Return one collection.

        Raises:
            KeyError: no such collection; the message lists the recorded ones.
        """
        colls = self.collections()
        if name not in colls:
            raise KeyError(f"collection {name!r} was not recorded; recorded: {', '.join(sorted(colls)) or '(none)'}")
        return colls[name]

    def tensor_names(
        self,
        step: int | None = None,
        mode: ModeKeys | str = ModeKeys.GLOBAL,
        regex: str | list[str] | None = None,
        collection: str | Collection | None = None,
    ) -> list[str]:
        """Return the sorted names of saved tensors, filtered by step, regex or collection.

        Raises:
            ValueError: both ``regex`` and ``collection`` were given.
        """
        if regex is not None and collection is not None:
            raise ValueError("tensor_names: give regex or collection, not both")
        self._maybe_refresh()
        names: Iterable[str] = self._index.tensor_names()
        if step is not None:
            gs = self.global_step(mode, step)
            names = [n for n in names if gs in self._index.tensors[n]]
        if regex is not None:
            pats = [re.compile(r) for r in ([regex] if isinstance(regex, str) else regex)]
            names = [n for n in names if any(p.search(n) for p in pats)]
        if collection is not None:
            coll = collection if isinstance(collection, Collection) else self.collections().get(collection)
            names = [n for n in names if coll is not None and (n in coll.tensor_names or coll.matches(n))]
        return sorted(names)

    def has_tensor(self, name: str) -> bool:
        """Return whether a tensor was saved."""
        if not self._index.has_tensor(name):
            self._maybe_refresh()
        return self._index.has_tensor(name)

    def tensor(self, name: str) -> Tensor:
        """Return a tensor by name.

        Raises:
            TensorUnavailable: it was never saved.
        """
        if not self.has_tensor(name):
            raise TensorUnavailable(name)
        if name not in self._tensors:
            self._tensors[name] = Tensor(name, self, self._index, self._source)
        return self._tensors[name]

    def dataframe(
        self,
        names: str | Sequence[str] | None = None,
        collection: str | None = None,
        mode: ModeKeys | str | None = None,
        reductions: str | Sequence[str] | None = None,
        workers: str | Sequence[str] | None = None,
        wide: bool = False,
    ) -> pd.DataFrame:
        """The saved tensors as a pandas DataFrame (:func:`trainspect.store.frames.tensor_frame`).

        Long form: columns ``step, mode, mode_step, worker, name, value`` (or one column per reduction when
        ``reductions`` are asked); ``wide=True`` pivots it to one column per tensor. ``names`` are names or
        ``fnmatch`` patterns; ``workers="all"`` gives each worker's own rows.

        Raises:
            NotRecorded: a tensor, worker or collection the run did not record (the message lists the recorded
                ones).
            ValueError: an unknown reduction.

        Example::

            trial.dataframe(collection="losses", mode="TRAIN")  # every training loss, one row per step and worker
        """
        from trainspect.store.frames import tensor_frame  # pandas loads on the first frame, not with the Trial

        return tensor_frame(self, names, collection, mode, reductions, workers, wide)

    def close(self) -> None:
        """Release open files."""
        self._source.close()

    def __repr__(self) -> str:
        return f"Trial({str(self.path)!r}, steps={len(self._index.steps)}, tensors={len(self._index.tensors)})"


def create_trial(path: str | Path, name: str | None = None) -> Trial:
    """Open a run directory (trainspect's or smdebug's) for reading.

    Missing or damaged files are named in warnings and listed in :attr:`Trial.problems`.

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotARunDirectory: ``path`` is a file, or a directory that holds no run.

    Example:
        >>> import tempfile, trainspect
        >>> trainspect.create_trial(tempfile.mkdtemp())  # doctest: +IGNORE_EXCEPTION_DETAIL
        Traceback (most recent call last):
        ...
        trainspect.exceptions.NotARunDirectory: create_trial: ... holds no run (no trainspect.json, ...)
    """
    return Trial(path, name=name)
