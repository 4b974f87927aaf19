"""Record framing shared by every framed trainspect file (tensor data, tensor index, profiler system and framework).

Header (little-endian, 12 bytes): magic ``b"TS"`` (2 bytes), framing version (u8), record kind (u8), payload length
(u32), checksum of the payload (u32): ``zlib.crc32`` in version 1 (the profiler files), CRC-32C (Castagnoli,
hardware-accelerated through the ``crc32c`` package) in version 2 (the tensor files). A reader detects a truncated
last record (too few bytes) and a corrupt one (bad magic, length or checksum) record by record; it skips them and
reports them, it never returns them. After damage the scan resynchronises on the next *valid* record (magic, a
complete payload and a matching checksum), so a corrupted length field cannot hide the records after it.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import crc32c  # type: ignore[import-not-found]

__all__ = [
    "HEADER",
    "HEADER_SIZE",
    "MAGIC",
    "VERSION",
    "frame",
    "Record",
    "FrameScan",
    "scan_frames",
    "read_frame_at",
    "CorruptRecord",
]

MAGIC = b"TS"
HEADER = struct.Struct("<2sBBII")
HEADER_SIZE = HEADER.size
VERSION = 2
"""The framing version new tensor files are written with."""
_CHECKSUMS: dict[int, Callable[[Any], int]] = {
    1: lambda data: zlib.crc32(data) & 0xFFFFFFFF,
    2: lambda data: int(crc32c.crc32c(data)),
}
_MAX_FUTURE_VERSION = 15


class CorruptRecord(Exception):
    """A record whose header or checksum does not match its bytes."""


def frame(kind: int, payload: bytes | memoryview, version: int = VERSION) -> bytes:
    """Return the header for ``payload`` (write the header, then the payload).

    Example:
        >>> scan_frames(frame(3, b"abc") + b"abc").records[0].payload
        b'abc'
    """
    return HEADER.pack(MAGIC, version, kind, len(payload), _CHECKSUMS[version](payload))


class Record(NamedTuple):
    """One whole, checksum-verified record: where its header starts, its kind, framing version and payload."""

    offset: int
    kind: int
    version: int
    payload: bytes


@dataclass
class FrameScan:
    """Result of scanning a byte buffer.

    Attributes:
        records: the good records, in file order.
        resume_at: where a tailing reader continues (the start of an incomplete last record, or the end).
        corrupt: how many damaged regions were skipped.
        truncated: the buffer ends inside a record (still being written, or cut off).
        problems: one line per skipped region or newer record, naming the byte offset.
        newer: how many records of a framing version newer than the reader's were skipped.
    """

    records: list[Record]
    resume_at: int
    corrupt: int = 0
    truncated: bool = False
    problems: list[str] = field(default_factory=list)
    newer: int = 0


def _valid_at(buf: Any, pos: int, newest: int) -> Record | None:
    """The record starting at ``pos`` when it is complete and its checksum matches, else None."""
    if pos + HEADER_SIZE > len(buf):
        return None
    magic, version, kind, length, crc = HEADER.unpack_from(buf, pos)
    check = _CHECKSUMS.get(version)
    end = pos + HEADER_SIZE + length
    if magic != MAGIC or check is None or version > newest or end > len(buf):
        return None
    payload = bytes(buf[pos + HEADER_SIZE : end])
    if check(payload) != crc:
        return None
    return Record(pos, kind, version, payload)


def _resync(buf: Any, pos: int, newest: int) -> int:
    """Offset of the next valid record after ``pos``, or ``len(buf)``."""
    data = buf if isinstance(buf, bytes) else bytes(buf)
    nxt = data.find(MAGIC, pos + 1)
    while nxt != -1:
        if _valid_at(data, nxt, newest) is not None:
            return nxt
        nxt = data.find(MAGIC, nxt + 1)
    return len(data)


def _newer_end(buf: Any, pos: int, newest: int) -> int | None:
    """End of a record of a newer framing version at ``pos`` (its checksum is unknown), when its extent is plausible.

    Plausible: the record ends at the end of the buffer or where another record's magic starts.
    """
    magic, version, _kind, length, _crc = HEADER.unpack_from(buf, pos)
    end = pos + HEADER_SIZE + length
    if magic != MAGIC or not newest < version <= _MAX_FUTURE_VERSION or end > len(buf):
        return None
    return end if end == len(buf) or bytes(buf[end : end + 2]) == MAGIC else None


def scan_frames(buf: bytes | memoryview, base_offset: int = 0, newest: int = VERSION) -> FrameScan:
    """Split ``buf`` into verified records; offsets are ``base_offset``-relative.

    A damaged region is counted as corrupt and skipped up to the next valid record. A record cut off at the end of
    the buffer (with no valid record after it) stops the scan: ``resume_at`` points at it, so a tailing reader
    retries once more bytes have landed. Records of a framing version above ``newest`` are skipped and reported.

    Args:
        buf: the bytes, from a record boundary.
        base_offset: the file offset of ``buf[0]``.
        newest: the newest framing version the caller reads.
    """
    scan = FrameScan([], base_offset)
    pos, n = 0, len(buf)
    while pos < n:
        rec = _valid_at(buf, pos, newest)
        if rec is not None:
            scan.records.append(Record(base_offset + pos, rec.kind, rec.version, rec.payload))
            pos += HEADER_SIZE + len(rec.payload)
            continue
        if pos + HEADER_SIZE <= n and (end := _newer_end(buf, pos, newest)) is not None:
            version = HEADER.unpack_from(buf, pos)[1]
            scan.newer += 1
            scan.problems.append(
                f"record of framing version {version} (newer than {newest}) at byte {base_offset + pos} skipped"
            )
            pos = end
            continue
        nxt = _resync(buf, pos, newest)
        if nxt == n and _incomplete(buf, pos):
            scan.truncated = True
            break
        scan.corrupt += 1
        scan.problems.append(f"corrupt record at byte {base_offset + pos} ({nxt - pos} bytes skipped)")
        pos = nxt
    scan.resume_at = base_offset + pos
    return scan


def _incomplete(buf: Any, pos: int) -> bool:
    """Whether the bytes from ``pos`` to the end look like the start of one record still being written."""
    n = len(buf)
    if pos + HEADER_SIZE > n:
        return MAGIC.startswith(bytes(buf[pos : pos + 2]))
    magic, version, _kind, length, _crc = HEADER.unpack_from(buf, pos)
    return magic == MAGIC and version in _CHECKSUMS and pos + HEADER_SIZE + length > n


def read_frame_at(buf: Any, offset: int, length: int) -> memoryview:
    """Check and return (without copying) the payload of the record whose header starts at ``offset``.

    Args:
        buf: the file's bytes, typically an ``mmap`` of it.
        offset: where the record's header starts.
        length: the payload length the index recorded.

    Raises:
        CorruptRecord: the bytes there are missing, truncated or fail the checksum.
    """
    end = offset + HEADER_SIZE + length
    if offset < 0 or end > len(buf):
        raise CorruptRecord(f"record at byte {offset} is truncated")
    magic, version, _kind, rec_len, crc = HEADER.unpack_from(buf, offset)
    payload = memoryview(buf)[offset + HEADER_SIZE : end]
    check = _CHECKSUMS.get(version)
    if magic != MAGIC or rec_len != length or check is None or check(payload) != crc:
        raise CorruptRecord(f"record at byte {offset} fails its checksum")
    return payload
