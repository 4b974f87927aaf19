"""``StepHistogram``: step-duration (and span-duration) distributions per worker; outliers mean a bottleneck."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.notebook._svg import bars, colour, esc
from trainspect.notebook._view import Run, RunSource, View, select
from trainspect.profiler.arrays import SPAN_NAMES, FrameworkTables

__all__ = ["StepHistogram", "event_durations", "outlier_threshold"]

SPAN_EVENTS = {
    "forward": "Forward",
    "backward": "Backward",
    "optimizer": "Optimizer",
    "dataloader": "DataLoaderIter",
    "backward_sync": "BackwardSync",
}
"""Span kind -> the event name smdebug's readers give it (``FrameworkMetricsReader.get_events``)."""


def event_durations(
    tab: FrameworkTables, start: float | None = None, end: float | None = None
) -> dict[str, np.ndarray]:
    """One worker's durations in seconds per event name (``Step:ModeKeys.TRAIN``, ``Forward``, ``DataLoaderIter``…).

    Only events starting in ``[start, end]`` (epoch seconds) count.
    """
    lo = -np.inf if start is None else start
    hi = np.inf if end is None else end
    out: dict[str, np.ndarray] = {}
    s = tab.steps
    keep = (s["start"] >= lo) & (s["start"] <= hi)
    for m in np.unique(s["mode"][keep]):
        sel = keep & (s["mode"] == m)
        out[f"Step:ModeKeys.{ModeKeys(int(m)).name}"] = (s["end"][sel] - s["start"][sel]).astype(np.float64)
    sp = tab.spans
    keep = (sp["start"] >= lo) & (sp["start"] <= hi)
    for code in np.unique(sp["kind"][keep]):
        name = SPAN_EVENTS.get(SPAN_NAMES.get(int(code), ""))
        if name is not None:
            sel = keep & (sp["kind"] == code)
            out[name] = (sp["end"][sel] - sp["start"][sel]).astype(np.float64)
    return out


def outlier_threshold(durations: np.ndarray) -> float:
    """The duration above which a step is an outlier: median + 3 x the interquartile range (at least 5 % of it).

    Example:
        >>> outlier_threshold(np.array([1.0, 1.0, 1.0, 1.0]))
        1.15
    """
    if not len(durations):
        return float("nan")
    p25, p50, p75 = (float(v) for v in np.percentile(durations, [25, 50, 75]))
    return round(p50 + 3 * max(p75 - p25, 0.05 * p50), 12)


def _histogram(d: np.ndarray, bins: int) -> dict[str, Any]:
    lo, hi = (float(d.min()), float(d.max())) if len(d) else (0.0, 1.0)
    counts, edges = np.histogram(d, bins=bins, range=(lo, hi if hi > lo else lo + 1e-6))
    limit = outlier_threshold(d)
    p50, p95 = (float(v) for v in np.percentile(d, [50, 95])) if len(d) else (float("nan"),) * 2
    return {
        "edges": edges.tolist(),
        "counts": counts.tolist(),
        "count": int(len(d)),
        "median": p50,
        "p95": p95,
        "max": hi if len(d) else float("nan"),
        "outlier_threshold": limit,
        "outliers": int((d > limit).sum()) if len(d) else 0,
    }


class StepHistogram(View):
    """Step durations per worker (and, on request, forward/backward/optimizer/data-loader spans) as histograms.

    A narrow distribution is a steady job; a long tail or a separate cluster of slow steps (the outliers counted in
    each title: above median + 3 x IQR) points at a bottleneck: data loading, a synchronisation, a checkpoint.

    Args:
        run: a run directory, a SageMaker profiler-output folder, or a ``FrameworkMetricsReader``.
        events: regular expressions choosing events (``Step:ModeKeys.TRAIN``, ``Forward``, ``Backward``,
            ``Optimizer``, ``DataLoaderIter``); default the steps of every mode.
        workers: regular expressions choosing workers; default all.
        bins: bins per histogram.
        start: first epoch second (default: the first event).
        end: last epoch second (default: the last event, followed while the job runs).
        combine_workers: one histogram per event over all workers instead of one per worker.

    Raises:
        ValueError: events or workers exist and the selection names none of them (the message lists them).
    """

    title = "Step-duration histograms"
    empty_message = "no steps recorded yet (profile the run with a ProfilerConfig)"

    def __init__(
        self,
        run: Run,
        events: Sequence[str] | None = ("^Step:",),
        workers: Sequence[str] | None = None,
        bins: int = 30,
        start: float | None = None,
        end: float | None = None,
        combine_workers: bool = False,
    ) -> None:
        self.source = run if isinstance(run, RunSource) else RunSource(run)
        self.events, self.workers, self.bins = events, workers, int(bins)
        self.start, self.end, self.combine_workers = start, end, combine_workers
        self.durations: dict[str, dict[str, np.ndarray]] = {}
        self.refresh()

    def _load(self) -> None:
        found = {w: event_durations(t, self.start, self.end) for w, t in sorted(self.source.framework().items())}
        found = {w: d for w, d in found.items() if d}
        workers = select(found, self.workers, "worker")
        events = self._chosen(sorted({e for w in workers for e in found[w]}))
        chosen = {w: {e: found[w][e] for e in events if e in found[w]} for w in workers}
        if self.combine_workers:
            merged = {e: np.concatenate([d[e] for d in chosen.values() if e in d]) for e in events}
            chosen = {"all workers": merged} if merged else {}
        self.durations = {w: d for w, d in chosen.items() if d}

    def _chosen(self, events: list[str]) -> list[str]:
        """The event names of ``events`` that the selection names."""
        return select(events, self.events, "event")

    def figure(self) -> dict[str, dict[str, dict[str, Any]]]:
        """The histograms and durations (seconds) per worker and event, plain lists and numbers.

        ``{worker: {event: {"edges", "counts", "count", "median", "p95", "max", "outlier_threshold", "outliers",
        "durations"}}}``.
        """
        return {
            w: {e: {**_histogram(d, self.bins), "durations": d.tolist()} for e, d in evs.items()}
            for w, evs in self.durations.items()
        }

    def _body(self) -> str | None:
        if not self.durations:
            return None
        out = []
        for worker, evs in self.durations.items():
            panels = []
            for i, (event, d) in enumerate(evs.items()):
                h = _histogram(d, self.bins)
                what = "steps" if event.startswith("Step:") else "spans"
                label = f"{event}: {h['count']} {what}, median {h['median']:.3g} s, {h['outliers']} outliers"
                panels.append(bars(h["edges"], h["counts"], label, "duration (s)", colour(i), (420, 170)))
            out.append(
                f'<div class="ts-worker" data-worker="{esc(worker)}"><h4>{esc(worker)}</h4>'
                f'<div class="ts-grid">{"".join(panels)}</div></div>'
            )
        return "".join(out)
