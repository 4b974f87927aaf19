"""Writing one worker's tensors: a data file of framed raw arrays and an index file of framed step entries.

Both files are append-only. The data bytes of a step are written before its index entry, so a reader that sees an
index entry always finds its bytes. When a write fails (disk full, quota, I/O error), :meth:`TensorFileWriter.salvage`
keeps every step whose bytes reached the disk: it cuts the data file after the last complete step and indexes the
steps before it, giving up the newest steps one by one until their index entries fit. docs/format.md specifies the
layout.
"""

from __future__ import annotations

import errno
import json
import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.reductions import format_key
from trainspect.step import ScalarStep, StepRecord, TensorRecord
from trainspect.store.framing import HEADER_SIZE, frame

__all__ = ["TensorFileWriter", "KIND_TENSOR", "KIND_INDEX", "DATA_PREFIX", "INDEX_PREFIX", "reduction_key"]

KIND_TENSOR = 1
KIND_INDEX = 2
DATA_PREFIX = "data-"
INDEX_PREFIX = "index-"
_ROTATE_BYTES = 4 << 30
_BUFFER_BYTES = 1 << 20  # small records are gathered into writes of about this size
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps builds an encoder per call when given options


def reduction_key(name: str, absolute: bool) -> str:
    """Return the stored key of a reduction (``"abs_mean"``, ``"l2"``): its :attr:`Reduction.key`."""
    return format_key(name, absolute)


def _float(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _python_scalar(value: float | int | bool | complex, dtype: np.dtype) -> float | int | bool | str:
    """What :func:`_scalar` stores for ``np.array(value, dtype)``, without the array in the common cases."""
    kind = dtype.kind
    if type(value) is float and kind == "f":
        return _float(value if dtype.itemsize == 8 else float(dtype.type(value)))  # rounded as the array would be
    if (type(value) is int and kind in "iu") or (type(value) is bool and kind == "b"):
        return value
    return _scalar(np.array(value, dtype))


def _json_scalar(value: float | int | bool | str) -> str:
    """``value`` as the index's JSON encoder writes it (a float's ``repr``; non-finite floats are strings by then)."""
    kind = type(value)
    if kind is float:
        return float.__repr__(value)  # type: ignore[arg-type]
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)  # type: ignore[arg-type]
    return _ENCODE(value)


def _scalar(arr: np.ndarray) -> float | int | bool | str:
    value = arr.reshape(-1)[0].item()
    return _float(value) if isinstance(value, float) else value


def _write_all(fd: int, data: bytes | bytearray | memoryview) -> None:
    view = memoryview(data).cast("B")
    while view:
        n = os.write(fd, view)
        if n <= 0:
            raise OSError(errno.EIO, "write wrote nothing")
        view = view[n:]


def _open_append(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)  # 0666 less the umask, as open() does


