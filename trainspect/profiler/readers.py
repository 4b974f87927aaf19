"""Readers of system and framework profiler data, smdebug-style, working while the job runs.

``path`` may be a trainspect run directory, its ``profiler/`` folder, or a SageMaker profiler-output
folder (auto-detected). Times are epoch **seconds** by default; every method takes ``unit`` (``"s"``,
``"ms"``, ``"us"``, ``"ns"``). Each call that asks for data past what is known rescans the files, so a
reader kept open follows a running job. ``read_arrays`` is the fast bulk path (numpy arrays).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd

from trainspect.modes import ModeKeys
from trainspect.profiler import frames
from trainspect.profiler._native import FrameworkWorkerStore, SystemNodeStore
from trainspect.profiler.arrays import SPAN_NAMES, FrameworkTables, SystemArrays
from trainspect.profiler.detailed import read_tables as read_detailed
from trainspect.profiler.events import SystemEvent, TraceEvent, smdebug_names, unit_factor
from trainspect.profiler.sagemaker import (
    SageMakerFrameworkStore,
    SageMakerSystemStore,
    is_sagemaker_dir,
    select_records,
)
from trainspect.profiler.system_window import SystemFileWindow
from trainspect.profiler.traces import in_window, to_us
from trainspect.store.frame_tools import choose
from trainspect.store.remote import localize

__all__ = ["SystemMetricsReader", "FrameworkMetricsReader", "resolve_profiler_root"]

_SPAN_EVENT = {
    "forward": "Forward",
    "backward": "Backward",
    "optimizer": "Optimizer",
    "dataloader": "DataLoaderIter",
    "backward_sync": "BackwardSync",
}
_PHASE_EVENT = {"initialization": "Initialization", "training_loop": "TrainingLoop", "finalization": "Finalization"}


def resolve_profiler_root(path: str | os.PathLike[str]) -> tuple[str, Path]:
    """Return ``("trainspect" | "sagemaker", folder holding system/ and framework/)`` for ``path``."""
    p = Path(path)
    if (p / "profiler").is_dir():
        return "trainspect", p / "profiler"
    for cand in (p, p / "profiler-output"):
        if is_sagemaker_dir(cand):
            return "sagemaker", cand
    if (p / "system").is_dir() or (p / "framework").is_dir():
        return "trainspect", p
    return "trainspect", p / "profiler"


class _Reader:
    def __init__(self, path: str | os.PathLike[str]) -> None:
        path, self._mirror = localize(path, "profiler")  # a URL (s3://.../profiler-output): read a synced copy
        self.path = Path(path)
        self.source, self.root = resolve_profiler_root(self.path)

    def _detect(self) -> None:
        if self._mirror is not None:
            with contextlib.suppress(OSError):  # the store is down for a moment: what was read stays
                self._mirror.sync()
        source, root = resolve_profiler_root(self.path)
        if (source, root) != (self.source, self.root):
            self.source, self.root = source, root
            self._reset()

    def _reset(self) -> None:
        raise NotImplementedError

    def _file_times(self) -> list[float]:
        raise NotImplementedError

    def get_timestamp_of_first_available_file(self, unit: str = "s") -> float:
        """Start time of the earliest data file (0 when there is none)."""
        self.refresh_event_file_list()
        times = self._file_times()
        return times[0] * unit_factor(unit) if times else 0

    def refresh_event_file_list(self) -> None:
        """Rescan the folder for new files and new records."""
        raise NotImplementedError

    def problems(self) -> list[str]:
        """What was skipped so far (damaged or truncated records), one line each naming the file."""
        stores = getattr(self, "_nodes", None) or getattr(self, "_workers", None) or {}
        found = [p for store in stores.values() for p in store.problems()]
        sm = getattr(self, "_sm", None)
        return found + (sm.problems() if sm is not None and self.source == "sagemaker" else [])


class SystemMetricsReader(_Reader):
    """System metrics of every node of a run.

    Args:
        path: run directory, profiler folder or SageMaker profiler-output folder.

    Example:
        >>> import tempfile
        >>> SystemMetricsReader(tempfile.mkdtemp()).get_events(0, 1e12)
        []
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        self._reset()

    def _reset(self) -> None:
        self._nodes: dict[Path, SystemNodeStore] = {}
        self._sm = SageMakerSystemStore(self.root)
        self._window = SystemFileWindow(self.root)

    def refresh_event_file_list(self) -> None:
        """Rescan the folder for new files and new samples."""
        self._detect()
        if self.source == "sagemaker":
            self._sm.refresh()
            return
        system = self.root / "system"
        if system.is_dir():
            for node_dir in sorted(d for d in system.iterdir() if d.is_dir()):
                self._nodes.setdefault(node_dir, SystemNodeStore(node_dir))
        for store in self._nodes.values():
            store.refresh()

    def _file_times(self) -> list[float]:
        if self.source == "sagemaker":
            return self._sm.file_times()
        return sorted(t for s in self._nodes.values() for t in s.file_times())

    def read_arrays(
        self, start: float | None = None, end: float | None = None, unit: str = "s"
    ) -> dict[str, SystemArrays]:
        """Every node's samples as arrays (the fast path), optionally limited to ``[start, end]``."""
        self.refresh_event_file_list()
        f = unit_factor(unit)
        if self.source == "sagemaker":
            nodes = self._sm.nodes()
        else:
            nodes = {s.node: s.arrays() for s in self._nodes.values()}
        lo = None if start is None else start / f
        hi = None if end is None else end / f
        return {n: a.slice(lo, hi) if (lo is not None or hi is not None) else a for n, a in nodes.items() if len(a)}

    def get_timestamp_of_latest_available_file(self, unit: str = "s") -> float:
        """Time of the newest sample (trainspect) or newest file (SageMaker); 0 when there is none."""
        self.refresh_event_file_list()
        if self.source == "sagemaker":
            times = self._file_times()
            return times[-1] * unit_factor(unit) if times else 0
        lasts = [float(a.timestamps[-1]) for a in self.read_arrays().values() if len(a)]
        return max(lasts) * unit_factor(unit) if lasts else 0

    def get_events(self, start: float, end: float, unit: str = "s", event_type: str | None = None) -> list[SystemEvent]:
        """Samples with ``start <= timestamp <= end`` as smdebug-style events (``event_type``: "cpu", "gpu"…).

        From a SageMaker folder these are the records as written (their own timestamps, type, name and
        dimension), selected exactly as smdebug's ``SystemMetricsReader.get_events`` selects them.
        """
        f = unit_factor(unit)
        if self.source == "sagemaker":
            return self._sagemaker_events(start, end, unit, event_type)
        out: list[SystemEvent] = []
        for node, arrays in self.read_arrays(start, end, unit).items():
            names = [smdebug_names(k) for k in arrays.keys]
            for row, ts in enumerate(arrays.timestamps):
                for col, (typ, name, dim) in enumerate(names):
                    value = float(arrays.values[row, col])
                    if np.isnan(value) or (event_type is not None and typ != event_type):
                        continue
                    out.append(SystemEvent(typ, name, dim, value, node, float(ts) * f, arrays.keys[col]))
        return out

    def _sagemaker_events(self, start: float, end: float, unit: str, event_type: str | None) -> list[SystemEvent]:
        self.refresh_event_file_list()
        f = unit_factor(unit)
        return [
            SystemEvent(r.type, r.name, r.dimension, r.value, r.node_id, r.timestamp * f, r.key)
            for r in select_records(self._sm.records(), start, end, unit, event_type)
        ]

    def window_arrays(
        self, start: float | None = None, end: float | None = None, node: str | Sequence[str] | None = None
    ) -> dict[str, SystemArrays]:
        """``{node: samples with start <= timestamp < end}`` (epoch s), reading only the files that can hold them.

        trainspect's system files are one per node and hour (named by their first sample), so a one-hour window
        of a 24-hour run reads two or three files per node; from a SageMaker folder every file is read.

        Raises:
            NotRecorded: a node the run did not record (the message lists those it did).
        """
        self._detect()
        if self.source == "sagemaker":
            nodes = self.read_arrays()
            cut = {n: _half_open(nodes[n], start, end) for n in choose(node, sorted(nodes), "node")}
            return {n: a for n, a in cut.items() if len(a)}
        return self._window.arrays(start, end, choose(node, self._window.nodes(), "node"))

    def time_span(self) -> tuple[float, float] | None:
        """(first, last) sample time (epoch s) over every node, or None before the first sample.

        Reads each node's first and last file of a trainspect run (every file of a SageMaker folder).
        """
        self._detect()
        if self.source == "trainspect":
            return self._window.span()
        times = [a.timestamps for a in self.read_arrays().values() if len(a)]
        return (min(float(t[0]) for t in times), max(float(t[-1]) for t in times)) if times else None

    def dataframe(
        self,
        start: float | None = None,
        end: float | None = None,
        metrics: str | Sequence[str] | None = None,
        node: str | Sequence[str] | None = None,
        wide: bool = False,
    ) -> pd.DataFrame:
        """Samples with ``start <= timestamp < end`` (epoch s) as a DataFrame, reading only the files needed.

        Long (:data:`trainspect.profiler.frames.SYSTEM_COLUMNS`: ``timestamp, node, metric, type, name, dimension,
        value``, one row per sampled value) or ``wide`` (``timestamp, node`` and one column per metric).
        ``metrics`` and ``node`` take names or ``fnmatch`` patterns (``"gpu*"``).

        Raises:
            NotRecorded: a node or metric the run did not record (the message lists those it did).

        Example:
            >>> import tempfile
            >>> SystemMetricsReader(tempfile.mkdtemp()).dataframe().columns.tolist()
            ['timestamp', 'node', 'metric', 'type', 'name', 'dimension', 'value']
        """
        return frames.system_frame(self.window_arrays(start, end, node), metrics, wide)

    def to_dataframe(self, start: float | None = None, end: float | None = None, unit: str = "s") -> pd.DataFrame:
        """Long DataFrame: ``timestamp`` (unit), ``node_id``, ``key``, ``type``, ``name``, ``dimension``, ``value``."""
        frames = []
        f = unit_factor(unit)
        for node, arrays in self.read_arrays(start, end, unit).items():
            n, m = arrays.values.shape
            names = [smdebug_names(k) for k in arrays.keys]
            frame = pd.DataFrame(
                {
                    "timestamp": np.repeat(arrays.timestamps * f, m),
                    "node_id": node,
                    "key": np.tile(np.array(arrays.keys, dtype=object), n),
                    "type": np.tile(np.array([t for t, _n, _d in names], dtype=object), n),
                    "name": np.tile(np.array([nm for _t, nm, _d in names], dtype=object), n),
                    "dimension": np.tile(np.array([d for _t, _n, d in names], dtype=object), n),
                    "value": arrays.values.reshape(-1).astype(np.float64),
                }
            )
            frames.append(frame[frame["value"].notna()])
        cols = ["timestamp", "node_id", "key", "type", "name", "dimension", "value"]
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


