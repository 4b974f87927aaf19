"""Cached, incrementally refreshed data of one run directory: profiler arrays and tables, and verdicts.

The profiler readers keep their file offsets, so a refresh reads only what a running job appended since the
last request. Damaged data is skipped by the readers with a logged warning; :class:`RunData` also collects
those warnings so that the view can say what was skipped.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from pathlib import Path

import pandas as pd

from trainspect.exceptions import DamagedFile
from trainspect.profiler.data import ProfilerData, missing_files
from trainspect.profiler.detailed import read_tables
from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader
from trainspect.rules.verdict import Verdict, read_verdicts
from trainspect.store.layout import RunLayout

__all__ = ["RunData"]

_PROFILER_LOGGER = "trainspect.profiler"
_RECHECK_S = 5.0


class _Collect(logging.Handler):
    """Collects the warnings about one run's files while its data is read."""

    def __init__(self, path: Path, sink: list[str]) -> None:
        super().__init__(logging.WARNING)
        self.needle = str(path)
        self.sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage().removeprefix("trainspect: ")
        _add_problem(self.sink, text, self.needle)


def _add_problem(sink: list[str], text: str, root: str) -> None:
    """Append one problem line (the run's path shown as ``<run>``) unless it is there already; at most 20."""
    if root in text:
        text = text.replace(root, "<run>")
        if text not in sink and len(sink) < 20:
            sink.append(text)


class RunData:
    """The data of one run, refreshed on each call.

    Args:
        path: the run directory.

    Example:
        >>> import tempfile
        >>> RunData(Path(tempfile.mkdtemp())).verdicts()
        ([], None)
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.layout = RunLayout(path)
        self._lock = threading.Lock()
        self._system = SystemMetricsReader(path)
        self._framework = FrameworkMetricsReader(path)
        self._tables_key: tuple[tuple[str, int, int], ...] | None = None
        self._operators = pd.DataFrame()
        self._python = pd.DataFrame()
        self._verdicts_key: tuple[int, int] | None = None
        self._verdicts: tuple[list[Verdict], str | None] = ([], None)
        self.problems: list[str] = []
        self._table_problems: list[str] = []
        self._missing: list[str] = []
        self._missing_at = float("-inf")

    def profiler(self) -> ProfilerData:
        """The run's profiler data as it is on disk now (new samples and records are read incrementally)."""
        with self._lock:
            handler = _Collect(self.path, self.problems)
            logger = logging.getLogger(_PROFILER_LOGGER)
            logger.addHandler(handler)
            try:
                system = self._system.read_arrays()
                framework = self._framework.read_tables()
                self._refresh_tables()
            finally:
                logger.removeHandler(handler)
            for text in self._system.problems() + self._framework.problems() + self._table_problems:
                _add_problem(self.problems, text, str(self.path))
            for text in self._missing_files():
                _add_problem(self.problems, text, str(self.path))
            return ProfilerData(
                path=self.path,
                source=self._system.source,
                system=system,
                framework=framework,
                operators=self._operators,
                python_stats=self._python,
                job_ended=self.layout.end_marker.exists(),
                problems=list(self.problems),
            )

    def _missing_files(self) -> list[str]:
        """Missing profiler files, rechecked at most every few seconds (a live view polls)."""
        if self._system.source == "trainspect" and time.monotonic() - self._missing_at > _RECHECK_S:
            self._missing = missing_files(self.path, self._system.root)
            self._missing_at = time.monotonic()
        return self._missing

    def _refresh_tables(self) -> None:
        detailed = self._system.root / "detailed"
        files = sorted(detailed.glob("*/*.json")) if detailed.is_dir() else []
        key = []
        for f in files:
            try:
                st = f.stat()
            except OSError:
                continue
            key.append((str(f), st.st_mtime_ns, st.st_size))
        if tuple(key) != self._tables_key:
            self._table_problems = []
            self._operators = read_tables(detailed, "operators", self._table_problems)
            self._python = read_tables(detailed, "python", self._table_problems)
            self._tables_key = tuple(key)

    def version(self, data: ProfilerData) -> tuple[object, ...]:
        """A cheap key that changes whenever ``data`` or the verdicts change (to reuse computed views)."""
        system = tuple((n, len(a), a.keys) for n, a in sorted(data.system.items()))
        framework = tuple(
            (w, t.step_count, len(t.spans["start"]), t.close_time) for w, t in sorted(data.framework.items())
        )
        return system, framework, self._tables_key, self._verdicts_key, data.job_ended, len(self.problems)

    def verdicts(self) -> tuple[list[Verdict], str | None]:
        """The verdicts of ``rules/verdicts.json`` and an error text when the file cannot be read."""
        target = self.layout.verdicts
        with self._lock:
            try:
                st = target.stat()
            except OSError:
                return [], None
            key = (st.st_mtime_ns, st.st_size)
            if key != self._verdicts_key:
                self._verdicts = _read(target)
                self._verdicts_key = key
            return self._verdicts


def _read(target: Path) -> tuple[list[Verdict], str | None]:
    try:
        return read_verdicts(target), None
    except DamagedFile as exc:
        reason = str(exc).removeprefix(f"{target}: ")
        if reason.startswith("not valid JSON"):
            reason = "not valid JSON"
        return [], f"rules/verdicts.json could not be read ({reason})"
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        reason = "not valid JSON" if isinstance(exc, json.JSONDecodeError) else f"{type(exc).__name__}: {exc}"
        return [], f"rules/verdicts.json could not be read ({reason})"
