"""A quick pass over a buffer of index records that are all whole and sound (the usual case; issue 30).

:func:`~trainspect.store.framing.scan_frames` checks each record with the generality damage needs (resynchronising,
newer framing versions); most reads find nothing wrong, and this pass checks the same headers and checksums in a
tighter loop. At the first thing it does not expect it gives up (returns None), and the caller scans the buffer with
``scan_frames``: what is read, skipped and reported is the same either way.
"""

from __future__ import annotations

import re
import struct
from dataclasses import dataclass

import crc32c  # type: ignore[import-not-found]
import numpy as np

from trainspect.modes import ModeKeys
from trainspect.store.framing import HEADER, HEADER_SIZE, MAGIC, VERSION
from trainspect.store.index_entry import is_float_dtype
from trainspect.store.tensor_file import KIND_INDEX

__all__ = ["QuickScan", "quick_scan", "Layout", "parse_layout"]


@dataclass
class QuickScan:
    """A buffer of sound records: the payloads of the index records, how many records, where a reader resumes."""

    payloads: list[bytes]
    count: int
    resume_at: int
    corrupt: int = 0
    truncated: bool = False
    problems: tuple[str, ...] = ()


def quick_scan(buf: bytes, base_offset: int = 0) -> QuickScan | None:
    """The index payloads of ``buf`` when every record in it is whole, sound and of the current framing version.

    Example:
        >>> from trainspect.store.framing import frame
        >>> quick_scan(frame(KIND_INDEX, b"{}") + b"{}").payloads, quick_scan(b"TS")
        ([b'{}'], None)
    """
    pos, n, count = 0, len(buf), 0
    unpack, check = HEADER.unpack_from, crc32c.crc32c
    payloads: list[bytes] = []
    append = payloads.append
    try:
        while pos < n:
            magic, version, kind, length, crc = unpack(buf, pos)
            start = pos + HEADER_SIZE
            end = start + length
            if magic != MAGIC or version != VERSION or end > n:
                return None
            payload = buf[start:end]
            if check(payload) != crc:
                return None
            if kind == KIND_INDEX:
                append(payload)
            count += 1
            pos = end
    except struct.error:  # a header cut off at the end
        return None
    return QuickScan(payloads, count, base_offset + pos)


_TEXT = rb'"([^"\\\x00-\x1f]*)"'  # a JSON string without escapes or control characters
_INT = rb"(-?(?:0|[1-9][0-9]{0,17}))"  # fits int64
_NUMBER = rb"(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)"
_FLOAT = rb'(?:"(NaN|-?Infinity)"|(-?(?:0|[1-9][0-9]*)(?:\.[0-9]+(?:[eE][+-]?[0-9]+)?|[eE][+-]?[0-9]+)))'
_ENTRY = rb'\{"n":' + _TEXT + rb',"v":' + _FLOAT + rb',"d":' + _TEXT + rb',"s":\[((?:1(?:,1)*)?)\]\}'
_BARE_ENTRY = _ENTRY.replace(b"(?:", b"(").replace(b"(", b"(?:")  # the same, capturing nothing
_RECORD = (
    rb'\{"g":'
    + _INT
    + rb',"m":'
    + _INT
    + rb',"ms":'
    + _INT
    + rb',"t":'
    + _NUMBER
    + rb',"f":'
    + _TEXT
    + rb',"e":\[((?:'
    + _BARE_ENTRY
    + rb"(?:,"
    + _BARE_ENTRY
    + rb")*)?)\]\}"
)
_RECORD_RE = re.compile(_RECORD)
_LINES_RE = re.compile(rb"^" + _RECORD + rb"$", re.MULTILINE)
_SINGLE_RE = re.compile(rb"^" + _RECORD.split(rb',"e":')[0] + rb',"e":\[' + _ENTRY + rb"\]\}$", re.MULTILINE)
_ENTRY_RE = re.compile(_ENTRY)
_ENTRY_OPEN = b'{"n":'  # (a name or dtype cannot hold it: they hold no quote)
_MODE_CODES = np.array([int(m) for m in ModeKeys], dtype=np.int64)


