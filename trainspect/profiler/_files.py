"""Incremental (tail-able) reading of frame files, with one warning per damaged file."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from trainspect.profiler.schema import Frame, scan_frames
from trainspect.store.safe_files import open_regular

logger = logging.getLogger(__name__)

STALE_S = 5.0
"""A file whose last frame is cut off and that has not changed for this long is reported as truncated."""
_END_MARKER = "training_job_end.ts"
MAX_FILE_WARNINGS = 20
"""Damaged frame files of one folder named at WARNING level; the others at DEBUG (thousands must not flood)."""
_FILES_WARNED: dict[Path, int] = {}


class TailedFile:
    """Reads the frames appended to a file since the last :meth:`poll`.

    A cut-off last frame is waited for while the job may still write it; it is reported as truncated once the job
    has ended (its end marker exists) or the file has not changed for :data:`STALE_S` seconds.

    Args:
        path: the file.

    Attributes:
        problems: every problem found in the file so far (the first one is also logged as a warning).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.offset = 0
        self.warned = False
        self.problems: list[str] = []

    def poll(self) -> list[Frame]:
        """Frames written since the last call; damaged frames are skipped with one warning per file."""
        try:
            with open_regular(self.path) as fh:
                if os.fstat(fh.fileno()).st_size <= self.offset:
                    return []
                fh.seek(self.offset)
                data = fh.read()
        except OSError as exc:
            self.warn(f"cannot read it: {exc}")
            return []
        scan = scan_frames(data)
        self.offset += scan.next_offset
        problems = list(scan.problems)
        if scan.truncated_tail and self._stale():
            problems.append(f"last frame truncated ({len(data) - scan.next_offset} bytes)")
            self.offset += len(data) - scan.next_offset
        if problems:
            self.warn("; ".join(problems))
        return scan.frames

    def _stale(self) -> bool:
        if any((parent / _END_MARKER).exists() for parent in list(self.path.parents)[:4]):
            return True  # the run directory (three levels up) or a SageMaker folder says the job is over
        try:
            return time.time() - self.path.stat().st_mtime > STALE_S
        except OSError:
            return True

    def warn(self, text: str) -> None:
        """Log one warning for this file (later ones go to DEBUG); every problem is kept in :attr:`problems`."""
        if len(self.problems) < 20:
            self.problems.append(f"skipped damaged profiler data in {self.path}: {text}")
        if self.warned:
            logger.debug("%s: %s", self.path, text)
            return
        self.warned = True
        count = _FILES_WARNED[self.path.parent] = _FILES_WARNED.get(self.path.parent, 0) + 1
        if count > MAX_FILE_WARNINGS:
            logger.debug("trainspect: skipped damaged profiler data in %s: %s", self.path, text)
            return
        logger.warning("trainspect: skipped damaged profiler data in %s: %s", self.path, text)
        if count == MAX_FILE_WARNINGS:
            logger.warning(
                "trainspect: %d damaged profiler files named in %s; further ones there are logged at DEBUG level "
                "(the readers' problems list every one)",
                MAX_FILE_WARNINGS,
                self.path.parent,
            )