class FrameworkMetricsReader(_Reader):
    """Framework metrics (steps, phases, spans) of every worker of a run.

    Args:
        path: run directory, profiler folder or SageMaker profiler-output folder.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        self._reset()

    def _reset(self) -> None:
        self._workers: dict[Path, FrameworkWorkerStore] = {}
        self._sm = SageMakerFrameworkStore(self.root)

    def refresh_event_file_list(self) -> None:
        """Rescan the folder for new files and new records."""
        self._detect()
        if self.source == "sagemaker":
            self._sm.refresh()
            return
        framework = self.root / "framework"
        if framework.is_dir():
            for worker_dir in sorted(d for d in framework.iterdir() if d.is_dir()):
                self._workers.setdefault(worker_dir, FrameworkWorkerStore(worker_dir))
        for store in self._workers.values():
            store.refresh()

    def _file_times(self) -> list[float]:
        if self.source == "sagemaker":
            return self._sm.file_times()
        return sorted(t for s in self._workers.values() for t in s.file_times())

    def read_tables(self) -> dict[str, FrameworkTables]:
        """Every worker's step and span tables (the fast path)."""
        self.refresh_event_file_list()
        if self.source == "sagemaker":
            return self._sm.tables()
        return {s.worker: s.tables() for s in self._workers.values()}

    def get_timestamp_of_latest_available_file(self, unit: str = "s") -> float:
        """Time of the newest record (0 when there is none)."""
        lasts = [t for t in (tab.last_time() for tab in self.read_tables().values()) if t is not None]
        return max(lasts) * unit_factor(unit) if lasts else 0

    def _all_events_us(self) -> list[TraceEvent]:
        if self.source == "sagemaker":
            self.refresh_event_file_list()
            return self._sm.events_us()
        out: list[TraceEvent] = []
        for worker, tab in self.read_tables().items():
            for e in _events_of(worker, tab):
                out.append(replace(e, start_time=e.start_time * 1e6, end_time=e.end_time * 1e6))
        return out

    def get_events(self, start: float, end: float, unit: str = "s") -> list[TraceEvent]:
        """Events overlapping ``[start, end]`` (bounds included), times in ``unit``, sorted by start.

        The bounds are compared in whole microseconds as smdebug's readers compare them, so on SageMaker
        output the selection is exactly smdebug's ``get_events``.
        """
        scale = unit_factor(unit) / 1e6
        chosen = in_window(self._all_events_us(), to_us(start, unit), to_us(end, unit))
        out = [replace(e, start_time=e.start_time * scale, end_time=e.end_time * scale) for e in chosen]
        return sorted(out, key=lambda e: e.start_time)

    def dataframe(self, table: str = "steps", start: float | None = None, end: float | None = None) -> pd.DataFrame:
        """One table of the framework data as a DataFrame; rows overlapping ``[start, end)`` (epoch s).

        Tables (columns in :mod:`trainspect.profiler.frames` and :mod:`trainspect.profiler.detailed`):

        * ``"steps"``: one row per timed step with its seconds of forward, backward, optimizer, backward_sync and
          data-loader wait (:data:`~trainspect.profiler.frames.STEP_COLUMNS`);
        * ``"spans"``: every span (:data:`~trainspect.profiler.frames.SPAN_COLUMNS`); ``"phases"``: each worker's
          initialization, training loop and finalization; ``"step_metrics"``: per-step framework metrics;
        * ``"operators"`` and ``"python"``: the detailed profiler's operator and Python hotspot tables (empty when
          no window was profiled; ``start``/``end`` do not apply).

        Raises:
            ValueError: an unknown table (the message lists them).

        Example:
            >>> import tempfile
            >>> FrameworkMetricsReader(tempfile.mkdtemp()).dataframe().columns.tolist()[:5]
            ['worker', 'node', 'mode', 'mode_step', 'global_step']
        """
        if table in ("operators", "python"):
            self._detect()
            return read_detailed(self.root / "detailed", table)
        build = _TABLES.get(table)
        if build is None:
            raise ValueError(f"no framework table {table!r}; tables: {', '.join([*_TABLES, 'operators', 'python'])}")
        return build(self.read_tables(), start, end)

    def to_dataframe(self, start: float = 0.0, end: float = float("inf"), unit: str = "s") -> pd.DataFrame:
        """Columns ``start_time, end_time, duration, event_name, event_phase, worker, node_id, step, pid``."""
        rows = [
            {
                "start_time": e.start_time,
                "end_time": e.end_time,
                "duration": e.duration,
                "event_name": e.event_name,
                "event_phase": e.event_phase,
                "worker": e.worker,
                "node_id": e.node_id,
                "step": int(float(e.event_args.get("step_num", -1))),
                "pid": e.pid,
            }
            for e in self.get_events(start, end, unit)
        ]
        cols = ["start_time", "end_time", "duration", "event_name", "event_phase", "worker", "node_id", "step", "pid"]
        return pd.DataFrame(rows, columns=cols)


