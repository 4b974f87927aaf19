"""``Timeline``: steps, phases, spans, data-loader waits and system metrics on one time axis."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from trainspect.modes import ModeKeys
from trainspect.notebook._svg import colour, esc, lanes, polyline
from trainspect.notebook._view import Run, RunSource, View, select
from trainspect.profiler.arrays import SPAN_NAMES, FrameworkTables, SystemArrays
from trainspect.report.charts import downsample

__all__ = ["Timeline"]

_PHASE_COLOUR = {"initialization": "#9e9e9e", "training_loop": "#cfd8dc", "finalization": "#616161"}


def _lanes_of(tab: FrameworkTables, lo: float, hi: float) -> list[tuple[str, Any, Any, str]]:
    """One worker's lanes in ``[lo, hi]``: (label, starts, ends, colour) of its phases, steps per mode and spans."""
    out: list[tuple[str, Any, Any, str]] = []
    for phase, bounds in tab.phases().items():
        if bounds is not None and bounds[1] >= lo and bounds[0] <= hi:
            out.append((phase, np.array([bounds[0]]), np.array([bounds[1]]), _PHASE_COLOUR[phase]))
    s = tab.steps
    for m in np.unique(s["mode"]):
        sel = (s["mode"] == m) & (s["end"] >= lo) & (s["start"] <= hi)
        out.append((f"{ModeKeys(int(m)).name} steps", s["start"][sel], s["end"][sel], colour(int(m) - 1)))
    sp = tab.spans
    for code in np.unique(sp["kind"]):
        sel = (sp["kind"] == code) & (sp["end"] >= lo) & (sp["start"] <= hi)
        name = SPAN_NAMES.get(int(code), str(int(code)))
        out.append((name, sp["start"][sel], sp["end"][sel], colour(3 + int(code))))
    return out


def _system_series(arrays: SystemArrays, lo: float, hi: float, points: int) -> list[tuple[str, Any, Any]]:
    """(label, times, values) of a node's CPU total, GPU total and memory in ``[lo, hi]``, ``points`` at most."""
    part = arrays.slice(lo, hi)
    series = {"cpu total %": part.cpu_total()}
    if part.gpus:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # rows without any GPU sample
            gpu = part.matrix([f"gpu{g}_utilization_percent" for g in part.gpus]).astype(np.float64)
            series["gpu total %"] = np.nanmean(gpu, axis=1)
    mem = part.column("cpu_memory_used_percent")
    if mem is not None:
        series["memory used %"] = mem.astype(np.float64)
    out = []
    for label, values in series.items():
        xs, ys = downsample(part.timestamps, values, points)
        out.append((label, xs, ys))
    return out


class Timeline(View):
    """Steps, phases, spans and system metrics on one time axis (seconds since the window's start).

    Every worker's phases, steps (per mode) and spans (forward, backward, optimizer, data-loader waits) are lanes,
    above each node's CPU, GPU and memory utilisation.

    Args:
        run: a run directory, a SageMaker profiler-output folder, or a reader.
        workers: regular expressions choosing workers; default all.
        start: first epoch second (default: the earliest record).
        end: last epoch second (default: the latest record, followed while the job runs).
        width: the chart's width in pixels (intervals closer than a pixel merge).

    Raises:
        ValueError: workers exist and the selection names none of them (the message lists them).
    """

    title = "Timeline"
    empty_message = "nothing recorded yet (profile the run with a ProfilerConfig)"

    def __init__(
        self,
        run: Run,
        workers: Sequence[str] | None = None,
        start: float | None = None,
        end: float | None = None,
        width: int = 900,
    ) -> None:
        self.source = run if isinstance(run, RunSource) else RunSource(run)
        self.workers, self.start, self.end, self.width = workers, start, end, int(width)
        self.tables: dict[str, FrameworkTables] = {}
        self.system: dict[str, SystemArrays] = {}
        self.window: tuple[float, float] | None = None
        self.refresh()

    def _load(self) -> None:
        tables = {w: t for w, t in sorted(self.source.framework().items()) if t.step_count or len(t.spans["start"])}
        chosen = select(tables, self.workers, "worker")
        self.tables = {w: tables[w] for w in chosen}
        self.system = {n: a for n, a in sorted(self.source.system().items()) if len(a)}
        times = [float(a.timestamps[0]) for a in self.system.values()] + [
            float(a.timestamps[-1]) for a in self.system.values()
        ]
        times += [t for tab in self.tables.values() for t in (tab.first_time(), tab.last_time()) if t is not None]
        if not times:
            self.window = None
            return
        lo = min(times) if self.start is None else float(self.start)
        hi = max(times) if self.end is None else float(self.end)
        self.window = (lo, max(hi, lo + 1e-6))

    def figure(self) -> dict[str, Any]:
        """The plotted data: steps and spans as DataFrames, phases and system series as lists.

        ``{"window": (start, end) epoch s or None without data, "steps": DataFrame, "spans": DataFrame,
        "phases": [{"worker", "phase", "start", "end"}], "system": {node: {"time": [...], "<metric>": [...]}}}``.
        """
        steps = [t.steps_df() for t in self.tables.values() if t.step_count]
        spans = [t.spans_df() for t in self.tables.values() if len(t.spans["start"])]
        phases = [
            {"worker": w, "phase": p, "start": b[0], "end": b[1]}
            for w, t in self.tables.items()
            for p, b in t.phases().items()
            if b is not None
        ]
        system: dict[str, dict[str, list[float]]] = {}
        lo, hi = self.window if self.window is not None else (0.0, 0.0)
        for node, arrays in self.system.items():
            series = _system_series(arrays, lo, hi, 10**9)
            entry = {"time": series[0][1].tolist() if series else []}
            entry.update({label: ys.tolist() for label, _x, ys in series})
            system[node] = entry
        return {
            "window": self.window,
            "steps": pd.concat(steps, ignore_index=True) if steps else pd.DataFrame(),
            "spans": pd.concat(spans, ignore_index=True) if spans else pd.DataFrame(),
            "phases": phases,
            "system": system,
        }

    def _body(self) -> str | None:
        if self.window is None:
            return None
        lo, hi = self.window
        out = []
        for worker, tab in self.tables.items():
            found = _lanes_of(tab, lo, hi)
            out.append(
                f'<div class="ts-worker" data-worker="{esc(worker)}">'
                f"{lanes(found, lo, hi, f'{worker}: phases, steps and spans', self.width)}</div>"
            )
        for node, arrays in self.system.items():
            series = _system_series(arrays, lo, hi, self.width)
            out.append(
                f'<div class="ts-node" data-node="{esc(node)}">'
                f"{polyline(series, lo, hi, f'node {node}: system metrics', self.width)}</div>"
            )
        return "".join(out)
