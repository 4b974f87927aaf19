"""The on-disk profiler format, shared by the writers (hooks) and the readers (docs/profiler.md).

A profiler file is a sequence of *frames*, framed as every trainspect file (:mod:`trainspect.store.framing`):
a 12-byte header followed by a zlib-compressed payload::

    magic b"TS" | framing version u8 (1) | kind u8 | payload length u32 LE | zlib.crc32(payload) u32 LE | payload

Kinds: ``SCHEMA`` (JSON: metric keys and their encodings, written first in every system file),
``SYSTEM`` (a columnar chunk of system samples), ``TABLE`` (a named table of numpy columns: framework
steps and spans) and ``EVENT`` (one JSON object: start, close, dataloader workers). Files are append-only;
each frame is written with a single ``write`` so a reader sees whole frames; truncation and corruption are
detected per frame by the length and CRC and skipped (the shared scanner resynchronises on the next valid frame).

Versions: within :data:`SCHEMA_VERSION` 1 the format grows only by additions that readers of either age handle —
new ``TABLE`` names (readers ignore a table they do not know), new columns (readers take the columns they know) and
new ``spans.kind`` codes (readers name a code they do not know by its number, or skip it in trace events). Span kind
5, ``backward_sync`` (the wait from a rank's last local gradient to the end of ``backward()``), came this way: a run
recorded without it simply has no such span. A change to the meaning of an existing column or code takes a new
schema version, which older readers skip with a warning.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from trainspect.store import framing

__all__ = [
    "SCHEMA_VERSION",
    "KIND_SCHEMA",
    "KIND_SYSTEM",
    "KIND_TABLE",
    "KIND_EVENT",
    "SYSTEM_SUFFIX",
    "FRAMEWORK_SUFFIX",
    "Frame",
    "FrameScan",
    "encode_frame",
    "scan_frames",
    "encoding_for",
    "encode_system_chunk",
    "decode_system_chunk",
    "decode_system_chunk_raw",
    "assemble_columns",
    "encode_table",
    "decode_table",
    "encode_json",
    "decode_json",
]

SCHEMA_VERSION = 1
KIND_SCHEMA, KIND_SYSTEM, KIND_TABLE, KIND_EVENT = 1, 2, 3, 4
SYSTEM_SUFFIX = ".tsys"
FRAMEWORK_SUFFIX = ".tfw"
FRAME_VERSION = 1
"""The framing version of profiler frames (zlib.crc32 checksums); see :mod:`trainspect.store.framing`."""
HEADER_SIZE = framing.HEADER_SIZE
_CHUNK_HEAD = struct.Struct("<qII")  # t0 ms, rows, u16 columns
ENC_CENTI = "u16c"  # value * 100 as uint16 (percentages: 0.01 resolution, 65535 = missing)
ENC_F32 = "f32"
_MISSING_U16 = 65535


@dataclass(frozen=True)
class Frame:
    """One decoded frame: its kind, schema version, decompressed payload and byte offset in the file."""

    kind: int
    version: int
    payload: bytes
    offset: int


@dataclass
class FrameScan:
    """The result of scanning bytes: whole frames, where to resume, and what was wrong."""

    frames: list[Frame]
    next_offset: int
    problems: list[str]
    truncated_tail: bool = False


def encode_frame(kind: int, payload: bytes, level: int = 6) -> bytes:
    """Compress ``payload`` and frame it (:func:`trainspect.store.framing.frame`, framing version 1)."""
    body = zlib.compress(payload, level)
    return framing.frame(kind, body, FRAME_VERSION) + body


def scan_frames(buf: bytes, offset: int = 0) -> FrameScan:
    """Decode every whole frame of ``buf`` from ``offset`` (the shared :func:`trainspect.store.framing.scan_frames`).

    A frame cut off at the end of the buffer is not consumed (``truncated_tail``; ``next_offset`` points
    at it, so a tailing reader retries once more bytes arrive). A bad frame elsewhere is skipped and
    reported in ``problems``; frames of a newer schema version are skipped and reported.
    """
    scan = framing.scan_frames(memoryview(buf)[offset:], offset, newest=FRAME_VERSION)
    problems = [p.replace("framing version", "schema_version") for p in scan.problems]
    frames: list[Frame] = []
    for rec in scan.records:
        try:
            frames.append(Frame(rec.kind, rec.version, zlib.decompress(rec.payload), rec.offset))
        except zlib.error:
            problems.append(f"undecompressable frame at byte {rec.offset}")
    return FrameScan(frames, scan.resume_at, problems, truncated_tail=scan.truncated)


def iter_frames(buf: bytes) -> Iterator[Frame]:
    """Iterate the valid frames of a whole buffer (problems ignored)."""
    yield from scan_frames(buf).frames


# --- system chunks -------------------------------------------------------------------------------------
def encoding_for(key: str) -> str:
    """The column encoding of a metric key: centi-units uint16 for ``*_percent``, float32 otherwise."""
    return ENC_CENTI if key.endswith("_percent") else ENC_F32


def encode_system_chunk(times_ms: np.ndarray, values: np.ndarray, encodings: Sequence[str]) -> bytes:
    """Encode rows of samples (uncompressed payload of a ``SYSTEM`` frame).

    Args:
        times_ms: int64 epoch milliseconds, one per row, ascending.
        values: float array (rows x metrics), NaN where a value is missing.
        encodings: one of ``"u16c"``/``"f32"`` per metric (schema order).

    Layout: ``t0_ms i64 | rows u32 | n_u16 u32 | offsets u32[rows] | u16 block (n_u16 x rows) |
    f32 block (n_f32 x rows)``; blocks are column-major so each metric's values are contiguous.
    """
    times_ms = np.asarray(times_ms, dtype=np.int64)
    t0 = int(times_ms[0]) if len(times_ms) else 0
    centi = [i for i, e in enumerate(encodings) if e == ENC_CENTI]
    f32 = [i for i, e in enumerate(encodings) if e != ENC_CENTI]
    vals = np.asarray(values, dtype=np.float64).reshape(len(times_ms), len(encodings))
    block16 = vals[:, centi].T
    scaled = np.where(np.isnan(block16), _MISSING_U16, np.clip(np.rint(block16 * 100.0), 0, _MISSING_U16 - 1))
    parts = [
        _CHUNK_HEAD.pack(t0, len(times_ms), len(centi)),
        (times_ms - t0).astype("<u4").tobytes(),
        scaled.astype("<u2").tobytes(),
        vals[:, f32].T.astype("<f4").tobytes(),
    ]
    return b"".join(parts)


def decode_system_chunk_raw(payload: bytes, n_metrics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Split a ``SYSTEM`` payload into (int64 epoch ms, raw uint16 block, float32 block), without copies.

    Raises:
        ValueError: the payload is shorter than its header says.
    """
    t0, rows, n16 = _CHUNK_HEAD.unpack_from(payload, 0)
    pos = _CHUNK_HEAD.size
    times = np.frombuffer(payload, "<u4", rows, pos).astype(np.int64) + t0
    pos += 4 * rows
    b16 = np.frombuffer(payload, "<u2", n16 * rows, pos).reshape(n16, rows)
    pos += 2 * n16 * rows
    b32 = np.frombuffer(payload, "<f4", (n_metrics - n16) * rows, pos).reshape(n_metrics - n16, rows)
    return times, b16, b32


