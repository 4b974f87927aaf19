"""Reads trial directories written by smdebug 1.0.x (``events/``, ``index/``, ``collections/``; spec 5.7).

Each index file maps a (step, worker) to byte ranges of TFRecord-framed TensorBoard ``Event`` protos in an event
file; values are decoded with TensorBoard's own protos. Reductions saved as ``smdebug/reductions/<red>/<name>``
tensors are attached to their tensor, as the Trial expects.
"""

from __future__ import annotations

import logging
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.collections import Collection
from trainspect.modes import ModeKeys, parse_mode
from trainspect.reductions import Reduction
from trainspect.store.framing import CorruptRecord
from trainspect.store.index import Entry, TrialIndex
from trainspect.store.safe_files import load_json_bounded, open_regular

__all__ = ["SmdebugSource"]

log = logging.getLogger(__name__)
_INDEX_NAME = re.compile(r"^(\d+)_(.+)\.json$")
_REDUCTION = re.compile(r"^smdebug/reductions/(abs_)?([a-z0-9_]+)/(.+)$")


def _decode_event(raw: bytes) -> tuple[str, np.ndarray]:
    from tensorboard.compat.proto import event_pb2
    from tensorboard.util import tensor_util

    if len(raw) < 12:
        raise CorruptRecord("TFRecord header truncated")
    (length,) = struct.unpack_from("<Q", raw, 0)
    data = raw[12 : 12 + length]
    if len(data) < length:
        raise CorruptRecord("TFRecord data truncated")
    event = event_pb2.Event.FromString(data)
    value = event.summary.value[0]
    return value.tag, tensor_util.make_ndarray(value.tensor)


class SmdebugSource:
    """Index reader for an smdebug trial directory."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.corrupt_records = 0
        self.problems: list[str] = []
        self._seen: set[Path] = set()
        self._warned = False

    @staticmethod
    def detect(root: Path) -> bool:
        """Return whether ``root`` looks like an smdebug trial."""
        return (root / "index").is_dir() or (root / "collections").is_dir()

    def ended(self) -> bool:
        """Whether the job wrote ``training_job_end.ts``."""
        return (self.root / "training_job_end.ts").exists()

    def refresh(self, index: TrialIndex) -> int:
        """Read index files not read before."""
        new = 0
        index_dir = self.root / "index"
        if not index_dir.is_dir():
            return 0
        for path in sorted(index_dir.glob("*/*.json")):
            if path in self._seen:
                continue
            match = _INDEX_NAME.match(path.name)
            if not match:
                continue
            try:
                doc = load_json_bounded(path)
            except (OSError, ValueError):
                continue  # still being written: retried at the next refresh
            self._seen.add(path)
            self._add(index, int(match.group(1)), match.group(2), doc)
            new += 1
        return new

    def _add(self, index: TrialIndex, step: int, worker: str, doc: dict[str, Any]) -> None:
        meta = doc.get("meta", {})
        try:
            mode = parse_mode(str(meta.get("mode", "GLOBAL")))
        except ValueError:
            mode = ModeKeys.GLOBAL
        event_file = str(self.root / meta.get("event_file_name", ""))
        index.add_step(worker, step, mode, int(meta.get("mode_step", step)), 0.0)
        shapes = {s.get("tensorname"): tuple(s.get("shape", ())) for s in doc.get("shape_payload", [])}
        reductions: dict[str, dict[str, float]] = {}
        for item in doc.get("tensor_payload", []):
            name = item["tensorname"]
            entry = Entry(event_file, int(item["start_idx"]), int(item["length"]), None, shapes.get(name), None, 1)
            red = _REDUCTION.match(name)
            if red:
                self._add_reduction(reductions, red, entry)
            else:
                index.add_tensor(name, step, worker, entry)
        for name, values in reductions.items():
            per_worker = index.tensors.get(name, {}).get(step, {})
            existing = per_worker.get(worker)
            if existing is None:
                index.add_tensor(name, step, worker, Entry(None, 0, 0, None, shapes.get(name), values, 1))
            else:
                existing.reductions = values

    def _add_reduction(self, out: dict[str, dict[str, float]], match: re.Match[str], entry: Entry) -> None:
        text = f"{match.group(1) or ''}{match.group(2)}"
        try:
            key = Reduction.parse(text).key  # smdebug's "l2_norm" is written "l2", as trainspect writes it
        except ValueError:
            key = text.replace("_norm", "")  # a reduction trainspect does not compute: kept under its own name
        try:
            value = float(np.asarray(self.read(entry)).reshape(-1)[0])
        except (CorruptRecord, OSError, IndexError, ValueError):
            self.corrupt_records += 1
            return
        out.setdefault(match.group(3), {})[key] = value

    def read(self, entry: Entry) -> np.ndarray:
        """Decode one event record.

        Raises:
            CorruptRecord: the bytes are missing or cannot be decoded.
        """
        assert entry.file is not None
        with open_regular(entry.file) as fh:
            fh.seek(entry.offset)
            raw = fh.read(max(entry.length, 12))
            if len(raw) >= 12:
                (length,) = struct.unpack_from("<Q", raw, 0)
                if len(raw) < 16 + length:
                    raw += fh.read(16 + length - len(raw))
        try:
            return _decode_event(raw)[1]
        except CorruptRecord:
            raise
        except Exception as exc:  # a protobuf decode error: report it as a corrupt record
            raise CorruptRecord(f"cannot decode the record at byte {entry.offset} of {entry.file}: {exc}") from None

    def collections(self) -> dict[str, Collection]:
        """Read ``collections/*/<worker>_collections.json``."""
        out: dict[str, Collection] = {}
        for path in sorted((self.root / "collections").glob("*/*_collections.json")):
            try:
                doc = load_json_bounded(path)
            except (OSError, ValueError):
                continue
            for name, data in (doc.get("collections") or {}).items():
                coll = Collection(
                    str(data.get("name", name)),
                    include_regex=list(data.get("include_regex") or []),
                    tensor_names=set(data.get("tensor_names") or []),
                )
                if name in out:
                    out[name].tensor_names |= coll.tensor_names
                else:
                    out[name] = coll
        return out

    def worker_names(self) -> list[str]:
        """Workers are known from the index files."""
        return []

    def close(self) -> None:
        """Nothing is kept open."""
