"""Incremental readers of trainspect's own profiler files (one store per node or worker directory)."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from trainspect.profiler import schema
from trainspect.profiler._files import TailedFile
from trainspect.profiler.arrays import FrameworkTables, SystemArrays, merge_system

logger = logging.getLogger(__name__)


class _SystemFile:
    def __init__(self, path: Path) -> None:
        self.tail = TailedFile(path)
        self.keys: tuple[str, ...] = ()
        self.encodings: tuple[str, ...] = ()
        self.interval_ms: int | None = None
        self.times: list[np.ndarray] = []
        self.b16: list[np.ndarray] = []
        self.b32: list[np.ndarray] = []
        self._cache: tuple[np.ndarray, np.ndarray] | None = None

    def poll(self) -> bool:
        frames = self.tail.poll()
        for frame in frames:
            try:
                self._take(frame)
            except (ValueError, KeyError, TypeError) as exc:
                self.tail.warn(f"bad frame at byte {frame.offset}: {exc}")
        if frames:
            self._cache = None
        return bool(frames)

    def _take(self, frame: schema.Frame) -> None:
        if frame.kind == schema.KIND_SCHEMA:
            head = schema.decode_json(frame.payload)
            self.keys = tuple(str(k) for k, _e in head["metrics"])
            self.encodings = tuple(str(e) for _k, e in head["metrics"])
            self.interval_ms = head.get("interval_ms")
        elif frame.kind == schema.KIND_SYSTEM:
            if not self.keys:
                raise ValueError("data before the schema frame")
            times, b16, b32 = schema.decode_system_chunk_raw(frame.payload, len(self.keys))
            if b16.shape[0] != sum(e == schema.ENC_CENTI for e in self.encodings):
                raise ValueError("chunk does not match the schema")
            self.times.append(times)
            self.b16.append(b16)
            self.b32.append(b32)

    def arrays(self) -> tuple[np.ndarray, np.ndarray] | None:
        if not self.times:
            return None
        if self._cache is None:
            times = np.concatenate(self.times).astype(np.float64) / 1000.0
            b16 = np.concatenate(self.b16, axis=1)
            b32 = np.concatenate(self.b32, axis=1)
            self._cache = (times, schema.assemble_columns(self.encodings, b16, b32))
        return self._cache


class SystemNodeStore:
    """All ``*.tsys`` files of one node directory, read incrementally."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.node = directory.name
        self._files: dict[Path, _SystemFile] = {}
        self._merged: SystemArrays | None = None

    def refresh(self) -> None:
        """Pick up new files and new frames."""
        changed = False
        for path in sorted(self.directory.glob(f"*{schema.SYSTEM_SUFFIX}")):
            store = self._files.setdefault(path, _SystemFile(path))
            changed |= store.poll()
        if changed:
            self._merged = None

    def problems(self) -> list[str]:
        """What was skipped in the node's files, one line each naming the file."""
        return [p for store in self._files.values() for p in store.tail.problems]

    def file_times(self) -> list[float]:
        """Start time (epoch s) of every file, from its name."""
        out = []
        for path in self._files:
            try:
                out.append(int(path.stem[:13]) / 1000.0)
            except ValueError:
                continue
        return sorted(out)

    def arrays(self) -> SystemArrays:
        """Every sample of the node."""
        if self._merged is None:
            parts = []
            interval = None
            for store in self._files.values():
                arr = store.arrays()
                if arr is not None:
                    parts.append((arr[0], store.keys, arr[1]))
                    interval = store.interval_ms or interval
            self._merged = merge_system(self.node, parts, interval)
        return self._merged


