"""``Progress``: a progress bar on stderr for commands that can take seconds, shown only on a terminal.

tqdm draws it when installed (it is optional); without tqdm, or when stderr is not a terminal (a pipe, a log file,
CI), nothing is drawn. Work of unknown length (a stage of a report) shows its stage and the time elapsed, refreshed
by a small daemon thread; counted work (rules over steps, batches uploaded) shows a bar.
"""

from __future__ import annotations

import sys
import threading
from types import TracebackType
from typing import Any, TextIO

__all__ = ["Progress"]


class Progress:
    """A progress bar on ``stream`` (stderr), drawn only when it is a terminal.

    Args:
        desc: what is being done.
        total: number of units, or None for work of unknown length (stages and elapsed time).
        unit: the unit's name.
        stream: where to draw (default ``sys.stderr``).

    Example:
        >>> import io
        >>> with Progress("reading", total=2, stream=io.StringIO()) as bar:  # not a terminal: draws nothing
        ...     bar.update()
        ...     bar.stage("rendering")
        >>> bar.shown
        False
    """

    def __init__(self, desc: str, total: int | None = None, unit: str = "it", stream: TextIO | None = None) -> None:
        self.desc = desc
        self.total = total
        self.unit = unit
        self.stream = stream if stream is not None else sys.stderr
        self._bar: Any = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def shown(self) -> bool:
        """Whether a bar is drawn."""
        return self._bar is not None

    def _tty(self) -> bool:
        try:
            return bool(self.stream.isatty())
        except (AttributeError, ValueError):
            return False

    def __enter__(self) -> Progress:
        if not self._tty():
            return self
        try:
            from tqdm import tqdm
        except ImportError:
            return self
        fmt = "{desc}: {elapsed}" if self.total is None else None
        self._bar = tqdm(
            total=self.total,
            desc=self.desc,
            unit=self.unit,
            file=self.stream,
            leave=False,
            dynamic_ncols=True,
            bar_format=fmt,
            mininterval=0.25,
        )
        if self.total is None:
            self._thread = threading.Thread(target=self._tick, name="trainspect-progress", daemon=True)
            self._thread.start()
        return self

    def _tick(self) -> None:
        while not self._stop.wait(0.5):
            bar = self._bar
            if bar is not None:
                bar.refresh()

    def update(self, n: int = 1) -> None:
        """``n`` more units done."""
        if self._bar is not None:
            self._bar.update(n)

    def stage(self, desc: str) -> None:
        """Name the current stage."""
        if self._bar is not None:
            self._bar.set_description_str(f"{self.desc}: {desc}")

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._bar is not None:
            self._bar.close()
            self._bar = None
