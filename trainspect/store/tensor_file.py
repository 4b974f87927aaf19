"""Writing one worker's tensors: a data file of framed raw arrays and an index file of framed step entries.

Both files are append-only. The data bytes of a step are flushed before its index entry is written, so a reader
that sees an index entry always finds its bytes. docs/format.md specifies the layout.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

import numpy as np

from trainspect.step import StepRecord, TensorRecord
from trainspect.store.framing import HEADER_SIZE, frame

__all__ = ["TensorFileWriter", "KIND_TENSOR", "KIND_INDEX", "DATA_PREFIX", "INDEX_PREFIX", "reduction_key"]

KIND_TENSOR = 1
KIND_INDEX = 2
DATA_PREFIX = "data-"
INDEX_PREFIX = "index-"
_ROTATE_BYTES = 4 << 30
_ENCODE = json.JSONEncoder(separators=(",", ":")).encode  # json.dumps builds an encoder per call when given options


def reduction_key(name: str, absolute: bool) -> str:
    """Return the stored key of a reduction (``"abs_mean"``, ``"l2"``)."""
    return f"abs_{name}" if absolute else name


def _float(v: float) -> float | str:
    if math.isfinite(v):
        return v
    return "NaN" if math.isnan(v) else ("Infinity" if v > 0 else "-Infinity")


def _scalar(arr: np.ndarray) -> float | int | bool | str:
    value = arr.reshape(-1)[0].item()
    return _float(value) if isinstance(value, float) else value


class TensorFileWriter:
    """Appends steps to ``data-NNNNNN.bin`` and ``index-NNNNNN.idx`` in one worker's tensor folder."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self._seq = len(list(folder.glob(f"{DATA_PREFIX}*.bin")))
        self._data: IO[bytes] | None = None
        self._index: IO[bytes] | None = None
        self._data_pos = 0
        self._pending_index: list[bytes] = []
        self._open()

    def _open(self) -> None:
        self.close()
        name = f"{self._seq:06d}"
        self._data_name = f"{DATA_PREFIX}{name}.bin"
        self._data = open(self.folder / self._data_name, "ab")  # noqa: SIM115 - owned until close()
        self._index = open(self.folder / f"{INDEX_PREFIX}{name}.idx", "ab")  # noqa: SIM115
        self._data_pos = self._data.tell()

    def write(self, record: StepRecord) -> None:
        """Append one step (its data now, its index entry at the next :meth:`flush`)."""
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
        self._pending_index.append(_ENCODE(doc).encode())

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
            assert self._data is not None
            self._data.write(frame(KIND_TENSOR, payload))
            self._data.write(payload)
            entry.update(o=self._data_pos, l=len(payload), d=arr.dtype.str, s=list(arr.shape))
            self._data_pos += HEADER_SIZE + len(payload)
        elif t.shape is not None:
            entry["s"] = list(t.shape)
        if t.reductions:
            entry["r"] = {reduction_key(n, a): _float(float(v)) for (n, a), v in t.reductions.items()}
        return entry

    def flush(self) -> None:
        """Flush the data, then write and flush the index entries that point into it."""
        if self._data is None or self._index is None:
            return
        self._data.flush()
        if self._pending_index:
            buf = bytearray()
            for payload in self._pending_index:
                buf += frame(KIND_INDEX, payload)
                buf += payload
            self._index.write(buf)
            self._pending_index.clear()
        self._index.flush()

    def close(self) -> None:
        """Flush and close both files."""
        data, index = self._data, self._index
        try:
            if data is not None:
                self.flush()
        finally:
            self._data = self._index = None
            for fh in (data, index):
                if fh is not None:
                    try:
                        fh.close()
                    except OSError:
                        pass  # the flush above already reported the error
