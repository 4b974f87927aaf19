"""smdebug's notebook views and local readers, on trainspect's views: SageMaker notebook cells run unchanged.

``smdebug.profiler.analysis.notebook_utils.{metrics_histogram,step_histogram,heatmap}`` and
``smdebug.profiler.{system,algorithm}_metrics_reader`` answer with these classes under trainspect's smdebug
compatibility layer (docs/smdebug.md). As in smdebug, times are microseconds since the epoch and selections are
regular expressions over smdebug's dimensions (``CPUUtilization``, ``GPUUtilization``) and events (``cpu0``,
``gpu1``, ``total``; ``Step:ModeKeys.TRAIN``, ``Forward``, ``DataLoaderIter`` for steps).
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from typing import Any

from trainspect.notebook import heatmap as _heatmap
from trainspect.notebook import metrics_histogram as _metrics
from trainspect.notebook import step_histogram as _steps
from trainspect.notebook._view import RunSource, display
from trainspect.profiler.events import SystemEvent, TraceEvent
from trainspect.profiler.histograms import histogram_edges
from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader

__all__ = [
    "LocalSystemMetricsReader",
    "LocalAlgorithmMetricsReader",
    "MetricsHistogram",
    "StepHistogram",
    "Heatmap",
    "smdebug_device",
]

_US = 1e6


class LocalSystemMetricsReader(SystemMetricsReader):
    """smdebug's ``LocalSystemMetricsReader(path)``: trainspect's reader with times in microseconds by default."""

    def __init__(self, path: str | os.PathLike[str], use_in_memory_cache: bool = False) -> None:
        super().__init__(path)

    def get_events(
        self, start: float, end: float, unit: str = "us", event_type: str | None = None
    ) -> list[SystemEvent]:
        """Samples with ``start <= timestamp <= end`` (microseconds by default)."""
        return super().get_events(start, end, unit, event_type)

    def get_timestamp_of_latest_available_file(self, unit: str = "us") -> float:
        """Time of the newest sample, microseconds by default."""
        return super().get_timestamp_of_latest_available_file(unit)

    def get_timestamp_of_first_available_file(self, unit: str = "us") -> float:
        """Start of the earliest file, microseconds by default."""
        return super().get_timestamp_of_first_available_file(unit)


class LocalAlgorithmMetricsReader(FrameworkMetricsReader):
    """smdebug's ``LocalAlgorithmMetricsReader(path)``: trainspect's reader with times in microseconds by default."""

    def __init__(self, path: str | os.PathLike[str], use_in_memory_cache: bool = False) -> None:
        super().__init__(path)

    def get_events(self, start: float, end: float, unit: str = "us") -> list[TraceEvent]:
        """Events overlapping ``[start, end]`` (microseconds by default)."""
        return super().get_events(start, end, unit)

    def get_timestamp_of_latest_available_file(self, unit: str = "us") -> float:
        """Time of the newest record, microseconds by default."""
        return super().get_timestamp_of_latest_available_file(unit)

    def get_timestamp_of_first_available_file(self, unit: str = "us") -> float:
        """Start of the earliest file, microseconds by default."""
        return super().get_timestamp_of_first_available_file(unit)


def smdebug_device(row: str) -> tuple[str, str]:
    """Smdebug's (dimension, event) of a device row: ``cpu3`` -> ``("CPUUtilization", "cpu3")``.

    Example:
        >>> smdebug_device("cpu_total"), smdebug_device("gpu1")
        (('CPUUtilization', 'total'), ('GPUUtilization', 'gpu1'))
    """
    dimension = "GPUUtilization" if row.startswith("gpu") else "CPUUtilization"
    return dimension, "total" if row.endswith("_total") else row


def _pick(rows: list[str], dimensions: Sequence[str], events: Sequence[str]) -> list[str]:
    """Rows whose smdebug dimension matches a dimension pattern and whose event matches an event pattern."""
    dims = [re.compile(p) for p in ([dimensions] if isinstance(dimensions, str) else dimensions)]
    evs = [re.compile(p) for p in ([events] if isinstance(events, str) else events)]
    chosen = [
        r
        for r in rows
        if any(d.search(smdebug_device(r)[0]) for d in dims) and any(e.search(smdebug_device(r)[1]) for e in evs)
    ]
    if rows and not chosen:
        have = sorted({f"{d}/{e}" for d, e in map(smdebug_device, rows)})
        raise ValueError(
            f"no metric matches select_dimensions={[d.pattern for d in dims]!r}, "
            f"select_events={[e.pattern for e in evs]!r}; this run has: {', '.join(have)}"
        )
    return chosen


def _seconds(t: float | None) -> float | None:
    return None if t is None or t == 0 else float(t) / _US


class MetricsHistogram(_metrics.MetricsHistogram):
    """smdebug's ``MetricsHistogram(system_metrics_reader)``; ``.plot(...)`` draws and displays it (2 % bins)."""

    def __init__(self, metrics_reader: Any) -> None:
        self.select_dimensions: Sequence[str] = [".*"]
        self.select_events: Sequence[str] = [".*"]
        super().__init__(RunSource(metrics_reader), bins=histogram_edges(50).tolist())

    def plot(
        self,
        starttime: float = 0,
        endtime: float | None = None,
        select_dimensions: Sequence[str] = (".*",),
        select_events: Sequence[str] = (".*",),
        show_workers: bool = True,
    ) -> MetricsHistogram:
        """Histograms of ``[starttime, endtime]`` (microseconds; default all) of the selected metrics; displayed."""
        self.start, self.end = _seconds(starttime), _seconds(endtime)
        self.select_dimensions, self.select_events = list(select_dimensions), list(select_events)
        self.refresh()
        return display(self)

    def _chosen(self, devices: list[str]) -> list[str]:
        return _pick(devices, self.select_dimensions, self.select_events)