class FrameworkWorkerStore:
    """All ``*.tfw`` files of one worker directory, read incrementally."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.worker = directory.name
        self._tails: dict[Path, TailedFile] = {}
        self._steps: list[dict[str, np.ndarray]] = []
        self._spans: list[dict[str, np.ndarray]] = []
        self._metrics: list[dict[str, np.ndarray]] = []
        self._events: list[dict[str, object]] = []
        self._tables: FrameworkTables | None = None

    def refresh(self) -> None:
        """Pick up new files and new frames."""
        for path in sorted(self.directory.glob(f"*{schema.FRAMEWORK_SUFFIX}")):
            tail = self._tails.setdefault(path, TailedFile(path))
            for frame in tail.poll():
                try:
                    self._take(frame)
                except (ValueError, KeyError, TypeError) as exc:
                    tail.warn(f"bad frame at byte {frame.offset}: {exc}")
                self._tables = None

    def _take(self, frame: schema.Frame) -> None:
        if frame.kind == schema.KIND_EVENT:
            self._events.append(schema.decode_json(frame.payload))
        elif frame.kind == schema.KIND_TABLE:
            name, cols = schema.decode_table(frame.payload)
            if name == "steps":
                self._steps.append(cols)
            elif name == "spans":
                cols = dict(cols)
                pid = next((int(e.get("pid", 0)) for e in self._events if e.get("event") == "start"), 0)  # type: ignore[call-overload]
                cols.setdefault("pid", np.full(len(cols["start"]), pid, np.int64))
                self._spans.append(cols)
            elif name == "step_metrics":
                if not {"time", "global_step"} <= cols.keys() or any(v.dtype.kind not in "iuf" for v in cols.values()):
                    raise ValueError("step_metrics table without time/global_step or with non-numeric columns")
                self._metrics.append(cols)

    def problems(self) -> list[str]:
        """What was skipped in the worker's files, one line each naming the file."""
        return [p for tail in self._tails.values() for p in tail.problems]

    def file_times(self) -> list[float]:
        """Start time (epoch s) of every file, from its name."""
        out = []
        for path in self._tails:
            try:
                out.append(int(path.stem[:13]) / 1000.0)
            except ValueError:
                continue
        return sorted(out)

    def tables(self) -> FrameworkTables:
        """Everything recorded by the worker."""
        if self._tables is None:
            self._tables = _build_tables(self.worker, self._steps, self._spans, self._events)
            self._tables.step_metrics = _concat_metrics(self._metrics)
        return self._tables


def _concat(parts: list[dict[str, np.ndarray]], empty: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    if not parts:
        return empty
    out = {k: np.concatenate([p[k] for p in parts]) for k in empty if all(k in p for p in parts)}
    order = np.argsort(out["start"], kind="stable")
    return {k: v[order] for k, v in out.items()}


def _concat_metrics(parts: list[dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """The ``step_metrics`` frames as one table: the union of their keys, NaN where a frame lacks one."""
    keys = sorted({k for p in parts for k in p} - {"global_step", "time"})
    out: dict[str, np.ndarray] = {
        "global_step": np.concatenate([np.zeros(0, np.int64)] + [p["global_step"].astype(np.int64) for p in parts]),
        "time": np.concatenate([np.zeros(0)] + [p["time"].astype(np.float64) for p in parts]),
    }
    for key in keys:
        out[key] = np.concatenate(
            [np.zeros(0)] + [p[key].astype(np.float64) if key in p else np.full(len(p["time"]), np.nan) for p in parts]
        )
    order = np.argsort(out["time"], kind="stable")
    return {k: v[order] for k, v in out.items()}


def _build_tables(
    worker: str, steps: list[dict[str, np.ndarray]], spans: list[dict[str, np.ndarray]], events: list[dict[str, object]]
) -> FrameworkTables:
    tables = FrameworkTables(worker)
    tables.steps = _concat(steps, tables.steps)
    tables.spans = _concat(spans, tables.spans)
    starts = [e for e in events if e.get("event") == "start"]
    closes = [e for e in events if e.get("event") == "close"]
    if starts:
        first = min(starts, key=lambda e: float(e["time"]))  # type: ignore[arg-type]
        tables.process_start = float(first["process_start"])  # type: ignore[arg-type]
        if first.get("job_start") is not None:  # recorded since the job start differs from the process start
            tables.job_start = float(first["job_start"])  # type: ignore[arg-type]
            tables.extra["job_start_from"] = str(first.get("job_start_from", ""))
        tables.recorder_start = float(first["time"])  # type: ignore[arg-type]
        tables.node = str(first.get("node", ""))
        tables.pid = int(first.get("pid", 0))  # type: ignore[call-overload]
    if closes:
        tables.close_time = max(float(e["time"]) for e in closes)  # type: ignore[arg-type]
    loaders = [e for e in events if e.get("event") == "dataloader" and isinstance(e.get("time"), (int, float))]
    tables.loaders = sorted(
        (
            {"time": float(e["time"]), "num_workers": e.get("num_workers"), "batch_size": e.get("batch_size")}  # type: ignore[arg-type]
            for e in loaders
        ),
        key=lambda e: e["time"],
    )
    workers = tables.spans["workers"]
    known = workers[workers >= 0]
    tables.dataloader_workers = int(known[-1]) if len(known) else None
    return tables