def assemble_columns(encodings: Sequence[str], b16: np.ndarray, b32: np.ndarray) -> np.ndarray:
    """Turn raw uint16/float32 blocks (metrics x rows) into float32 values (rows x metrics), NaN = missing."""
    rows = b16.shape[1]
    out = np.empty((rows, len(encodings)), dtype=np.float32)
    centi = [i for i, e in enumerate(encodings) if e == ENC_CENTI]
    f32 = [i for i, e in enumerate(encodings) if e != ENC_CENTI]
    v16 = b16.T.astype(np.float32) / np.float32(100.0)
    v16[b16.T == _MISSING_U16] = np.nan
    out[:, centi] = v16
    out[:, f32] = b32.T
    return out


def decode_system_chunk(payload: bytes, encodings: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Decode a ``SYSTEM`` payload into (int64 epoch ms per row, float32 values rows x metrics).

    Raises:
        ValueError: the payload does not match the schema.
    """
    times, b16, b32 = decode_system_chunk_raw(payload, len(encodings))
    if b16.shape[0] != sum(e == ENC_CENTI for e in encodings):
        raise ValueError("chunk does not match its schema")
    return times, assemble_columns(encodings, b16, b32)


# --- tables and events ---------------------------------------------------------------------------------
def encode_table(name: str, columns: Mapping[str, np.ndarray]) -> bytes:
    """Encode named numpy columns of equal length (payload of a ``TABLE`` frame).

    Layout: ``header length u32 | JSON {"name", "rows", "columns": [[name, numpy dtype str], ...]} |
    each column's little-endian bytes in order``.
    """
    arrays = {k: np.ascontiguousarray(v, dtype=np.asarray(v).dtype.newbyteorder("<")) for k, v in columns.items()}
    rows = len(next(iter(arrays.values()))) if arrays else 0
    head = {"name": name, "rows": rows, "columns": [[k, a.dtype.str] for k, a in arrays.items()]}
    raw = json.dumps(head, separators=(",", ":")).encode()
    return struct.pack("<I", len(raw)) + raw + b"".join(a.tobytes() for a in arrays.values())


def decode_table(payload: bytes) -> tuple[str, dict[str, np.ndarray]]:
    """Decode a ``TABLE`` payload into its name and columns.

    Raises:
        ValueError: the payload is malformed.
    """
    (n,) = struct.unpack_from("<I", payload, 0)
    head = json.loads(payload[4 : 4 + n])
    pos = 4 + n
    out: dict[str, np.ndarray] = {}
    for col, dtype in head["columns"]:
        dt = np.dtype(dtype)
        out[col] = np.frombuffer(payload, dt, head["rows"], pos)
        pos += dt.itemsize * head["rows"]
    return str(head["name"]), out


def encode_json(obj: Mapping[str, Any]) -> bytes:
    """Encode a JSON object (payload of ``SCHEMA`` and ``EVENT`` frames); adds ``schema_version``."""
    return json.dumps({"schema_version": SCHEMA_VERSION, **obj}, separators=(",", ":")).encode()


def decode_json(payload: bytes) -> dict[str, Any]:
    """Decode a ``SCHEMA``/``EVENT`` payload.

    Raises:
        ValueError: not a JSON object.
    """
    obj = json.loads(payload)
    if not isinstance(obj, dict):
        raise ValueError("expected a JSON object")
    return obj
