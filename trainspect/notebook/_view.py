"""What every notebook view shares: where its data comes from, ``refresh()``, ``_repr_html_`` and display."""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from trainspect.notebook._svg import empty, esc, wrap
from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader

__all__ = ["RunSource", "View", "Run", "select", "display"]


def _refresh(reader: object) -> None:
    """Rescan a reader's folder, when the reader can (every reader of this and later versions)."""
    rescan = getattr(reader, "refresh_event_file_list", None)
    if callable(rescan):
        rescan()


Readable = str | os.PathLike[str] | SystemMetricsReader | FrameworkMetricsReader
"""A run directory (or SageMaker profiler-output folder), or a reader opened on one."""


class RunSource:
    """The readers of one run, opened once and rescanned on each :meth:`system` / :meth:`framework` call.

    Args:
        run: a run directory, a SageMaker profiler-output folder, or a reader (its path opens the other reader).
        framework_reader: a framework reader to use as is (smdebug's ``Heatmap(system_reader, framework_reader)``).
    """

    def __init__(self, run: Readable, framework_reader: FrameworkMetricsReader | None = None) -> None:
        if isinstance(run, SystemMetricsReader | FrameworkMetricsReader):
            self._target: str | os.PathLike[str] = run.path
        else:
            self._target = run  # kept as given: a URL (s3://…) is no local path
        self.path = Path(self._target)
        self._system = run if isinstance(run, SystemMetricsReader) else None
        given = run if isinstance(run, FrameworkMetricsReader) else None
        self._framework = framework_reader if framework_reader is not None else given

    @property
    def system_reader(self) -> SystemMetricsReader:
        """The system metrics reader (opened on first use)."""
        if self._system is None:
            self._system = SystemMetricsReader(self._target)
        return self._system

    @property
    def framework_reader(self) -> FrameworkMetricsReader:
        """The framework metrics reader (opened on first use)."""
        if self._framework is None:
            self._framework = FrameworkMetricsReader(self._target)
        return self._framework

    def system(self) -> dict[str, SystemArrays]:
        """Every node's system samples, as on disk now."""
        _refresh(self.system_reader)
        return self.system_reader.read_arrays()

    def framework(self) -> dict[str, FrameworkTables]:
        """Every worker's step and span tables, as on disk now."""
        _refresh(self.framework_reader)
        return self.framework_reader.read_tables()


Run = str | os.PathLike[str] | SystemMetricsReader | FrameworkMetricsReader | RunSource
"""What a view reads: a run directory (or SageMaker profiler-output folder), a reader opened on one, or a source."""


def select(available: Iterable[str], patterns: Sequence[str] | None, what: str) -> list[str]:
    """The names of ``available`` that any regular expression of ``patterns`` finds (all when ``patterns`` is None).

    Raises:
        ValueError: names exist and no pattern finds any of them (the message lists what exists).
    """
    names = list(dict.fromkeys(available))
    if patterns is None:
        return names
    if isinstance(patterns, str):
        patterns = [patterns]
    try:
        compiled = [re.compile(p) for p in patterns]
    except re.error as exc:
        raise ValueError(f"{what}: {exc} in {list(patterns)!r}") from exc
    chosen = [n for n in names if any(c.search(n) for c in compiled)]
    if names and not chosen:
        raise ValueError(f"no {what} matches {list(patterns)!r}; this run has: {', '.join(names)}")
    return chosen


def display(view: Any) -> Any:
    """Show ``view`` in the running IPython kernel (nothing outside one); return it."""
    try:
        from IPython import get_ipython
        from IPython.display import display as show
    except ImportError:  # plain Python: the caller prints or saves the HTML
        return view
    if get_ipython() is not None:
        show(view)
    return view


class View:
    """A notebook view: data read on :meth:`refresh`, drawn by :meth:`html`, returned raw by :meth:`figure`.

    Subclasses implement ``_load()`` (read the data into attributes), ``figure()`` and ``_body()`` (the HTML of
    the charts, or ``None`` for the empty state), and set ``title`` and ``empty_message``.
    """

    title = ""
    empty_message = "no data recorded yet"

    def refresh(self) -> View:
        """Read the run again (a running job's new samples and steps); return the view."""
        self._load()
        return self

    def _load(self) -> None:
        raise NotImplementedError

    def figure(self) -> Any:
        """The plotted data, for plotting it yourself."""
        raise NotImplementedError

    def _body(self) -> str | None:
        raise NotImplementedError

    def _note(self) -> str:
        return ""

    def html(self) -> str:
        """The view as self-contained HTML (inline SVG, no script, nothing fetched)."""
        body = self._body()
        return wrap(
            type(self).__name__, self.title, body if body is not None else empty(self.empty_message), self._note()
        )

    def _repr_html_(self) -> str:
        return self.html()

    def show(self) -> View:
        """Display the view in Jupyter (when running in a kernel); return it."""
        return display(self)

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the view as a standalone HTML page; return its path."""
        out = Path(path)
        out.write_text(
            f'<!doctype html><html><head><meta charset="utf-8"><title>{esc(self.title)}</title></head>'
            f"<body>{self.html()}</body></html>",
            encoding="utf-8",
        )
        return out
