"""Record framing shared by every trainspect file: a 12-byte header, then the payload.

Header (little-endian): magic ``b"TS"`` (2 bytes), framing version (u8), record kind (u8), payload length (u32),
checksum of the payload (u32): CRC-32C (Castagnoli, hardware-accelerated through the ``crc32c`` package) in version 2,
``zlib.crc32`` in version 1 (still read). A reader detects a truncated last record (too few bytes) and a corrupt
one (bad magic or checksum) record by record; it skips them and reports them, it never returns them.
"""

from __future__ import annotations

import logging
import struct
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import crc32c  # type: ignore[import-not-found]

__all__ = ["HEADER", "HEADER_SIZE", "MAGIC", "frame", "FrameScan", "scan_frames", "read_frame_at", "CorruptRecord"]

MAGIC = b"TS"
HEADER = struct.Struct("<2sBBII")
HEADER_SIZE = HEADER.size
_VERSION = 2
_CHECKSUMS: dict[int, Callable[[Any], int]] = {
    1: lambda data: zlib.crc32(data) & 0xFFFFFFFF,
    2: lambda data: int(crc32c.crc32c(data)),
}
_MAX_LEN = 1 << 40
log = logging.getLogger(__name__)


class CorruptRecord(Exception):
    """A record whose header or checksum does not match its bytes."""


def frame(kind: int, payload: bytes | memoryview) -> bytes:
    """Return the header for ``payload`` (write the header, then the payload)."""
    return HEADER.pack(MAGIC, _VERSION, kind, len(payload), _CHECKSUMS[_VERSION](payload))


@dataclass
class FrameScan:
    """Result of scanning a byte buffer: good records, where to resume, and how many were bad."""

    records: list[tuple[int, int, bytes]]
    resume_at: int
    corrupt: int = 0
    truncated: bool = False


def _next_magic(buf: bytes | memoryview, start: int) -> int:
    idx = bytes(buf[start:]).find(MAGIC)
    return -1 if idx < 0 else start + idx


def scan_frames(buf: bytes | memoryview, base_offset: int = 0) -> FrameScan:
    """Split ``buf`` into records ``(offset, kind, payload)``; offsets are ``base_offset``-relative.

    A bad header or checksum counts as corrupt and the scan moves on; an incomplete last record stops the
    scan, and ``resume_at`` points at it, so a tailing reader retries it once more bytes have landed.
    """
    out: list[tuple[int, int, bytes]] = []
    pos, corrupt, n = 0, 0, len(buf)
    while pos + HEADER_SIZE <= n:
        magic, version, kind, length, crc = HEADER.unpack_from(buf, pos)
        if magic != MAGIC or version not in _CHECKSUMS or length > _MAX_LEN:
            corrupt += 1
            nxt = _next_magic(buf, pos + 1)
            if nxt < 0:
                return FrameScan(out, base_offset + n, corrupt, False)
            pos = nxt
            continue
        end = pos + HEADER_SIZE + length
        if end > n:
            return FrameScan(out, base_offset + pos, corrupt, True)
        payload = bytes(buf[pos + HEADER_SIZE : end])
        if _CHECKSUMS[version](payload) != crc:
            corrupt += 1
        else:
            out.append((base_offset + pos, kind, payload))
        pos = end
    return FrameScan(out, base_offset + pos, corrupt, pos < n)


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
