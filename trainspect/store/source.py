"""Reads a trainspect run directory into a :class:`TrialIndex`, incrementally, while the job may still write."""

from __future__ import annotations

import json
import logging
import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.collections import BUILTIN_COLLECTIONS, Collection, CollectionManager
from trainspect.exceptions import ConfigError, DamagedFile
from trainspect.modes import ModeKeys
from trainspect.store.framing import HEADER_SIZE, CorruptRecord, FrameScan, read_frame_at, scan_frames
from trainspect.store.index import Entry, TrialIndex
from trainspect.store.index_batch import BatchBuilder, is_float_dtype
from trainspect.store.jsonfile import DictOf, ListOf, Obj, load_json
from trainspect.store.layout import RunLayout
from trainspect.store.nogc import paused_gc
from trainspect.store.pieces import parse_partials, parse_shard
from trainspect.store.quick_scan import QuickScan, parse_layout, quick_scan
from trainspect.store.run_writer import COLLECTIONS_FILE
from trainspect.store.safe_files import MAX_DEPTH, loads_bounded, open_regular
from trainspect.store.tensor_file import INDEX_PREFIX, KIND_INDEX
from trainspect.store.warner import Kind, Warner

__all__ = ["TrainspectSource"]

log = logging.getLogger(__name__)
_MODES = {int(m): m for m in ModeKeys}
_NONFINITE = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}
_NAMES = ListOf(str)
COLLECTIONS_SHAPE = Obj(
    {
        "collections": DictOf(
            Obj(
                {"name": str},
                {
                    "include_regex": _NAMES,
                    "tensor_names": _NAMES,
                    "save_config": dict,
                    "reduction_config": dict,
                    "module_types": _NAMES,
                    "module_names": _NAMES,
                },
            )
        )
    },
    {"schema_version": int},
)
"""The shape of ``tensors/<worker>/collections.json``."""
UNREADABLE = Kind("unreadable index files")
CORRUPT = Kind("corrupt index records", per_file=False)
INCOMPLETE = Kind("incomplete last index records")
WRONG_SHAPE = Kind("index records of the wrong shape", per_file=False)
MISSING_DATA = Kind("missing data files")
MALFORMED = {"sh": Kind("malformed shard descriptions"), "pt": Kind("malformed partials descriptions")}
DAMAGED_COLLECTIONS = Kind("damaged collections files")
MISSING_TEXT = (
    "it is missing: the raw tensor values its index points to cannot be read (losses and saved reductions "
    "stay readable)"
)


RELEASE_BYTES = 256 << 20
"""Bytes read from one mapped data file after which its pages are given back (``madvise(MADV_DONTNEED)``).

Values are read from memory-mapped data files, and every page read stays resident in the process (file-backed, but
counted in its RSS by every monitor and container limit): reading a 17 GB run showed 16 GB. Giving the pages back
every so many bytes keeps the resident size of a whole-run read near this bound per file; arrays already returned
stay valid (the mapping is read-only and file-backed: touching them again reads the page cache).
"""


