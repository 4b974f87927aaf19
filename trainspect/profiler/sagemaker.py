"""Readers of SageMaker profiler-output folders (spec 3.2-3.3): system JSON lines and framework traces."""

from __future__ import annotations

import gzip
import json
import logging
import re
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.modes import parse_mode
from trainspect.profiler.arrays import FrameworkTables, SystemArrays, merge_system
from trainspect.profiler.events import TraceEvent, key_for

__all__ = ["is_sagemaker_dir", "SageMakerSystemStore", "SageMakerFrameworkStore"]

logger = logging.getLogger(__name__)
_SYS_FILE = re.compile(r"(\d{10})\.algo-\d+\.json$")
_FW_FILE = re.compile(r"^(\d+)_([^_]+)_(.+)$")
_SPAN = {"forward": 1, "backward": 2, "optimizer": 3}


def is_sagemaker_dir(path: Path) -> bool:
    """Whether ``path`` looks like a SageMaker profiler-output folder."""
    return (path / "system" / "incremental").is_dir() or (path / "framework" / "pevents").is_dir()


class _Warner:
    def __init__(self) -> None:
        self.warned: set[Path] = set()

    def __call__(self, path: Path, text: str) -> None:
        if path not in self.warned:
            self.warned.add(path)
            logger.warning("trainspect: skipped damaged profiler data in %s: %s", path, text)


class SageMakerSystemStore:
    """System metric files ``<base>/system/incremental/[…/]<10 digits>.algo-N.json``, parsed on refresh."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._files: dict[Path, tuple[int, list[dict[str, Any]]]] = {}
        self._warn = _Warner()
        self._nodes: dict[str, SystemArrays] | None = None

    def refresh(self) -> None:
        """Parse new or grown files."""
        for path in sorted((self.base / "system").rglob("*.json")):
            if not _SYS_FILE.search(path.name):
                continue
            size = path.stat().st_size
            if path in self._files and self._files[path][0] == size:
                continue
            self._files[path] = (size, self._parse(path))
            self._nodes = None

    def _parse(self, path: Path) -> list[dict[str, Any]]:
        out, bad = [], 0
        for line in path.read_text(errors="replace").splitlines():
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out.append(
                    {
                        "t": float(rec["Timestamp"]),
                        "key": key_for(
                            str(rec.get("Type", "")), str(rec.get("Name", "")), str(rec.get("Dimension", ""))
                        ),
                        "v": float(rec["Value"]),
                        "node": str(rec.get("NodeId", "algo-1")),
                    }
                )
            except (ValueError, KeyError, TypeError):
                bad += 1
        if bad:
            self._warn(path, f"{bad} unreadable line(s)")
        return out

    def file_times(self) -> list[float]:
        """Epoch seconds of each file, from its name."""
        return sorted(float(m.group(1)) for p in self._files if (m := _SYS_FILE.search(p.name)))

    def nodes(self) -> dict[str, SystemArrays]:
        """Samples grouped into rows by (node, timestamp in ms)."""
        if self._nodes is None:
            records: dict[str, list[dict[str, Any]]] = {}
            for _size, recs in self._files.values():
                for rec in recs:
                    records.setdefault(rec["node"], []).append(rec)
            self._nodes = {node: _rows(node, recs) for node, recs in sorted(records.items())}
        return self._nodes


def _rows(node: str, recs: list[dict[str, Any]]) -> SystemArrays:
    keys = sorted({r["key"] for r in recs})
    col = {k: i for i, k in enumerate(keys)}
    stamps = np.array([round(r["t"] * 1000) for r in recs], dtype=np.int64)
    uniq, row = np.unique(stamps, return_inverse=True)
    sums = np.zeros((len(uniq), len(keys)))
    counts = np.zeros((len(uniq), len(keys)))
    cols = np.array([col[r["key"]] for r in recs], dtype=np.int64)
    vals = np.array([r["v"] for r in recs])
    np.add.at(sums, (row, cols), vals)
    np.add.at(counts, (row, cols), 1)
    with np.errstate(invalid="ignore"):
        values = (sums / counts).astype(np.float32)
    return merge_system(node, [(uniq / 1000.0, tuple(keys), values)], None)


def _load_trace(path: Path) -> tuple[list[dict[str, Any]], bool]:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    text = raw.decode("utf-8", errors="replace").strip()
    for candidate in (text, text.rstrip(",") + "]"):
        try:
            data = json.loads(candidate)
            events = data.get("traceEvents", []) if isinstance(data, dict) else data
            return [e for e in events if isinstance(e, dict)], candidate is not text
        except json.JSONDecodeError:
            continue
    events, damaged = [], True
    for line in text.strip("[]").splitlines():
        try:
            events.append(json.loads(line.strip().rstrip(",")))
        except json.JSONDecodeError:
            continue
    return [e for e in events if isinstance(e, dict)], damaged


class SageMakerFrameworkStore:
    """Framework trace files ``<base>/framework/pevents/<YYYYMMDDHH>/<end µs>_<node>_<suffix>``."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self._files: dict[Path, tuple[int, list[TraceEvent]]] = {}
        self._warn = _Warner()
        self._tables: dict[str, FrameworkTables] | None = None

    def refresh(self) -> None:
        """Parse new or grown trace files."""
        for path in sorted((self.base / "framework" / "pevents").rglob("*")):
            if not path.is_file() or not _FW_FILE.match(path.name):
                continue
            size = path.stat().st_size
            if path in self._files and self._files[path][0] == size:
                continue
            node = _FW_FILE.match(path.name).group(2)  # type: ignore[union-attr]
            try:
                raw, damaged = _load_trace(path)
            except (OSError, EOFError, gzip.BadGzipFile) as exc:
                self._warn(path, str(exc))
                continue
            if damaged:
                self._warn(path, "truncated or malformed trace; readable events kept")
            self._files[path] = (size, _trace_events(raw, node))
            self._tables = None

    def file_times(self) -> list[float]:
        """Epoch seconds from each file's name (its last event)."""
        return sorted(int(_FW_FILE.match(p.name).group(1)) / 1e6 for p in self._files)  # type: ignore[union-attr]

    def events(self) -> list[TraceEvent]:
        """All events, times in epoch seconds."""
        return [e for _s, evs in self._files.values() for e in evs]

    def tables(self) -> dict[str, FrameworkTables]:
        """Steps and spans per node (SageMaker names workers by node)."""
        if self._tables is None:
            by_node: dict[str, list[TraceEvent]] = {}
            for event in self.events():
                by_node.setdefault(event.node_id, []).append(event)
            self._tables = {node: _tables(node, evs) for node, evs in sorted(by_node.items())}
        return self._tables