_TABLES = {
    "steps": frames.steps_frame,
    "spans": frames.spans_frame,
    "phases": frames.phases_frame,
    "step_metrics": frames.step_metrics_frame,
}


def _half_open(arrays: SystemArrays, start: float | None, end: float | None) -> SystemArrays:
    """Rows with ``start <= timestamp < end``."""
    lo = 0 if start is None else int(np.searchsorted(arrays.timestamps, start, "left"))
    hi = len(arrays) if end is None else int(np.searchsorted(arrays.timestamps, end, "left"))
    return SystemArrays(arrays.node, arrays.timestamps[lo:hi], arrays.keys, arrays.values[lo:hi], arrays.interval_ms)


def _events_of(worker: str, tab: FrameworkTables) -> list[TraceEvent]:
    out = []
    s = tab.steps
    for i in range(tab.step_count):
        name = f"Step:ModeKeys.{ModeKeys(int(s['mode'][i])).name}"
        args = {"step_num": int(s["mode_step"][i]), "global_step": int(s["global_step"][i])}
        out.append(TraceEvent(float(s["start"][i]), float(s["end"][i]), name, name, tab.node, worker, tab.pid, 0, args))
    sp = tab.spans
    for i in range(len(sp["start"])):
        name = _SPAN_EVENT.get(SPAN_NAMES.get(int(sp["kind"][i]), ""), "")
        if not name:  # a span kind of a newer trainspect
            continue
        args = {"global_step": int(sp["global_step"][i]), "num_workers": int(sp["workers"][i])}
        out.append(
            TraceEvent(
                float(sp["start"][i]), float(sp["end"][i]), name, name, tab.node, worker, int(sp["pid"][i]), 0, args
            )
        )
    for phase, bounds in tab.phases().items():
        if bounds is not None:
            out.append(TraceEvent(bounds[0], bounds[1], _PHASE_EVENT[phase], "JobPhase", tab.node, worker, tab.pid))
    return out