class StepHistogram(_steps.StepHistogram):
    """smdebug's ``StepHistogram(framework_metrics_reader)``; ``.plot(...)`` draws and displays it."""

    def __init__(self, metrics_reader: Any, width: int = 500) -> None:
        super().__init__(RunSource(metrics_reader), events=None)

    def plot(
        self,
        starttime: float = 0,
        endtime: float | None = None,
        select_events: Sequence[str] = (".*",),
        select_dimensions: Sequence[str] = (".*",),
        show_workers: bool = True,
        select_metrics: Sequence[str] | None = None,
    ) -> StepHistogram:
        """Duration histograms of the selected events in ``[starttime, endtime]`` (microseconds); displayed.

        ``select_events`` (or the older ``select_metrics``) chooses events, ``select_dimensions`` workers; one
        histogram per worker when ``show_workers``.
        """
        self.start, self.end = _seconds(starttime), _seconds(endtime)
        self.events = list(select_metrics if select_metrics is not None else select_events)
        self.workers, self.combine_workers = list(select_dimensions), not show_workers
        self.refresh()
        return display(self)


class Heatmap(_heatmap.Heatmap):
    """smdebug's ``Heatmap(system_metrics_reader, framework_metrics_reader, ...)``: drawn and displayed at once."""

    def __init__(
        self,
        metrics_reader: Any,
        framework_metrics_reader: Any = None,
        select_dimensions: Sequence[str] = (".*CPU", ".*GPU"),
        select_events: Sequence[str] = (".*",),
        starttime: float = 0,
        endtime: float | None = None,
        plot_height: int = 350,
        show_workers: bool = True,
    ) -> None:
        self.select_dimensions, self.select_events = list(select_dimensions), list(select_events)
        self.plot_height = plot_height
        super().__init__(
            RunSource(metrics_reader, framework_metrics_reader), start=_seconds(starttime), end=_seconds(endtime)
        )
        display(self)

    def _chosen(self, rows: list[str]) -> list[str]:
        return _pick(rows, self.select_dimensions, self.select_events)
