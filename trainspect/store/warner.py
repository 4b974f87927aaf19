"""Problems of damaged files, logged without flooding the log: one line per kind of problem with a count."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

__all__ = ["Kind", "Warner", "PROFILER_DATA"]

_LOGGER = logging.getLogger(__name__)


@dataclass(frozen=True)
class Kind:
    """One kind of problem, and how a line about it reads.

    Attributes:
        noun: the skipped items, plural ("damaged profiler files", "corrupt index records").
        prefix: put before ``<path>: <reason>`` in the line of one file ("skipped damaged profiler data in ").
        per_file: the items are the files themselves (else a file holds any number of them, given as ``count``).
    """

    noun: str
    prefix: str = ""
    per_file: bool = True


PROFILER_DATA = Kind("damaged profiler files", "skipped damaged profiler data in ")
"""The kind of :class:`Warner`'s problems unless told otherwise."""


@dataclass
class _Tally:
    files: int = 0
    items: int = 0
    first: str = ""
    first_count: int = 0

    def add(self, message: str, count: int, new_file: bool) -> None:
        if new_file:
            self.files += 1
            if not self.first:
                self.first, self.first_count = message, count
        self.items += count

    def line(self, kind: Kind) -> str:
        """One line for the tally: the first file's message alone, or the counts and the first file."""
        if self.files == 1 and (kind.per_file or self.items == self.first_count):
            return self.first
        first = self.first.removeprefix(kind.prefix)
        if kind.per_file:
            return f"skipped {self.files:,} {kind.noun} (first: {first})"
        return f"skipped {self.items:,} {kind.noun} in {self.files:,} file{'s' * (self.files != 1)}, first: {first}"


class Warner:
    """Problems per damaged file, logged without flooding the log.

    A problem has a kind (:class:`Kind`), a file and a reason; a file is taken once per kind (later calls only
    add to the count of a :attr:`Kind.per_file` ``False`` kind). Immediate (the default): the first :attr:`SHOWN`
    files are logged one line each, the rest only counted. Deferred (``deferred=True``): nothing is logged until
    :meth:`flush`, which logs one line per kind: the file's own line for one file, else an aggregated line
    ("skipped 1,999 damaged profiler files (first: …)", "skipped 412 corrupt index records in 37 files, first: …").
    Every problem is kept in :attr:`problems`; :meth:`lines` gives at most :attr:`SHOWN` of them per kind and a count
    of the others, :meth:`summary` one line per kind.
    """

    SHOWN = 20

    def __init__(self, deferred: bool = False, kind: Kind = PROFILER_DATA, logger: logging.Logger = _LOGGER) -> None:
        self.logger = logger
        self.problems: dict[tuple[Kind, Path | str], str] = {}
        self.deferred = deferred
        self.kind = kind
        self._totals: dict[Kind, _Tally] = {}
        self._pending: dict[Kind, _Tally] = {}
        self._pending_keys: set[tuple[Kind, Path | str]] = set()

    def __call__(self, path: Path | str, text: str, kind: Kind | None = None, count: int = 1) -> None:
        """Note ``count`` items of ``kind`` (default: :attr:`kind`) skipped in ``path`` because of ``text``."""
        kind = kind or self.kind
        key = (kind, path)
        new_file = key not in self.problems
        if not new_file and kind.per_file:
            return
        message = self.problems.setdefault(key, f"{kind.prefix}{path}: {text}")
        total = self._totals.setdefault(kind, _Tally())
        total.add(message, count, new_file)
        if self.deferred:
            if new_file or key in self._pending_keys:
                self._pending_keys.add(key)
                self._pending.setdefault(kind, _Tally()).add(message, count, new_file)
        elif new_file and total.files <= self.SHOWN:
            self.logger.warning("trainspect: %s", message)

    def flush(self) -> None:
        """Log what was deferred since the last call: one line per kind whatever the number of files."""
        pending, self._pending = self._pending, {}
        self._pending_keys.clear()
        for kind, tally in pending.items():
            self.logger.warning("trainspect: %s", tally.line(kind))

    def lines(self) -> list[str]:
        """Per kind, the first :attr:`SHOWN` problems, then one line counting the others."""
        out: list[str] = []
        for kind, total in self._totals.items():
            out += islice((text for (k, _path), text in self.problems.items() if k == kind), self.SHOWN)
            more = total.files - self.SHOWN
            if more > 0:
                out.append(
                    f"skipped {more:,} more {kind.noun}"
                    if kind.per_file
                    else f"skipped {kind.noun} in {more:,} more files ({total.items:,} in all)"
                )
        return out

    def summary(self) -> list[str]:
        """One line per kind: the file's own line for one file, else the counts and the first file."""
        return [total.line(kind) for kind, total in self._totals.items()]