class TrainspectSource:
    """Tails the index files of every worker; remembers where it stopped in each."""

    def __init__(self, root: Path) -> None:
        self.layout = RunLayout(root)
        self._offsets: dict[Path, int] = {}
        self._maps: dict[str, Any] = {}
        self._read_since: dict[str, int] = {}  # bytes read from each mapping since its pages were last given back
        self.corrupt_records = 0
        self._warn = Warner(deferred=True, kind=UNREADABLE, logger=log)
        self._data_files: dict[str, bool] = {}
        self._paths: dict[tuple[str, Any], str] = {}
        self.problems: list[str] = []
        """What was skipped: one line per kind of problem, with a count and the first file."""

    @staticmethod
    def detect(root: Path) -> bool:
        """Return whether ``root`` looks like a trainspect run directory."""
        layout = RunLayout(root)
        return layout.manifest.exists() or layout.tensors_dir.is_dir()

    def ended(self) -> bool:
        """Whether the job wrote its end marker."""
        return self.layout.end_marker.exists()

    def refresh(self, index: TrialIndex) -> int:
        """Read every complete index record written since the last call; return how many steps were read."""
        new = 0
        if not self.layout.tensors_dir.is_dir():
            return 0
        with paused_gc():
            for worker_dir in sorted(p for p in self.layout.tensors_dir.iterdir() if p.is_dir()):
                for idx_file in sorted(worker_dir.glob(f"{INDEX_PREFIX}*.idx")):
                    new += self._read_index(index, worker_dir.name, idx_file)
        self._flush()
        return new

    def _read_index(self, index: TrialIndex, worker: str, path: Path) -> int:
        start = self._offsets.get(path, 0)
        try:
            size = path.stat().st_size
            if size <= start:
                return 0
            with open_regular(path) as fh:
                fh.seek(start)
                buf = fh.read(size - start)
        except OSError as exc:
            self._warn(path, f"cannot read it: {exc}")
            return 0
        quick = quick_scan(buf, start)
        scan: QuickScan | FrameScan = quick or scan_frames(buf, start)
        self._offsets[path] = scan.resume_at
        if scan.corrupt:
            self.corrupt_records += scan.corrupt
            detail = f": {scan.problems[0]}" if scan.problems else ""
            self._warn(path, f"skipped {scan.corrupt} corrupt index record(s){detail}", CORRUPT, scan.corrupt)
        if scan.truncated:
            self._warn(
                path,
                f"skipped an incomplete last record at byte {scan.resume_at} (still being written, or "
                "the job was killed while writing it); it is read once complete",
                INCOMPLETE,
            )
        folder = path.parent
        records = quick.payloads if quick else [r.payload for r in getattr(scan, "records", ()) if r.kind == KIND_INDEX]
        batch = BatchBuilder(worker)
        self._add_records(batch, path, folder, records)
        built = batch.build()
        if built is not None:
            index.add_batch(built)
        return quick.count if quick else len(getattr(scan, "records", ()))

    def _add_records(self, batch: BatchBuilder, path: Path, folder: Path, records: list[bytes]) -> None:
        """Add the index records of a read in order: those of the writer's own layout in bulk, any other one by one."""
        if not records:
            return
        lay = parse_layout(records)
        for lo, hi, bulk in lay.runs():
            if not bulk:
                part = records[lo:hi]
                for payload, doc in zip(part, _parse_records(part), strict=True):
                    self._add(batch, path, folder, payload, doc)
                continue
            used, first = np.unique(lay.file[lo:hi], return_index=True)
            for code in used[np.argsort(first, kind="stable")].tolist():
                data_file = self._data_path(folder, lay.files[code])
                if not self._data_file_exists(data_file):
                    self._warn(data_file, MISSING_TEXT, MISSING_DATA)
            batch.layout(lay, lo, hi)

    def _add(self, batch: BatchBuilder, path: Path, folder: Path, payload: bytes, doc: Any) -> None:
        try:
            if doc is None:  # not parsed with the others: one by one (the format is UTF-8: no encoding detection)
                doc = loads_bounded(payload.decode())
            gs, mode, mode_step, wall = int(doc["g"]), int(doc["m"]), int(doc["ms"]), float(doc.get("t", 0))
            _MODES[mode]  # noqa: B018 - a KeyError for an unknown mode
            data_file = self._data_path(folder, doc["f"])
            entries = [_parsed(e, data_file) for e in doc.get("e", ())]
        except (ValueError, KeyError, TypeError, AttributeError, UnicodeDecodeError):
            self.corrupt_records += 1
            self._warn(path, "skipped an index record of the wrong shape", WRONG_SHAPE)
            return
        if b'"sh":' in payload or b'"pt":' in payload:  # a sharded tensor's piece (a cheap test for every record)
            self._add_piece_fields(doc.get("e", ()), entries, folder, gs)
        batch.record(gs, mode, mode_step, wall)
        if not self._data_file_exists(data_file):
            self._warn(data_file, MISSING_TEXT, MISSING_DATA)
        for name, entry, scalar in entries:
            if scalar is not None:
                batch.scalar(name, *scalar)
            elif entry is not None:
                batch.entry(name, entry)

    def _add_piece_fields(self, docs: list[dict[str, Any]], entries: list[_Parsed], folder: Path, step: int) -> None:
        """Give the entries their ``shard`` and ``partials``; a malformed one is dropped with one warning per worker."""
        for doc, (name, entry, _) in zip(docs, entries, strict=True):
            for key, parse, field in (("sh", parse_shard, "shard"), ("pt", parse_partials, "partials")):
                if key not in doc or entry is None:  # (an entry with either key is never a plain scalar)
                    continue
                try:
                    setattr(entry, field, parse(doc[key], entry.shape))
                except (ValueError, TypeError) as exc:
                    self._warn(
                        folder,
                        f"dropped the malformed {field} description ({key!r}) of {name} at step "
                        f"{step} ({exc}), and any later one of this worker without another warning; "
                        f'the piece stays readable with value(step, worker="{folder.name}")',
                        MALFORMED[key],
                    )

    def _data_path(self, folder: Path, name: Any) -> str:
        """``str(folder / name)``, remembered (every index record names its data file; there are few)."""
        key = (str(folder), name)  # a str hashes much faster than a Path
        found = self._paths.get(key)
        if found is None:
            found = self._paths[key] = str(folder / name)
        return found

    def _data_file_exists(self, path: str) -> bool:
        known = self._data_files.get(path)
        if known is None:
            known = self._data_files[path] = os.path.exists(path)
        return known

    def read(self, entry: Entry) -> np.ndarray:
        """Read one stored array (checksum verified).

        Raises:
            CorruptRecord: the record is truncated or fails its checksum.
        """
        assert entry.dtype is not None and entry.shape is not None
        if entry.inline is not None:
            return np.array(entry.inline, dtype=np.dtype(entry.dtype)).reshape(entry.shape)
        assert entry.file is not None
        mapped = self._mapped(entry.file, entry.offset + HEADER_SIZE + entry.length)
        try:
            payload = read_frame_at(mapped, entry.offset, entry.length)
        except CorruptRecord as exc:
            raise CorruptRecord(f"{entry.file}: {exc}") from None
        self._give_back(entry.file, mapped, entry.length)
        return np.frombuffer(payload, dtype=np.dtype(entry.dtype)).reshape(entry.shape)

    def _give_back(self, path: str, mapped: Any, nbytes: int) -> None:
        """Count bytes read from a mapping; past :data:`RELEASE_BYTES`, drop its resident pages (see there)."""
        total = self._read_since.get(path, 0) + nbytes
        if total < RELEASE_BYTES or not isinstance(mapped, mmap.mmap) or not hasattr(mmap, "MADV_DONTNEED"):
            self._read_since[path] = total
            return
        self._read_since[path] = 0
        try:
            mapped.madvise(mmap.MADV_DONTNEED)
        except (OSError, ValueError) as exc:  # an unsupported platform: the pages stay (as before)
            log.debug("trainspect: could not give back the pages of %s: %s", path, exc)

    def _mapped(self, path: str, needed: int) -> Any:
        """The file mapped read-only, remapped when the job has appended past the old mapping."""
        current = self._maps.get(path)
        if current is not None and len(current) >= needed:
            return current
        with open_regular(path) as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return b""
            mapped = mmap.mmap(fh.fileno(), size, access=mmap.ACCESS_READ)
        self._maps[path] = mapped  # an older mapping stays alive while arrays still view it
        return mapped

    def collections(self) -> dict[str, Collection]:
        """Return the collections the workers recorded (merged across workers).

        A worker whose ``collections.json`` is missing or damaged is named in a warning, and the built-in
        collections (``weights``, ``gradients``, ``losses``...) are then matched by their patterns.
        """
        out: dict[str, Collection] = {}
        if not self.layout.tensors_dir.is_dir():
            return out
        fallback = False
        for folder in sorted(p for p in self.layout.tensors_dir.iterdir() if p.is_dir()):
            colls = self._folder_collections(folder)
            fallback = fallback or colls is None
            for coll in colls or ():
                if coll.name in out:
                    out[coll.name].tensor_names |= coll.tensor_names
                else:
                    out[coll.name] = coll
        if fallback:
            builtins = CollectionManager()
            for name in BUILTIN_COLLECTIONS:
                coll = builtins.get(name)
                if name not in out and coll.include_regex:
                    out[name] = coll
        self._flush()
        return out

    def _folder_collections(self, folder: Path) -> list[Collection] | None:
        """The collections of one worker folder, or None (with a warning) when its file is missing or damaged."""
        path = folder / COLLECTIONS_FILE
        try:
            doc = load_json(path, COLLECTIONS_SHAPE)
            return [Collection.from_dict(data) for data in doc["collections"].values()]
        except FileNotFoundError:
            pass  # named by the Trial's file check once the job is over (a running job writes it late)
        except (DamagedFile, ConfigError, ValueError, TypeError, KeyError) as exc:
            text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, DamagedFile) else str(exc)
            text = text.removeprefix(f"{path}: ")
            self._warn(path, f"{text}; the built-in collections' patterns are used", DAMAGED_COLLECTIONS)
        return None

    def worker_names(self) -> list[str]:
        """Return the workers that have a tensor folder or a worker manifest."""
        names = (
            {p.name for p in self.layout.tensors_dir.iterdir() if p.is_dir()}
            if self.layout.tensors_dir.is_dir()
            else set()
        )
        return sorted(names)

    def close(self) -> None:
        """Drop the file mappings (arrays already returned keep theirs alive)."""
        self._maps.clear()

    def _flush(self) -> None:
        """Log what was skipped since the last call (one line per kind) and update :attr:`problems`."""
        self._warn.flush()
        self.problems[:] = self._warn.summary()


