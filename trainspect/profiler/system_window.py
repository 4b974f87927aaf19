"""System samples of a time window, reading only the chunk files that can hold it.

The system writer (:class:`trainspect.profiler.writers.SystemChunkWriter`) starts a new file of a node every hour
and whenever its metric keys change, named after its first sample: ``<start ms, 13 digits>.tsys``. Files of one node
follow each other in time, so file ``i`` holds samples in ``[start_i, min(start_{i+1}, start_i + 1 h))``: a
one-hour window of a 24-hour run reads one or two files per node, not 24. Files once read are kept and only their
new frames are read again, so a store kept open follows a running job.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from trainspect.profiler import schema
from trainspect.profiler._native import _SystemFile
from trainspect.profiler.arrays import SystemArrays, merge_system
from trainspect.profiler.writers import _ROTATE_S as FILE_SPAN_S  # the writer's rotation: a file spans at most this

__all__ = ["SystemFileWindow", "needed_files"]

logger = logging.getLogger(__name__)
_SLACK_S = 0.001
"""File names hold the first sample's time in whole milliseconds (rounded down); samples are kept to the ms."""


def _start_of(path: Path) -> float | None:
    try:
        return int(path.stem[:13]) / 1000.0
    except ValueError:
        return None


def needed_files(paths: list[Path], start: float | None, end: float | None) -> list[Path]:
    """The files of one node whose samples can lie in ``[start, end)`` (epoch seconds; None: unbounded).

    A file's samples lie before the next file's start and within :data:`FILE_SPAN_S` of its own.

    Example:
        >>> files = [Path(f"{ms:013d}.tsys") for ms in (0, 3_600_000, 7_200_000)]
        >>> [p.stem.lstrip("0") or "0" for p in needed_files(files, 3700.0, 3800.0)]
        ['3600000']
        >>> needed_files(files, 20_000.0, 20_001.0)  # after the last file's hour
        []
        >>> len(needed_files(files, None, None))
        3
    """
    timed = sorted((t, p) for p in paths if (t := _start_of(p)) is not None)
    out = []
    for i, (first, path) in enumerate(timed):
        following = min(timed[i + 1][0], first + FILE_SPAN_S) if i + 1 < len(timed) else first + FILE_SPAN_S
        if end is not None and first >= end:
            break
        if start is not None and following + _SLACK_S <= start:
            continue
        out.append(path)
    return out


class SystemFileWindow:
    """The ``system/<node>/*.tsys`` files of a profiler folder, read where a window needs them.

    Args:
        root: the profiler folder (holding ``system/``).

    Example:
        >>> import tempfile
        >>> SystemFileWindow(Path(tempfile.mkdtemp())).arrays(0.0, 1.0)
        {}
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self._files: dict[Path, _SystemFile] = {}
        self.files_read: set[Path] = set()
        """Every file read so far (for tests and benchmarks)."""

    def nodes(self) -> list[str]:
        """The nodes with a system folder, sorted."""
        system = self.root / "system"
        return sorted(d.name for d in system.iterdir() if d.is_dir()) if system.is_dir() else []

    def _paths(self, node: str) -> list[Path]:
        return sorted((self.root / "system" / node).glob(f"*{schema.SYSTEM_SUFFIX}"))

    def _read(self, path: Path) -> _SystemFile:
        store = self._files.get(path)
        if store is None:
            store = self._files[path] = _SystemFile(path)
        store.poll()
        self.files_read.add(path)
        return store

    def node_arrays(self, node: str, start: float | None, end: float | None) -> SystemArrays:
        """One node's samples with ``start <= timestamp < end``."""
        parts = []
        interval = None
        for path in needed_files(self._paths(node), start, end):
            store = self._read(path)
            arr = store.arrays()
            if arr is not None:
                parts.append((arr[0], store.keys, arr[1]))
                interval = store.interval_ms or interval
        merged = merge_system(node, parts, interval)
        ts = merged.timestamps
        lo = 0 if start is None else int(np.searchsorted(ts, start, "left"))
        hi = len(ts) if end is None else int(np.searchsorted(ts, end, "left"))
        return SystemArrays(node, ts[lo:hi], merged.keys, merged.values[lo:hi], interval)

    def arrays(self, start: float | None, end: float | None, nodes: list[str] | None = None) -> dict[str, SystemArrays]:
        """``{node: samples with start <= timestamp < end}`` of the nodes (default all) that have any there."""
        out = {}
        for node in self.nodes() if nodes is None else nodes:
            arrays = self.node_arrays(node, start, end)
            if len(arrays):
                out[node] = arrays
        return out

    def span(self) -> tuple[float, float] | None:
        """(first, last) sample time over every node (reads each node's first and last file), or None."""
        firsts, lasts = [], []
        for node in self.nodes():
            paths = needed_files(self._paths(node), None, None)
            for path in {paths[0], paths[-1]} if paths else ():
                arr = self._read(path).arrays()
                if arr is not None and len(arr[0]):
                    firsts.append(float(arr[0][0]))
                    lasts.append(float(arr[0][-1]))
        return (min(firsts), max(lasts)) if firsts else None