def _trace_events(raw: list[dict[str, Any]], node: str) -> list[TraceEvent]:
    base = 0.0
    phase_of: dict[Any, str] = {}
    for ev in raw:
        if ev.get("ph") == "M":
            args = ev.get("args") or {}
            if "start_time_since_epoch_in_micros" in args:
                base = float(args["start_time_since_epoch_in_micros"])
            if ev.get("name") == "process_name" and "name" in args:
                phase_of[ev.get("pid")] = str(args["name"])
    out = []
    for ev in raw:
        if ev.get("ph") not in ("X", "i", "I") or "ts" not in ev:
            continue
        try:
            start = (float(ev["ts"]) + (base if float(ev["ts"]) < 1e15 else 0.0)) / 1e6
            end = start + float(ev.get("dur", 0.0)) / 1e6
        except (TypeError, ValueError):
            continue
        name = str(ev.get("name", ""))
        args = ev.get("args") or {}
        out.append(
            TraceEvent(
                start,
                end,
                name,
                phase_of.get(ev.get("pid"), name),
                node,
                node,
                int(ev.get("pid", 0) or 0),
                int(ev.get("tid", 0) or 0),
                dict(args) if isinstance(args, dict) else {},
            )
        )
    return out


def _tables(node: str, events: list[TraceEvent]) -> FrameworkTables:
    steps: list[tuple[int, int, float, float]] = []
    spans: list[tuple[int, float, float, int, int]] = []
    workers = None
    for ev in sorted(events, key=lambda e: e.start_time):
        phase = ev.event_phase or ev.event_name
        if "Step:ModeKeys" in phase or "Step:ModeKeys" in ev.event_name:
            label = ev.event_name if "Step:ModeKeys" in ev.event_name else phase
            mode = parse_mode(label.split("Step:", 1)[-1])
            steps.append((int(mode), int(float(ev.event_args.get("step_num", len(steps)))), ev.start_time, ev.end_time))
        elif "DataLoaderIterInitialize" in phase or "DataLoaderIterInitialize" in ev.event_name:
            workers = int(ev.event_args.get("num_workers", 0))
        elif any(k in phase for k in ("DataLoaderIter", "DataLoaderWorker", "DataIterator")):
            pid = int(ev.event_args.get("pid", ev.pid) or 0)
            spans.append((4, ev.start_time, ev.end_time, -1, pid))
        else:
            low = phase.lower()
            code = next((c for k, c in _SPAN.items() if low.startswith(k)), 0)
            if code:
                spans.append((code, ev.start_time, ev.end_time, -1, ev.pid))
    tables = FrameworkTables(node, node)
    if steps:
        cols = list(zip(*steps, strict=False))
        tables.steps = {
            "mode": np.array(cols[0], np.uint8),
            "mode_step": np.array(cols[1], np.int64),
            "global_step": np.arange(len(steps), dtype=np.int64),
            "start": np.array(cols[2]),
            "end": np.array(cols[3]),
        }
    if spans:
        cols = list(zip(*spans, strict=False))
        tables.spans = {
            "kind": np.array(cols[0], np.uint8),
            "start": np.array(cols[1]),
            "end": np.array(cols[2]),
            "global_step": np.array(cols[3], np.int64),
            "workers": np.full(len(spans), -1 if workers is None else workers, np.int16),
            "pid": np.array(cols[4], np.int64),
        }
    tables.dataloader_workers = workers
    return tables