def _parse_records(payloads: list[bytes]) -> list[Any]:
    """Parse index records together (one JSON call for all); a batch that fails is left to be parsed one by one.

    Example:
        >>> _parse_records([b'{"g": 1}', b'{"g": 2}']), _parse_records([b'{"g": 1}', b'{"g"'])
        ([{'g': 1}, {'g': 2}], [None, None])
    """
    if not payloads:
        return []
    if max(p.count(b"[") + p.count(b"{") for p in payloads) >= MAX_DEPTH:  # none can be nested that deep
        return [None] * len(payloads)
    try:
        docs = json.loads(b"[" + b",".join(payloads) + b"]")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return [None] * len(payloads)
    return docs if isinstance(docs, list) and len(docs) == len(payloads) else [None] * len(payloads)


_Parsed = tuple[str, "Entry | None", "tuple[float, str, tuple[int, ...]] | None"]
"""An entry of an index record: its name, and its Entry, or (value, dtype, shape) when it is a plain scalar."""


def _parsed(e: dict[str, Any], data_file: str) -> _Parsed:
    """One tensor's entry of an index record: a one-element float kept in the index as numbers, any other as an Entry.

    Raises KeyError, TypeError or ValueError when malformed (as :func:`_entry`).

    Example:
        >>> _parsed({"n": "loss", "v": 0.5, "d": "<f4", "s": []}, "data-000000.bin")
        ('loss', None, (0.5, '<f4', ()))
    """
    name = str(e["n"])
    if "v" in e and "s" in e and "r" not in e and "sh" not in e and "pt" not in e:
        value = e["v"]
        if type(value) is str:
            value = _NONFINITE.get(value, value)
        dtype = str(e["d"])
        if type(value) is float and is_float_dtype(dtype):
            shape = tuple(map(int, e["s"]))
            if all(size == 1 for size in shape):
                return name, None, (value, dtype, shape)
    return name, _entry(e, data_file), None


def _entry(e: dict[str, Any], data_file: str) -> Entry:
    """One tensor's entry of an index record (raises KeyError, TypeError or ValueError when malformed)."""
    red = e.get("r")
    if red:
        red = {str(k): _NONFINITE.get(v, v) if isinstance(v, str) else float(v) for k, v in red.items()}
    shape = tuple(map(int, e["s"])) if "s" in e else None
    if "v" in e:
        value = e["v"]
        value = _NONFINITE.get(value, value) if isinstance(value, str) else value
        return Entry(None, 0, 0, str(e["d"]), shape, red, inline=value)
    if "o" in e:
        return Entry(data_file, int(e["o"]), int(e["l"]), str(e["d"]), shape, red)
    return Entry(None, 0, 0, None, shape, red)
