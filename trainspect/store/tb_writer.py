"""TensorBoard summaries (scalars and histograms) written with TensorBoard's own protos; no TensorFlow needed."""

from __future__ import annotations

import math
import os
import socket
import struct
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from trainspect.modes import ModeKeys

__all__ = ["TensorBoardWriter", "tb_tag"]

_BINS = 30
_SAMPLE = 1 << 14
_ALIKE_SIZE = 1024  # arrays up to this size are binned together (larger ones: the NumPy calls are not the cost)
_ALIKE_CHUNK = 1 << 14  # elements binned together at most: temporaries stay small (no fresh pages to fault in)


def _crc32c_function() -> Callable[[bytes], int]:
    """Return a CRC-32C function: a C one when installed (``google-crc32c`` or ``crc32c``), else TensorBoard's."""
    try:
        import google_crc32c  # type: ignore[import-not-found]

        return lambda data: int(google_crc32c.value(data))
    except ImportError:
        pass
    try:
        import crc32c  # type: ignore[import-not-found]

        return lambda data: int(crc32c.crc32c(data))
    except ImportError:
        from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import crc32c as pure_python

        return lambda data: int(pure_python(data))


_CRC32C = _crc32c_function()


def _uniform_counts(flat: np.ndarray, lo: float, hi: float, bins: int) -> np.ndarray:
    """Counts of ``bins`` equal-width bins over [lo, hi] (the last bin closed), as ``np.histogram`` but ~7x faster.

    Tensors over ``_SAMPLE`` elements are binned from an evenly strided sample of about that many elements.
    """
    if flat.size > _SAMPLE:
        flat = flat[:: -(-flat.size // _SAMPLE)]
    scale = flat.dtype.type(bins / (hi - lo))
    idx = ((flat - flat.dtype.type(lo)) * scale).astype(np.intp)
    np.minimum(idx, bins - 1, out=idx)  # np.clip's two ufuncs without its Python wrappers
    np.maximum(idx, 0, out=idx)
    return np.bincount(idx, minlength=bins)


_PACK_U32 = struct.Struct("<I").pack
_PACK_U64 = struct.Struct("<Q").pack
_PACK_F32 = struct.Struct("<f").pack
_PACK_F64 = struct.Struct("<d").pack


def _masked_crc(data: bytes) -> bytes:
    """The TFRecord framing's masked CRC-32C of ``data``, packed."""
    x = _CRC32C(data) & 0xFFFFFFFF
    return _PACK_U32((((x >> 15) | (x << 17)) + 0xA282EAD8) & 0xFFFFFFFF)


def _varint(n: int) -> bytes:
    """Protobuf's base-128 varint of an int64 (negative numbers as their 64-bit two's complement)."""
    if 0 <= n < 0x80:
        return _SMALL_VARINTS[n]
    if 0 < n < 0x4000:  # message lengths
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    n &= 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


_SMALL_VARINTS = [bytes((i,)) for i in range(0x80)]
_HISTO_TAGS = (b"\x09", b"\x11", b"\x19", b"\x21", b"\x29")  # HistogramProto's doubles 1-5: min … sum_squares


def _edges(lo: float, hi: float, bins: int) -> list[float]:
    """``np.linspace(lo, hi, bins + 1).tolist()``, the same doubles without the array (``lo < hi``)."""
    step = (hi - lo) / bins
    if step == 0 or not math.isfinite(step):
        return [float(e) for e in np.linspace(lo, hi, bins + 1)]
    edges = [i * step + lo for i in range(bins + 1)]
    edges[-1] = hi  # as linspace sets its endpoint
    return edges


def _packed_doubles(field_tag: bytes, values: list[float] | np.ndarray) -> bytes:
    """A packed repeated double field (nothing when empty, as protobuf omits it)."""
    if not len(values):
        return b""
    if isinstance(values, np.ndarray):
        data = values.astype("<f8").tobytes()
    else:
        data = struct.pack(f"<{len(values)}d", *values)
    return field_tag + _varint(len(data)) + data


def _histogram_proto(fields: tuple[float, ...], limits: list[float], counts: np.ndarray) -> bytes:
    """A serialised ``HistogramProto`` (min, max, num, sum, sum_squares; bucket_limit; bucket), as protobuf writes it.

    proto3 omits a double whose bits are zero (``-0.0`` is written).
    """
    out = [tag + _PACK_F64(v) for tag, v in zip(_HISTO_TAGS, fields, strict=True) if v or math.copysign(1.0, v) < 0]
    return b"".join((*out, _packed_doubles(b"\x32", limits), _packed_doubles(b"\x3a", counts)))


def _event(wall_time: float, step: int, summary: bytes) -> bytes:
    """A serialised ``Event`` (wall_time, step, summary), as protobuf writes it."""
    return b"".join(
        (
            b"\x09" + _PACK_F64(wall_time) if wall_time or math.copysign(1.0, wall_time) < 0 else b"",
            b"\x10" + _varint(step) if step else b"",
            b"\x2a",
            _varint(len(summary)),
            summary,
        )
    )


def tb_tag(name: str, mode: ModeKeys) -> str:
    """Return the TensorBoard tag of a tensor: its name, prefixed by the mode outside training."""
    if mode in (ModeKeys.TRAIN, ModeKeys.GLOBAL):
        return name
    return f"{mode.name.lower()}/{name}"


def _histogram_event(tag: str, flat: np.ndarray, step: int, wall_time: float) -> bytes | None:
    """One histogram's serialised ``Event`` of the finite values of ``flat`` (None when there are none).

    Encoded by hand, byte for byte as protobuf serialises its ``HistogramProto`` (:func:`_histogram_proto`).
    """
    if flat.dtype.kind != "f":
        flat = flat.astype(np.float64)
    if flat.size == 0:
        return None
    lo, hi = float(flat.min()), float(flat.max())
    if not (math.isfinite(lo) and math.isfinite(hi)):  # NaN or Inf somewhere: keep the finite values only
        flat = flat[np.isfinite(flat)]
        if flat.size == 0:
            return None
        lo, hi = float(flat.min()), float(flat.max())
    if lo == hi:
        pad = 0.5 if lo == 0 else abs(lo) * 0.01
        lo_edge, hi_edge, bins = lo - pad, hi + pad, 1
    else:
        lo_edge, hi_edge, bins = lo, hi, _BINS
    counts = _uniform_counts(flat, lo_edge, hi_edge, bins).astype(np.float64)
    if flat.size > _SAMPLE:  # bins of a strided sample, scaled to the total count (min, max, sums are exact)
        counts *= flat.size / counts.sum()
    fields = (lo, hi, float(flat.size), float(flat.sum()), float(np.dot(flat, flat)))
    return _encode_histogram(tag, fields, _edges(lo_edge, hi_edge, bins)[1:], counts, step, wall_time)


def _encode_histogram(
    tag: str, fields: tuple[float, ...], limits: list[float], counts: np.ndarray, step: int, wall_time: float
) -> bytes:
    histo = _histogram_proto(fields, limits, counts)
    tag_bytes = tag.encode()
    value_msg = b"\x0a" + _varint(len(tag_bytes)) + tag_bytes + b"\x2a" + _varint(len(histo)) + histo
    return _event(wall_time, step, b"\x0a" + _varint(len(value_msg)) + value_msg)


def _alike_events(items: list[tuple[str, np.ndarray]], step: int, wall_time: float) -> list[bytes | None]:
    """:func:`_histogram_event` of float arrays of one dtype and size (at most ``_ALIKE_SIZE``), binned together.

    Rows with a non-finite value or a single value take :func:`_histogram_event` itself. The arithmetic is that of
    :func:`_uniform_counts`, row by row (the same dtype operations); sums and dot products are each array's own.
    """
    if len(items) == 1:
        return [_histogram_event(items[0][0], items[0][1], step, wall_time)]
    stacked = np.stack([flat for _, flat in items])
    lo, hi = stacked.min(axis=1), stacked.max(axis=1)
    lo64, hi64 = lo.astype(np.float64), hi.astype(np.float64)
    with np.errstate(all="ignore"):  # rows that are not regular are binned again on their own
        regular = np.isfinite(lo64) & np.isfinite(hi64) & (lo64 != hi64)
        scale = (_BINS / (hi64 - lo64)).astype(stacked.dtype)
        idx = ((stacked - lo[:, None]) * scale[:, None]).astype(np.intp)
    np.minimum(idx, _BINS - 1, out=idx)
    np.maximum(idx, 0, out=idx)
    idx += (np.arange(len(items)) * _BINS)[:, None]
    counts = np.bincount(idx.reshape(-1), minlength=len(items) * _BINS).reshape(len(items), _BINS).astype(np.float64)
    out: list[bytes | None] = []
    for j, (tag, flat) in enumerate(items):
        if not regular[j]:
            out.append(_histogram_event(tag, flat, step, wall_time))
            continue
        low, high = float(lo64[j]), float(hi64[j])
        fields = (low, high, float(flat.size), float(flat.sum()), float(np.dot(flat, flat)))
        out.append(_encode_histogram(tag, fields, _edges(low, high, _BINS)[1:], counts[j], step, wall_time))
    return out


class TensorBoardWriter:
    """Writes ``events.out.tfevents.*`` into one folder, synchronously, on the caller's thread.

    The caller is trainspect's background writer, which batches steps; TensorBoard's own ``EventFileWriter`` would
    add a second thread woken per event, which costs the training thread GIL switches.
    """

    def __init__(self, folder: Path, filename_suffix: str = "") -> None:
        from tensorboard.compat.proto import event_pb2

        folder.mkdir(parents=True, exist_ok=True)
        name = f"events.out.tfevents.{time.time():010.0f}.{socket.gethostname()}.{os.getpid()}.0{filename_suffix}"
        self._file = open(folder / name, "ab")  # noqa: SIM115 - owned until close()
        self._scalar_tags: dict[str, bytes] = {}
        self._write(event_pb2.Event(wall_time=time.time(), file_version="brain.Event:2").SerializeToString())
        self._file.flush()

    def _write(self, data: bytes) -> None:
        header = _PACK_U64(len(data))
        self._file.write(b"".join((header, _masked_crc(header), data, _masked_crc(data))))

    def _emit(self, value: object, step: int, wall_time: float) -> None:
        from tensorboard.compat.proto import event_pb2, summary_pb2

        summary = summary_pb2.Summary(value=[value])
        self._write(event_pb2.Event(summary=summary, step=step, wall_time=wall_time).SerializeToString())

    def scalar(self, tag: str, value: float, step: int, wall_time: float) -> None:
        """Add one scalar point (encoded by hand: an ``Event`` with one ``simple_value``, as protobuf would)."""
        value_head = self._scalar_tags.get(tag)
        if value_head is None:
            tag_bytes = tag.encode()
            value_head = self._scalar_tags[tag] = b"\x0a" + _varint(len(tag_bytes)) + tag_bytes + b"\x15"
        value_msg = value_head + _PACK_F32(value)
        summary = b"\x0a" + _varint(len(value_msg)) + value_msg
        event = b"".join(
            (
                b"\x09",
                _PACK_F64(wall_time),
                b"\x10" + _varint(step) if step else b"",
                b"\x2a",
                _varint(len(summary)),
                summary,
            )
        )
        self._write(event)

    def histogram(self, tag: str, values: np.ndarray, step: int, wall_time: float) -> None:
        """Add one histogram of the finite values (no point when there are none)."""
        event = _histogram_event(tag, np.asarray(values).reshape(-1), step, wall_time)
        if event is not None:
            self._write(event)

    def histogram_events(self, items: list[tuple[str, np.ndarray]], step: int, wall_time: float) -> list[bytes | None]:
        """The serialised events of many ``(tag, values)`` histograms (None: no finite value), for :meth:`write_event`.

        Each is what :meth:`histogram` writes; small float tensors of one dtype and size are binned together, a
        handful of NumPy calls for many of them (a saving step of a model with many small tensors writes thousands).
        """
        flats = [np.asarray(values).reshape(-1) for _, values in items]
        out: list[bytes | None] = [None] * len(items)
        groups: dict[tuple[np.dtype, int], list[int]] = {}
        for i, flat in enumerate(flats):
            if flat.dtype.kind == "f" and 1 < flat.size <= _ALIKE_SIZE:
                groups.setdefault((flat.dtype, flat.size), []).append(i)
            else:
                out[i] = _histogram_event(items[i][0], flat, step, wall_time)
        for (_, size), members in groups.items():
            rows = _ALIKE_CHUNK // size
            for at in range(0, len(members), rows):
                indices = members[at : at + rows]
                events = _alike_events([(items[i][0], flats[i]) for i in indices], step, wall_time)
                for i, event in zip(indices, events, strict=True):
                    out[i] = event
        return out

    def write_event(self, event: bytes) -> None:
        """Write one serialised ``Event`` (from :meth:`histogram_events`)."""
        self._write(event)

    def flush(self) -> None:
        """Flush the event file."""
        self._file.flush()

    def close(self) -> None:
        """Flush and close."""
        self._file.close()
