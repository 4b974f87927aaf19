"""The one place readers open run-directory files: regular files only, size-capped, JSON depth-bounded.

A run directory is a file a user may be handed: a FIFO in place of a JSON file must not hang a reader, a symlink to
``/dev/zero`` must not fill the memory, and a 50,000-deep JSON document must not raise ``RecursionError``. Files
are opened with ``O_NONBLOCK`` (a FIFO never blocks the open) and checked with ``fstat``: symlinks are followed but
devices, FIFOs, sockets and directories are refused with :class:`UnsafeFile` (an ``OSError``, so the readers'
existing "cannot read" paths skip them). Reads stop at a per-kind size cap.

Example:
    >>> import tempfile, pathlib
    >>> p = pathlib.Path(tempfile.mkdtemp()) / "a.json"
    >>> _ = p.write_text('{"a": [1, 2]}')
    >>> load_json_bounded(p)
    {'a': [1, 2]}
    >>> loads_bounded("[" * 600 + "]" * 600)
    Traceback (most recent call last):
    ...
    ValueError: nested deeper than 512 levels
"""

from __future__ import annotations

import fcntl
import json
import os
import re
import stat
from typing import Any, BinaryIO

import numpy as np

__all__ = [
    "UnsafeFile",
    "JSON_CAP",
    "TRACE_CAP",
    "MAX_DEPTH",
    "open_regular",
    "read_capped",
    "loads_bounded",
    "load_json_bounded",
]

JSON_CAP = 64 << 20
"""Largest JSON side file read (manifests, verdicts, collections, index documents)."""
TRACE_CAP = 1 << 30
"""Largest trace file read (a Chrome trace; gzip'd ones are capped after decompression too)."""
MAX_DEPTH = 512
"""Deepest JSON nesting accepted."""

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)


class UnsafeFile(OSError):
    """A file a reader refuses: not a regular file, or larger than its cap."""


def open_regular(path: str | os.PathLike[str]) -> BinaryIO:
    """Open ``path`` for binary reading when it is a regular file (symlinks followed).

    Raises:
        UnsafeFile: it is a FIFO, device, socket or directory.
        OSError: it cannot be opened (``FileNotFoundError`` when missing).
    """
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
            raise UnsafeFile(f"is {kind}, not a regular file")
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_capped(path: str | os.PathLike[str], cap: int | None = JSON_CAP, offset: int = 0) -> bytes:
    """The bytes of a regular file from ``offset`` (at most ``cap`` of them; ``None``: no cap).

    Raises:
        UnsafeFile: not a regular file, or more than ``cap`` bytes to read.
        OSError: it cannot be read.
    """
    with open_regular(path) as fh:
        size = os.fstat(fh.fileno()).st_size
        if cap is not None and size - offset > cap:
            raise UnsafeFile(f"is {size:,} bytes, over the {cap:,}-byte limit for this file")
        if offset:
            fh.seek(offset)
        data = fh.read() if cap is None else fh.read(cap + 1)
    if cap is not None and len(data) > cap:  # grew while being read
        raise UnsafeFile(f"is over the {cap:,}-byte limit for this file")
    return data


def _depth(raw: bytes) -> int:
    stripped = _STRING.sub(b'""', raw)
    arr = np.frombuffer(stripped, dtype=np.uint8)
    steps = np.zeros(arr.shape, dtype=np.int32)
    steps[(arr == ord("[")) | (arr == ord("{"))] = 1
    steps[(arr == ord("]")) | (arr == ord("}"))] = -1
    return int(np.cumsum(steps).max()) if len(steps) else 0


def loads_bounded(text: str | bytes, max_depth: int = MAX_DEPTH) -> Any:
    """``json.loads`` that rejects documents nested deeper than ``max_depth`` (never ``RecursionError``).

    Raises:
        ValueError: not JSON, or nested too deeply.
    """
    opens = text.count("[") + text.count("{") if isinstance(text, str) else text.count(b"[") + text.count(b"{")
    if opens > max_depth:  # only then is the depth worth measuring (never for an index record)
        raw = text.encode("utf-8", errors="surrogatepass") if isinstance(text, str) else text
        if _depth(raw) > max_depth:
            raise ValueError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError(f"nested too deeply (limit {max_depth} levels)") from None


def load_json_bounded(path: str | os.PathLike[str], cap: int | None = JSON_CAP) -> Any:
    """Read and parse a JSON file through :func:`read_capped` and :func:`loads_bounded`.

    Raises:
        OSError: it cannot be read or is refused (:class:`UnsafeFile`).
        ValueError: not UTF-8 JSON, or nested too deeply.
    """
    return loads_bounded(read_capped(path, cap).decode("utf-8"))
