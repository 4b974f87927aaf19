"""Sends a spool directory (a run directory on local disk) to an object store as immutable parts.

Object stores have no append and no rename, so a file that grows (tensor data and index, profiler chunks,
TensorBoard event files) goes up as parts: ``<file>.parts/<offset>`` holds the bytes from ``offset`` up to what
was written when the part was cut, and the parts of a file, in offset order, are the file. Other files (JSON)
go up whole when they change. In every sweep the index files are measured before the data files and the data
parts are sent before the index parts, so a reader that sees an index entry finds its bytes. docs/format.md
("Object-store layout") specifies it.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainspect.store.remote.url import describe, join

__all__ = ["SpoolSync", "is_growing", "part_key", "END_MARKER", "STATE_FILE", "MANIFEST"]

log = logging.getLogger(__name__)
END_MARKER = "training_job_end.ts"
MANIFEST = "trainspect.json"
STATE_FILE = ".trainspect-upload.json"
PARTS = ".parts/"
_GROWING_SUFFIXES = (".bin", ".idx", ".tsys", ".tfw")
_INDEX_SUFFIXES = (".idx", ".tsys", ".tfw")
_PART_BYTES = 64 << 20  # one part holds at most this much (a long outage is sent in several)
_BATCH_BYTES = 256 << 20  # parts sent together (concurrently) hold at most about this much in memory


def is_growing(rel: str) -> bool:
    """Whether a run-directory file only ever grows (sent as parts) rather than being replaced (sent whole)."""
    name = rel.rsplit("/", 1)[-1]
    return name.endswith(_GROWING_SUFFIXES) or "tfevents" in name


def part_key(rel: str, offset: int) -> str:
    """The object name of the part of ``rel`` that starts at byte ``offset``."""
    return f"{rel}{PARTS}{offset:016d}"


@dataclass
class _Plan:
    first: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # key -> (rel, start, end): data parts
    last: dict[str, tuple[str, int, int]] = field(default_factory=dict)  # index parts, sent after the data
    whole: dict[str, tuple[str, tuple[int, int]]] = field(default_factory=dict)  # key -> (rel, (size, mtime))


class SpoolSync:
    """What of one spool reached the store, and one sweep that sends the rest (no thread; see ``Uploader``).

    Args:
        spool: the local run directory.
        fs: the fsspec filesystem of the store.
        root: the run's path in the store (without the scheme).
        url: the run's URL (for messages and the state file).
    """

    def __init__(self, spool: Path, fs: Any, root: str, url: str) -> None:
        self.spool = spool
        self.fs = fs
        self.root = root
        self.url = url
        self.sent: dict[str, int] = {}  # growing file -> bytes sent
        self.whole: dict[str, list[int]] = {}  # whole file -> [size, mtime_ns] sent
        self.manifest_sent = False
        self._load_state()

    # --- state --------------------------------------------------------------------------------------------
    def _load_state(self) -> None:
        try:
            doc = json.loads((self.spool / STATE_FILE).read_text(encoding="utf-8"))
            self.sent = {str(k): int(v) for k, v in doc.get("sent", {}).items()}
            self.whole = {str(k): list(v) for k, v in doc.get("whole", {}).items()}
            self.manifest_sent = bool(doc.get("manifest_sent"))
        except (OSError, ValueError, TypeError, AttributeError):
            pass

    def save_state(self) -> None:
        """Record in the spool what reached the store (``trainspect sync`` resumes from it)."""
        doc = {"url": self.url, "sent": self.sent, "whole": self.whole, "manifest_sent": self.manifest_sent}
        tmp = self.spool / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(doc), encoding="utf-8")
        os.replace(tmp, self.spool / STATE_FILE)

    # --- measuring ----------------------------------------------------------------------------------------
    def _files(self) -> list[str]:
        out = []
        for folder, dirs, names in os.walk(self.spool):
            dirs[:] = [d for d in dirs if not d.startswith(".")]
            rel_dir = os.path.relpath(folder, self.spool)
            for name in names:
                if not name.startswith(".") and not name.endswith(".tmp"):
                    out.append(name if rel_dir == "." else f"{rel_dir}/{name}".replace(os.sep, "/"))
        return out

    def backlog(self) -> int:
        """Bytes of growing files written to the spool and not yet sent."""
        total = 0
        for rel in self._files():
            if is_growing(rel):
                try:
                    total += max(0, os.stat(self.spool / rel).st_size - self.sent.get(rel, 0))
                except OSError:
                    continue
        return total

    def _plan(self, with_end: bool) -> _Plan:
        plan = _Plan()
        files = self._files()
        sizes: dict[str, int] = {}
        for rel in sorted(files, key=lambda r: not r.endswith(_INDEX_SUFFIXES)):  # index files measured first
            try:
                st = os.stat(self.spool / rel)
            except OSError:
                continue
            if is_growing(rel):
                sizes[rel] = st.st_size
            elif (rel != END_MARKER or with_end) and self.whole.get(rel) != [st.st_size, st.st_mtime_ns]:
                plan.whole[join(self.root, rel)] = (rel, (st.st_size, st.st_mtime_ns))
        for rel, size in sizes.items():
            start = self.sent.get(rel, 0)
            target = plan.last if rel.endswith(_INDEX_SUFFIXES) else plan.first
            if size == 0 and rel not in self.sent:  # an empty file (losses only: no raw values) still exists
                target[join(self.root, part_key(rel, 0))] = (rel, 0, 0)
            while start < size:
                end = min(size, start + _PART_BYTES)
                target[join(self.root, part_key(rel, start))] = (rel, start, end)
                start = end
        return plan

    # --- sending ------------------------------------------------------------------------------------------
    def _read(self, rel: str, start: int, end: int) -> bytes:
        with open(self.spool / rel, "rb") as fh:
            fh.seek(start)
            return fh.read(end - start)

    def _send_parts(self, parts: dict[str, tuple[str, int, int]]) -> None:
        batch: dict[str, tuple[str, int, int]] = {}
        size = 0
        for key, part in parts.items():  # in batches of at most _BATCH_BYTES in memory, sent concurrently
            batch[key] = part
            size += part[2] - part[1]
            if size >= _BATCH_BYTES:
                self._send_batch(batch)
                batch, size = {}, 0
        if batch:
            self._send_batch(batch)

    def _send_batch(self, parts: dict[str, tuple[str, int, int]]) -> None:
        self.fs.pipe({key: self._read(rel, start, end) for key, (rel, start, end) in parts.items()})
        for rel, _, end in parts.values():
            self.sent[rel] = max(self.sent.get(rel, 0), end)

    def _send_whole(self, whole: dict[str, tuple[str, tuple[int, int]]], with_end: bool) -> None:
        items = {k: v for k, v in whole.items() if v[0] not in (END_MARKER, MANIFEST)}
        if not self.manifest_sent and (self.spool / MANIFEST).exists():
            key = join(self.root, MANIFEST)
            if not self.fs.exists(key):  # the first worker's manifest stays (all ranks of a job write the same one)
                self.fs.pipe_file(key, (self.spool / MANIFEST).read_bytes())
            self.manifest_sent = True
        if items:
            self.fs.pipe({key: (self.spool / rel).read_bytes() for key, (rel, _) in items.items()})
            for rel, stat in items.values():
                self.whole[rel] = list(stat)

    def sweep(self, with_end: bool = False) -> None:
        """Send what was written since the last sweep (the end marker too, last, when ``with_end``).

        Raises:
            Exception: whatever the store raised; what was sent before stays recorded and is not sent again.
        """
        plan = self._plan(with_end)
        try:
            self._send_parts(plan.first)
            self._send_whole(plan.whole, with_end)
            self._send_parts(plan.last)
            if with_end and (self.spool / END_MARKER).exists():
                self.fs.pipe_file(join(self.root, END_MARKER), (self.spool / END_MARKER).read_bytes())
        finally:
            self.save_state()

    def all_workers_ended(self, world_size: int) -> bool:
        """Whether ``world_size`` worker manifests in the store record an end (the last worker writes the marker)."""
        ended = 0
        for key in self.fs.glob(join(self.root, "workers/*.json")):
            try:
                ended += json.loads(self.fs.cat_file(key)).get("end_time") is not None
            except (ValueError, AttributeError):
                continue
        return ended >= world_size

    def mark_end(self) -> None:
        """Write the end marker to the store."""
        import time

        self.fs.pipe_file(join(self.root, END_MARKER), f"{time.time():.6f}\n".encode())

    def failure(self, exc: BaseException) -> str:
        """One line about an upload failure."""
        return f"cannot upload to {self.url} ({describe(exc)})"