@dataclass
class Layout:
    """The index records of a read that have the writer's own layout, as columns (see :func:`parse_layout`).

    ``ok`` tells the records parsed here; the others are left to the JSON parser. Row ``i`` of the per-record
    arrays is record ``i``; its entries are ``entry_start[i]:entry_start[i + 1]`` of the per-entry arrays (none for a
    record not parsed here). Names, dtypes, shapes and data files are indices into the lists beside them (None: a
    text that is not UTF-8, never one of a record parsed here).
    """

    ok: np.ndarray
    steps: np.ndarray
    modes: np.ndarray
    mode_steps: np.ndarray
    walls: np.ndarray
    file: np.ndarray
    files: list[str | None]
    entry_start: np.ndarray
    name: np.ndarray
    values: np.ndarray
    dtype: np.ndarray
    shape: np.ndarray
    names: list[str | None]
    dtypes: list[str | None]
    shapes: list[tuple[int, ...]]

    def runs(self) -> list[tuple[int, int, bool]]:
        """``(start, end, parsed here)`` of the consecutive records parsed here or not, in order."""
        n = self.ok.size
        if not n:
            return []
        bounds = [0, *(np.flatnonzero(self.ok[1:] != self.ok[:-1]) + 1).tolist(), n]
        return [(a, b, bool(self.ok[a])) for a, b in zip(bounds[:-1], bounds[1:], strict=False)]


def parse_layout(payloads: list[bytes]) -> Layout:
    """Parse the index records written in the writer's fixed layout with one-element float entries, in bulk.

    A record parsed here gives exactly what ``json.loads`` and the per-record reading give: its global step, mode,
    mode step, wall time, data file, and each entry's name, value (``"NaN"``, ``"Infinity"``, ``"-Infinity"`` as
    floats), float dtype and shape. Any record that differs in the least (whitespace, other keys or key order,
    escapes, integer values, raw values, reductions, an unknown mode, a dtype that is not a float, text that is not
    UTF-8) is left to the JSON parser (``ok`` is False), so damaged or foreign records are judged there, one by one,
    as before.

    Example:
        >>> rec = b'{"g":3,"m":1,"ms":3,"t":1.5,"f":"d.bin","e":[{"n":"loss","v":0.5,"d":"<f4","s":[]}]}'
        >>> lay = parse_layout([rec, b'{"g": 4}'])
        >>> lay.ok.tolist(), lay.steps[:1].tolist(), lay.values.tolist(), lay.names
        ([True, False], [3], [0.5], ['loss'])
    """
    n = len(payloads)
    joined = b"\n".join(payloads)
    if joined.count(b"\n") == n - 1:  # no record holds a newline: a line that matches is one whole record
        rows = _SINGLE_RE.findall(joined)  # one entry per record (a loss alone): one pass
        if len(rows) == n:
            cols = tuple(zip(*rows, strict=True))
            return _columns(np.ones(n, dtype=bool), cols[:5], cols[5:], np.ones(n, dtype=np.int64))
        rows = _LINES_RE.findall(joined)
        if len(rows) == n:
            return _split_entries(np.ones(n, dtype=bool), rows)
    found = [m.groups() if m is not None else None for m in map(_RECORD_RE.fullmatch, payloads)]
    ok = np.fromiter((r is not None for r in found), dtype=bool, count=n)
    return _split_entries(ok, [r for r in found if r is not None])


def _split_entries(ok: np.ndarray, rows: list[tuple[bytes, ...]]) -> Layout:
    """:func:`_columns` of records matched whole, their entries parsed from the text of each one's list."""
    head = tuple(zip(*rows, strict=True)) if rows else ((),) * 6
    blobs = head[5]
    counts = np.zeros(ok.size, dtype=np.int64)
    counts[ok] = np.fromiter(map(bytes.count, blobs, (_ENTRY_OPEN,) * len(blobs)), dtype=np.int64, count=len(blobs))
    entries = _ENTRY_RE.findall(b",".join(blobs))
    return _columns(ok, head[:5], tuple(zip(*entries, strict=True)) if entries else ((),) * 5, counts[ok])