class TensorFileWriter:
    """Appends steps to ``data-NNNNNN.bin`` and ``index-NNNNNN.idx`` in one worker's tensor folder.

    Writes go straight to the file descriptors (no buffered file object that would retry a failed write at close);
    small records are gathered in one buffer of about a megabyte.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._seq = len(list(folder.glob(f"{DATA_PREFIX}*.bin")))
        self._data = self._index = -1
        self._buf = bytearray()
        self._data_pos = 0  # where the next record starts (buffered bytes included)
        self._pending_index: list[tuple[int, bytes]] = []  # (end of the step's data, index payload)
        self._scalar_json: dict[tuple[str, np.dtype], tuple[str, str]] = {}  # see write_scalars
        self.failed = False
        self._open()

    def _open(self) -> None:
        self.close()
        name = f"{self._seq:06d}"
        self._data_name = f"{DATA_PREFIX}{name}.bin"
        self._data = _open_append(self.folder / self._data_name)
        self._index = _open_append(self.folder / f"{INDEX_PREFIX}{name}.idx")
        self._data_pos = os.fstat(self._data).st_size

    def write(self, record: StepRecord) -> None:
        """Append one step (its data now, its index entry at the next :meth:`flush`)."""
        if self.failed:
            return
        if self._data_pos > _ROTATE_BYTES:
            self.flush()
            self._seq += 1
            self._open()
        entries = [self._write_tensor(t) for t in record.tensors.values()]
        doc = {
            "g": record.global_step,
            "m": int(record.mode),
            "ms": record.mode_step,
            "t": record.wall_time,
            "f": self._data_name,
            "e": entries,
        }
        self._pending_index.append((self._data_pos, _ENCODE(doc).encode()))

    def write_scalars(self, step: ScalarStep) -> None:
        """Append a step that saved only scalars, from its Python values (no record or NumPy array is built).

        The index entry is, byte for byte, the one :meth:`write` makes of ``step.record()`` (0-d values, in the entry
        itself), its JSON put together from pieces cached per tensor name: most steps are such a step.
        """
        if self.failed:
            return
        pieces = self._scalar_json
        entries = []
        for name, value, dtype, _ in step.scalars:
            ends = pieces.get((name, dtype))
            if ends is None:
                head, tail = _ENCODE({"n": name})[:-1] + ',"v":', ',"d":' + _ENCODE(dtype.str) + ',"s":[]}'
                ends = pieces[(name, dtype)] = (head, tail)
            entries.append(ends[0] + _json_scalar(_python_scalar(value, dtype)) + ends[1])
        doc = (
            f'{{"g":{_json_scalar(step.global_step)},"m":{int(step.mode)},"ms":{_json_scalar(step.mode_step)},'
            f'"t":{_json_scalar(step.wall_time)},"f":{_ENCODE(self._data_name)},"e":[{",".join(entries)}]}}'
        )
        self._pending_index.append((self._data_pos, doc.encode()))

    def _write_tensor(self, t: TensorRecord) -> dict[str, Any]:
        entry: dict[str, Any] = {"n": t.name}
        if t.value is not None and t.value.size == 1 and t.value.dtype.kind in "fiub":
            arr = np.asarray(t.value)  # losses and other scalars live in the index entry: no data record
            entry.update(v=_scalar(arr), d=arr.dtype.str, s=list(arr.shape))
        elif t.value is not None:
            arr = np.asarray(t.value)
            if not arr.flags.c_contiguous:
                arr = np.ascontiguousarray(arr)  # note: this would turn a 0-d array into 1-d; 0-d is contiguous
            payload = arr.reshape(-1).view(np.uint8).data if arr.size else memoryview(b"")
            self._append(frame(KIND_TENSOR, payload))
            self._append(payload)
            entry.update(o=self._data_pos, l=len(payload), d=arr.dtype.str, s=list(arr.shape))
            self._data_pos += HEADER_SIZE + len(payload)
        elif t.shape is not None:
            entry["s"] = list(t.shape)
        if t.reductions:
            entry["r"] = {reduction_key(n, a): _float(float(v)) for (n, a), v in t.reductions.items()}
        if t.shard is not None:
            entry["sh"] = t.shard.to_dict()
        if t.partials is not None:
            entry["pt"] = {key: _float(float(v)) for key, v in t.partials.items()}
        return entry

    def _append(self, data: bytes | memoryview) -> None:
        if len(data) >= _BUFFER_BYTES:
            self._drain()
            _write_all(self._data, data)
            return
        self._buf += data
        if len(self._buf) >= _BUFFER_BYTES:
            self._drain()

    def _drain(self) -> None:
        if self._buf:
            buf, self._buf = self._buf, bytearray()  # a new buffer: a failed write's traceback may still view the old
            _write_all(self._data, buf)

    def flush(self) -> None:
        """Write the buffered data, then the index entries that point into it."""
        if self._data < 0 or self.failed:
            return
        self._drain()
        if self._pending_index:
            buf = bytearray()
            for _, payload in self._pending_index:
                buf += frame(KIND_INDEX, payload)
                buf += payload
            _write_all(self._index, buf)
            self._pending_index.clear()

    def salvage(self) -> int:
        """After a failed write, index the steps whose data is complete on disk; return how many were saved.

        The data file is cut after the last step kept, which frees the bytes of a half-written record for the index
        entries; when they still do not fit, the newest step is given up and its bytes freed, until they do.
        """
        if self._data < 0 or self.failed:
            return 0
        self.failed = True
        self._buf = bytearray()
        on_disk = os.fstat(self._data).st_size
        keep = [(end, payload) for end, payload in self._pending_index if end <= on_disk]
        self._pending_index.clear()
        index_size = os.fstat(self._index).st_size
        while keep:
            try:
                os.ftruncate(self._data, keep[-1][0])
                _write_all(self._index, b"".join(frame(KIND_INDEX, p) + p for _, p in keep))
                return len(keep)
            except OSError:
                os.ftruncate(self._index, index_size)  # no half-written index record
                keep.pop()
        return 0

    def close(self) -> None:
        """Write what is buffered and close both files."""
        try:
            if self._data >= 0:
                self.flush()
        finally:
            for fd in (self._data, self._index):
                if fd >= 0:
                    os.close(fd)
            self._data = self._index = -1
