"""SageMaker framework traces (timelines and TF detailed-profiler traces) as events and per-node tables."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import numpy as np

from trainspect.modes import parse_mode
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.events import TraceEvent
from trainspect.profiler.traces import read_trace_file, tf_trace_metadata
from trainspect.store.warner import Warner

__all__ = ["SageMakerFrameworkStore", "Warner"]

logger = logging.getLogger(__name__)
FW_FILE = re.compile(r"^(\d+)_([^_]+)_(.+)$")
_SPAN = {"forward": 1, "backward": 2, "optimizer": 3}


class SageMakerFrameworkStore:
    """Framework trace files of a SageMaker folder, parsed on refresh (times kept in µs).

    Timelines ``<base>/framework/pevents/**/<µs>_<node>_<suffix>`` and TF detailed-profiler traces
    ``<base>/framework/<fw>/detailed_profiling/**/*.trace.json.gz``.
    """

    def __init__(self, base: Path) -> None:
        self.base = base
        self._files: dict[Path, tuple[tuple[int, bool], list[TraceEvent]]] = {}
        self.warn = Warner(deferred=True, logger=logger)
        self._tables: dict[str, FrameworkTables] | None = None

    def _candidates(self) -> list[Path]:
        framework = self.base / "framework"
        found = [p for p in sorted((framework / "pevents").rglob("*")) if p.is_file() and FW_FILE.match(p.name)]
        for detailed in sorted(framework.glob("*/detailed_profiling")):
            found.extend(sorted(detailed.rglob("*.trace.json.gz")))
        return found

    def refresh(self) -> None:
        """Parse new or grown trace files (a TF trace again once its ``.metadata`` file appears)."""
        for path in self._candidates():
            try:
                key = (path.stat().st_size, path.name.endswith(".gz") and tf_trace_metadata(path) is not None)
            except OSError:
                continue
            if path in self._files and self._files[path][0] == key:
                continue
            events, problem = read_trace_file(path)
            if problem:
                self.warn(path, problem)
            self._files[path] = (key, events)
            self._tables = None
        self.warn.flush()

    def file_times(self) -> list[float]:
        """Epoch seconds of each file's last event (from its name, or from a TF trace's ``.metadata``)."""
        out = []
        for path in self._files:
            match = FW_FILE.match(path.name)
            if match and not path.name.endswith(".trace.json.gz"):
                value = int(match.group(1))
                out.append(value / 1e9 if value > 1e17 else value / 1e6)
            elif (meta := tf_trace_metadata(path)) is not None:
                out.append(meta[2] / 1e6)
        return sorted(out)

    def events_us(self) -> list[TraceEvent]:
        """All events, times in epoch µs."""
        return [e for _k, evs in self._files.values() for e in evs]

    def problems(self) -> list[str]:
        """What was skipped, one line per file (at most :attr:`Warner.SHOWN`, then a count)."""
        return self.warn.lines()

    def tables(self) -> dict[str, FrameworkTables]:
        """Steps and spans per node (SageMaker names workers by node)."""
        if self._tables is None:
            by_node: dict[str, list[TraceEvent]] = {}
            for event in self.events_us():
                by_node.setdefault(event.node_id, []).append(event)
            self._tables = {node: _tables(node, evs) for node, evs in sorted(by_node.items())}
        return self._tables


def _classify(ev: TraceEvent) -> tuple[str, int]:
    """("step" | "workers" | "span" | "", span kind) of an event."""
    phase = ev.event_phase or ev.event_name
    if "Step:ModeKeys" in phase or "Step:ModeKeys" in ev.event_name:
        return "step", 0
    if "DataLoaderIterInitialize" in phase or "DataLoaderIterInitialize" in ev.event_name:
        return "workers", 0
    if any(k in phase for k in ("DataLoaderIter", "DataLoaderWorker", "DataIterator")):
        return "span", 4
    low = phase.lower()
    code = next((c for k, c in _SPAN.items() if low.startswith(k)), 0)
    return ("span", code) if code else ("", 0)


def _tables(node: str, events: list[TraceEvent]) -> FrameworkTables:
    steps: list[tuple[int, int, float, float]] = []
    spans: list[tuple[int, float, float, int, int]] = []
    workers = None
    for ev in sorted(events, key=lambda e: e.start_time):
        what, code = _classify(ev)
        start, end = ev.start_time / 1e6, ev.end_time / 1e6
        if what == "step":
            label = ev.event_name if "Step:ModeKeys" in ev.event_name else ev.event_phase
            mode = parse_mode(label.split("Step:", 1)[-1])
            steps.append((int(mode), int(float(ev.event_args.get("step_num", len(steps)))), start, end))
        elif what == "workers":
            workers = int(ev.event_args.get("num_workers", 0))
        elif what == "span":
            pid = int(ev.event_args.get("pid", ev.pid) or 0) if code == 4 else ev.pid
            spans.append((code, start, end, -1, pid))
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