def _ids(texts: tuple[bytes, ...], table: dict[bytes, int]) -> np.ndarray:
    """The index of each text in ``table`` (new ones added in order)."""
    if texts and texts.count(texts[0]) == len(texts):  # the usual case: one name, one dtype, one data file
        return np.full(len(texts), table.setdefault(texts[0], len(table)), dtype=np.int64)
    return np.fromiter((table.setdefault(x, len(table)) for x in texts), dtype=np.int64, count=len(texts))


def _floats(nonfinite: tuple[bytes, ...], numbers: tuple[bytes, ...]) -> np.ndarray:
    """Each entry's value: its number, or its quoted ``NaN``, ``Infinity`` or ``-Infinity`` (float() reads them)."""
    k = len(numbers)
    texts = numbers if nonfinite.count(b"") == k else map(bytes.__add__, nonfinite, numbers)
    return np.fromiter(map(float, texts), dtype=np.float64, count=k)


def _columns(
    ok: np.ndarray, head: tuple[tuple[bytes, ...], ...], entries: tuple[tuple[bytes, ...], ...], counts: np.ndarray
) -> Layout:
    """The columns of the matched records (``ok``: which ones; ``counts``: their entries); invalid ones left out."""
    n, m, ints = ok.size, len(head[0]), np.int64
    at = np.flatnonzero(ok)
    per_record = np.zeros((4, n), dtype=ints)
    for row in range(3):
        per_record[row, at] = np.fromiter(map(int, head[row]), dtype=ints, count=m)
    wall = np.zeros(n)
    wall[at] = np.fromiter(map(float, head[3]), dtype=np.float64, count=m)
    tables: tuple[dict[bytes, int], ...] = ({}, {}, {}, {})
    per_record[3, at] = _ids(head[4], tables[0])
    names, nonfinite, numbers, dtypes, shapes = entries
    cols = Layout(
        ok,
        per_record[0],
        per_record[1],
        per_record[2],
        wall,
        per_record[3],
        [],
        np.zeros(n + 1, dtype=ints),
        _ids(names, tables[1]),
        _floats(nonfinite, numbers),
        _ids(dtypes, tables[2]),
        _ids(shapes, tables[3]),
        [],
        [],
        [],
    )
    bad_entry = _decode(cols, *tables)
    bad = ~np.isin(cols.modes, _MODE_CODES) | ~_texts_ok(cols.files)[cols.file]
    bad[at[np.repeat(np.arange(m), counts)[bad_entry]]] = True
    bad &= ok
    if bool(bad.any()):  # parse the others again without them (rare: left to the JSON parser)
        keep = ~bad[at]
        starts = np.concatenate([[0], np.cumsum(counts)])
        take = np.concatenate(
            [np.arange(starts[i], starts[i + 1]) for i in np.flatnonzero(keep).tolist()] or [np.zeros(0, dtype=ints)]
        ).tolist()
        pick = np.flatnonzero(keep).tolist()
        return _columns(
            ok & ~bad,
            tuple(tuple(col[i] for i in pick) for col in head),
            tuple(tuple(col[i] for i in take) for col in entries),
            counts[keep],
        )
    full = np.zeros(n, dtype=ints)
    full[at] = counts
    np.cumsum(full, out=cols.entry_start[1:])
    return cols


def _decode(
    cols: Layout, files: dict[bytes, int], names: dict[bytes, int], dtypes: dict[bytes, int], shapes: dict[bytes, int]
) -> np.ndarray:
    """Fill the text lists of ``cols``; return which entries cannot be read here.

    Those are the entries whose name is not UTF-8 or whose dtype is not a float.
    """
    cols.files[:] = [_utf8(x) for x in files]
    cols.names[:] = [_utf8(x) for x in names]
    cols.dtypes[:] = [_utf8(x) for x in dtypes]
    cols.shapes[:] = [tuple(int(s) for s in x.split(b",")) if x else () for x in shapes]
    float_dtypes = np.array([x is not None and is_float_dtype(x) for x in cols.dtypes], dtype=bool)
    return ~_texts_ok(cols.names)[cols.name] | ~float_dtypes[cols.dtype] if cols.name.size else cols.name > 0


def _texts_ok(texts: list[str | None]) -> np.ndarray:
    return np.array([x is not None for x in texts] or [True], dtype=bool)


def _utf8(raw: bytes) -> str | None:
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return None
