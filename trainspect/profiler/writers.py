"""Append-only writers of profiler files (format in :mod:`trainspect.profiler.schema`).

Framework-free; the system monitor and the framework recorder (in ``trainspect.hooks``) drive them from
their background threads. Each frame is written with one ``os.write`` on an ``O_APPEND`` descriptor, so
concurrent readers only ever see whole frames.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.profiler import schema

__all__ = ["FrameFile", "SystemChunkWriter"]

_ROTATE_S = 3600.0


class FrameFile:
    """One append-only file of frames.

    Args:
        path: the file (created, with its parents, when missing).
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.bytes_written = 0

    def write(self, kind: int, payload: bytes) -> None:
        """Append one frame."""
        if self._fd is None:
            raise ValueError(f"{self.path} is closed")
        data = schema.encode_frame(kind, payload)
        os.write(self._fd, data)
        self.bytes_written += len(data)

    def write_json(self, kind: int, obj: Mapping[str, Any]) -> None:
        """Append one JSON frame (``SCHEMA`` or ``EVENT``)."""
        self.write(kind, schema.encode_json(obj))

    def close(self) -> None:
        """Close the file (idempotent)."""
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


class SystemChunkWriter:
    """Buffers system samples and writes them as columnar chunks to ``<system_dir>/<start ms>.tsys``.

    A new file starts every hour and whenever the set of metric keys changes; each file begins with a
    ``SCHEMA`` frame naming the node, the interval and the metric keys with their encodings.

    Args:
        directory: the node's system directory (``RunLayout.system_dir(node)``).
        node: the node's name.
        interval_ms: the sampling interval, recorded in the schema.
    """

    def __init__(self, directory: str | os.PathLike[str], node: str, interval_ms: int) -> None:
        self.directory = Path(directory)
        self.node = node
        self.interval_ms = interval_ms
        self._file: FrameFile | None = None
        self._file_start = 0.0
        self._keys: tuple[str, ...] = ()
        self._encodings: tuple[str, ...] = ()
        self._times: list[int] = []
        self._rows: list[list[float]] = []
        self.samples_written = 0

    @property
    def bytes_written(self) -> int:
        """Bytes written to the current file (for benchmarks)."""
        return self._file.bytes_written if self._file else 0

    def append(self, timestamp: float, metrics: Mapping[str, float]) -> None:
        """Buffer one sample row (epoch seconds, metric key -> value)."""
        keys = tuple(metrics)
        if keys != self._keys or timestamp - self._file_start >= _ROTATE_S:
            self.flush()
            self._open(keys, timestamp)
        self._times.append(int(round(timestamp * 1000.0)))
        self._rows.append([float(v) for v in metrics.values()])

    def _open(self, keys: tuple[str, ...], timestamp: float) -> None:
        if self._file is not None:
            self._file.close()
        self._keys = keys
        self._encodings = tuple(schema.encoding_for(k) for k in keys)
        self._file_start = timestamp
        name = f"{int(timestamp * 1000):013d}{schema.SYSTEM_SUFFIX}"
        path = self.directory / name
        while path.exists():
            path = path.with_name(f"{path.stem}0{schema.SYSTEM_SUFFIX}")
        self._file = FrameFile(path)
        self._file.write_json(
            schema.KIND_SCHEMA,
            {
                "type": "system",
                "node": self.node,
                "interval_ms": self.interval_ms,
                "metrics": [[k, e] for k, e in zip(keys, self._encodings, strict=False)],
            },
        )

    def flush(self) -> None:
        """Write the buffered rows as one chunk."""
        if not self._rows or self._file is None:
            return
        payload = schema.encode_system_chunk(np.array(self._times), np.array(self._rows), self._encodings)
        self._file.write(schema.KIND_SYSTEM, payload)
        self.samples_written += len(self._rows) * len(self._keys)
        self._times, self._rows = [], []

    def close(self) -> None:
        """Flush and close."""
        self.flush()
        if self._file is not None:
            self._file.close()
            self._file = None
