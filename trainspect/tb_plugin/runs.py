"""Which run directories under the log directory hold trainspect data, and safe lookup by name.

A run is named as TensorBoard names it: the path of its directory relative to the log directory, with
``/`` separators (``.`` for the log directory itself). Names given in requests are only ever looked up in
the list built here, never joined onto a path, so ``../``, encoded slashes and absolute paths cannot escape
the log directory.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tensorboard import errors

__all__ = ["RunInfo", "RunIndex", "MARKERS"]

MARKERS = ("trainspect.json", "profiler")
"""Entries whose presence makes a directory a trainspect run (``rules/verdicts.json`` too)."""


@dataclass(frozen=True)
class RunInfo:
    """One run directory and what it holds.

    Attributes:
        name: the run's name (relative path, ``/``-separated; ``.`` for the log directory itself).
        path: the directory.
        has_manifest: ``trainspect.json`` exists.
        has_profiler: ``profiler/`` exists.
        has_verdicts: ``rules/verdicts.json`` exists.
        ended: the end marker ``training_job_end.ts`` exists.
        profiler_at: when its newest system-metric or framework file was written (``None``: no profiler data),
            so that the Profiler tab opens on the newest run with data.
    """

    name: str
    path: Path
    has_manifest: bool = False
    has_profiler: bool = False
    has_verdicts: bool = False
    ended: bool = False
    profiler_at: float | None = None

    @property
    def has_data(self) -> bool:
        """Whether the directory holds any trainspect data."""
        return self.has_manifest or self.has_profiler or self.has_verdicts

    def to_json(self) -> dict[str, object]:
        """The run as the ``/runs`` route returns it."""
        return {
            "name": self.name,
            "has_data": self.has_data,
            "manifest": self.has_manifest,
            "profiler": self.has_profiler,
            "verdicts": self.has_verdicts,
            "ended": self.ended,
            "profiler_at": self.profiler_at,
        }


def inspect_dir(name: str, path: Path) -> RunInfo:
    """Describe one directory (a few ``stat`` calls)."""
    try:
        names = {e.name for e in os.scandir(path)}
    except OSError:
        names = set()
    return RunInfo(
        name=name,
        path=path,
        has_manifest="trainspect.json" in names,
        has_profiler="profiler" in names,
        has_verdicts="rules" in names and (path / "rules" / "verdicts.json").is_file(),
        ended="training_job_end.ts" in names,
        profiler_at=_newest_file(path / "profiler") if "profiler" in names else None,
    )


def _newest_file(profiler: Path) -> float | None:
    """The newest mtime of the non-empty files in ``profiler/{system,framework}/<node or worker>/``."""
    newest = None
    for kind in ("system", "framework"):
        for sub in _subdirs(profiler / kind):
            try:
                entries = list(os.scandir(sub))
            except OSError:
                continue
            for entry in entries:
                try:
                    st = entry.stat(follow_symlinks=False)
                except OSError:
                    continue
                if entry.is_file(follow_symlinks=False) and st.st_size > 0:
                    newest = st.st_mtime if newest is None else max(newest, st.st_mtime)
    return newest


class RunIndex:
    """Finds trainspect runs under a log directory; results are cached for ``ttl_s`` seconds.

    Args:
        logdir: the log directory (``""`` when TensorBoard was started without one).
        max_depth: how deep below the log directory runs are searched.
        ttl_s: how long a scan is reused.

    Example:
        >>> import tempfile
        >>> RunIndex(tempfile.mkdtemp()).is_active()
        False
    """

    def __init__(self, logdir: str, max_depth: int = 4, ttl_s: float = 2.0) -> None:
        self.root = Path(logdir).resolve() if logdir else None
        self.max_depth = max_depth
        self.ttl_s = ttl_s
        self._lock = threading.Lock()
        self._runs: dict[str, RunInfo] = {}
        self._scanned_at = float("-inf")
        self._active = False
        self._checked_at = float("-inf")

    def is_active(self) -> bool:
        """Whether any trainspect run exists.

        Stops at the first run found, and a positive answer is kept; a negative one is rechecked at most every
        ``ttl_s`` (TensorBoard calls this on every ``/data/plugins_listing`` request).
        """
        if self._active:
            return True
        with self._lock:
            if time.monotonic() - self._checked_at > self.ttl_s:
                self._active = next(self._iter_runs(), None) is not None
                self._checked_at = time.monotonic()
        return self._active

    def runs(self, force: bool = False) -> dict[str, RunInfo]:
        """All trainspect runs by name (rescanned when the cached scan is older than ``ttl_s``)."""
        with self._lock:
            if force or time.monotonic() - self._scanned_at > self.ttl_s:
                self._runs = {info.name: info for info in self._iter_runs()}
                self._scanned_at = time.monotonic()
                self._active = self._active or bool(self._runs)
            return dict(self._runs)

    def _iter_runs(self) -> Iterator[RunInfo]:
        """Breadth-first walk (no symlinks, no hidden folders, not into runs); yields runs as found."""
        if self.root is None or not self.root.is_dir():
            return
        level = [self.root]
        for _depth in range(self.max_depth + 1):
            nxt: list[Path] = []
            for directory in level:
                info = inspect_dir(self._name(directory), directory)
                if info.has_data:
                    yield info
                    continue
                nxt.extend(_subdirs(directory))
            level = nxt

    def _name(self, directory: Path) -> str:
        assert self.root is not None
        rel = directory.relative_to(self.root).as_posix()
        return rel or "."

    def lookup(self, name: str | None, known: Iterable[str] = ()) -> RunInfo:
        """The run called ``name``: a scanned run, or a run TensorBoard listed (``known``) under the log directory.

        Raises:
            InvalidArgumentError: ``name`` is missing.
            NotFoundError: no run has that name.
        """
        if not name:
            raise errors.InvalidArgumentError("missing parameter 'run'")
        runs = self.runs()
        if name in runs:
            return runs[name]
        if self.root is not None and name in set(known):
            path = (self.root / name).resolve()
            if path.is_dir() and (path == self.root or self.root in path.parents):
                return inspect_dir(name, path)
        raise errors.NotFoundError(f"no run named {name!r}")


def _subdirs(directory: Path) -> list[Path]:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return []
    out = []
    for entry in entries:
        if entry.name.startswith("."):
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                out.append(Path(entry.path))
        except OSError:
            continue
    return sorted(out)
