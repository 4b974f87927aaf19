"""A local copy of a URL run directory, brought up to date by one listing per refresh.

Each refresh lists the run's prefix once (one request per thousand objects), then fetches only what is new:
the parts of growing files past what the copy holds (parts are immutable: a part once fetched is never fetched
again), and the whole files whose ETag changed. Data parts are applied before index parts and the end marker last,
so the copy is always a consistent run directory that the local readers (Trial, profiler readers, rules, report,
TensorBoard plugin) read as they read a run in progress. The same code reads smdebug's and SageMaker's layouts
(``debug-output``, ``profiler-output``): their objects are whole files.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import weakref
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainspect.store.layout import safe_component
from trainspect.store.remote.uploader import END_MARKER, PARTS
from trainspect.store.remote.url import StoreUnavailable, describe, open_store

__all__ = ["Mirror"]

_INDEX_SUFFIXES = (".idx", ".tsys", ".tfw")
_BATCH_BYTES = 256 << 20  # objects fetched together (concurrently) hold at most about this much in memory
_Part = tuple[str, str, int, int, int]  # file, key, bytes to skip, offset, size


@dataclass
class _Listing:
    parts: dict[str, list[tuple[int, str, int]]] = field(default_factory=dict)  # file -> [(offset, key, size)]
    whole: dict[str, tuple[str, str]] = field(default_factory=dict)  # file -> (key, version)


def _version(info: dict[str, Any]) -> str:
    tag = info.get("ETag") or info.get("etag") or info.get("md5Hash")
    return str(tag) if tag else f"{info.get('size')}:{info.get('mtime') or info.get('LastModified')}"


class Mirror:
    """The local copy of one URL run directory.

    Args:
        url: the run directory in the store.
        cache_dir: where the copy is kept (default: a temporary folder removed at exit).
    """

    def __init__(self, url: str, cache_dir: str | os.PathLike[str] | None = None, who: str = "create_trial") -> None:
        self.url = url.rstrip("/")
        self.fs, self.root = open_store(self.url, who)
        if cache_dir is None:
            top = tempfile.mkdtemp(prefix="trainspect-mirror-")
            self.local = Path(top) / safe_component(self.root.rsplit("/", 1)[-1])  # the run keeps its name
            self.local.mkdir()
            self._cleanup = weakref.finalize(self, shutil.rmtree, top, True)
        else:
            self.local = Path(cache_dir)
            self.local.mkdir(parents=True, exist_ok=True)
        self._sizes: dict[str, int] = {}
        self._versions: dict[str, str] = {}
        self.requests = 0
        self._local_stat: dict[str, tuple[int, int]] = {}
        self._lock = threading.Lock()

    def _list(self) -> _Listing:
        self.fs.invalidate_cache()
        found = self.fs.find(self.root, detail=True)
        self.requests += 1 + len(found) // 1000
        listing = _Listing()
        cut = len(self.root) + 1
        for key, info in found.items():
            rel = key[cut:]
            if not rel or info.get("type") == "directory":
                continue
            if PARTS in rel:
                name, offset = rel.rsplit(PARTS, 1)
                if offset.isdigit():
                    listing.parts.setdefault(name, []).append((int(offset), key, int(info.get("size") or 0)))
                continue
            listing.whole[rel] = (key, _version(info))
        return listing

    def exists(self) -> bool:
        """Whether the store holds any object under the URL (checked by the first :meth:`sync`)."""
        return any(self.local.iterdir())

    def sync(self) -> bool:
        """Fetch what is new; return whether anything changed.

        Raises:
            StoreUnavailable: the store could not be listed or read (one line with its error).
        """
        with self._lock:
            try:
                listing = self._list()
                first, last = self._plan_parts(listing)
                whole = {rel: kv for rel, kv in listing.whole.items() if self._versions.get(rel) != kv[1]}
                end = whole.pop(END_MARKER, None)
                self._fetch_parts(first)
                self._fetch_whole(whole)
                self._fetch_parts(last)
                if end is not None:
                    self._fetch_whole({END_MARKER: end})
            except StoreUnavailable:
                raise
            except Exception as exc:  # the backend's own errors
                raise StoreUnavailable(f"{self.url}: {describe(exc)}") from exc
            return bool(first or last or whole or end)

    def _plan_parts(self, listing: _Listing) -> tuple[list[_Part], list[_Part]]:
        """The (file, key, skip, offset, size) of parts to fetch: data files first, index files last."""
        first: list[_Part] = []
        last: list[_Part] = []
        for rel, parts in listing.parts.items():
            have = self._sizes.get(rel, 0)
            target = last if rel.endswith(_INDEX_SUFFIXES) else first
            for offset, key, size in sorted(parts):
                if offset > have:
                    break  # a gap: a part not listed yet; the next refresh fills it
                if offset + size > have or (not size and rel not in self._sizes):  # an empty part: the file exists
                    target.append((rel, key, have - offset, offset, size))
                    have = offset + size
        return first, last

    def _fetch_parts(self, parts: list[_Part]) -> None:
        batch: list[_Part] = []
        size = 0
        for part in parts:  # in batches of at most _BATCH_BYTES in memory, fetched concurrently
            batch.append(part)
            size += part[4]
            if size >= _BATCH_BYTES:
                self._fetch_batch(batch)
                batch, size = [], 0
        if batch:
            self._fetch_batch(batch)

    def _fetch_batch(self, parts: list[_Part]) -> None:
        full = [key for _, key, skip, _, _ in parts if skip == 0]
        blobs = self.fs.cat(full) if full else {}
        self.requests += len(parts)
        if isinstance(blobs, bytes):
            blobs = {full[0]: blobs}
        for rel, key, skip, offset, _ in parts:
            data = blobs[key] if skip == 0 else self.fs.cat_file(key, start=skip)
            path = self.local / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "r+b" if path.exists() else "wb") as fh:
                fh.truncate(offset + skip)  # drop what a superseded part left beyond its own end
                fh.seek(offset + skip)
                fh.write(data)
            self._sizes[rel] = offset + skip + len(data)

    def _fetch_whole(self, whole: dict[str, tuple[str, str]]) -> None:
        items = list(whole.items())
        for i in range(0, len(items), 256):  # smdebug's layout has an object per step: fetched 256 at a time
            self._fetch_whole_batch(dict(items[i : i + 256]))

    def _fetch_whole_batch(self, whole: dict[str, tuple[str, str]]) -> None:
        keys = [key for key, _ in whole.values()]
        blobs = self.fs.cat(keys)
        self.requests += len(keys)
        if isinstance(blobs, bytes):
            blobs = {keys[0]: blobs}
        for rel, (key, version) in whole.items():
            path = self.local / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f".{path.name}.mirror-tmp")
            tmp.write_bytes(blobs[key])
            os.replace(tmp, path)
            self._versions[rel] = version
            self._local_stat[rel] = _stat(path)

    def push_back(self, names: tuple[str, ...] = ("rules/verdicts.json", "report.html")) -> list[str]:
        """Upload the files a command wrote into the copy (verdicts, report); return their URLs."""
        sent = []
        for rel in names:
            path = self.local / rel
            if path.is_file() and self._local_stat.get(rel) != _stat(path):
                self.fs.pipe_file(f"{self.root}/{rel}", path.read_bytes())
                self._local_stat[rel] = _stat(path)
                sent.append(f"{self.url}/{rel}")
        return sent


def _stat(path: Path) -> tuple[int, int]:
    st = path.stat()
    return st.st_size, st.st_mtime_ns
