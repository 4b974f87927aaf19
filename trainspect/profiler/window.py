"""What the system and the framework were doing between two timestamps: :func:`window`.

Example:
    >>> import tempfile
    >>> w = window(tempfile.mkdtemp(), 0.0, 3600.0)  # an empty run: empty frames, no error
    >>> sorted(w.frames()), len(w.system)
    (['loader_waits', 'phases', 'spans', 'steps', 'system'], 0)
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import pandas as pd

from trainspect.profiler import frames
from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader
from trainspect.store.frame_tools import NotRecorded

__all__ = ["Window", "window", "window_of"]


@dataclass(frozen=True)
class Window:
    """The profiler data of ``[start, end)`` (epoch seconds).

    Attributes:
        start: the window's start.
        end: its end (excluded).
        system: system samples in the window, long form (:data:`trainspect.profiler.frames.SYSTEM_COLUMNS`).
        steps: the steps overlapping it, with their seconds of forward, backward, optimizer, backward_sync and
            data-loader wait (:data:`~trainspect.profiler.frames.STEP_COLUMNS`; the whole step's, also for a step
            cut by the window's edge).
        spans: the spans overlapping it (:data:`~trainspect.profiler.frames.SPAN_COLUMNS`).
        loader_waits: the spans of kind ``dataloader`` among them (waits for the next batch).
        phases: the job phases overlapping it (:data:`~trainspect.profiler.frames.PHASE_COLUMNS`).
    """

    start: float
    end: float
    system: pd.DataFrame
    steps: pd.DataFrame
    spans: pd.DataFrame
    loader_waits: pd.DataFrame
    phases: pd.DataFrame

    def frames(self) -> dict[str, pd.DataFrame]:
        """The frames by name: ``system``, ``steps``, ``spans``, ``loader_waits``, ``phases``."""
        return {
            "system": self.system,
            "steps": self.steps,
            "spans": self.spans,
            "loader_waits": self.loader_waits,
            "phases": self.phases,
        }


def window(
    run: str | os.PathLike[str],
    start: float,
    end: float,
    metrics: str | Sequence[str] | None = None,
    node: str | Sequence[str] | None = None,
) -> Window:
    """The system samples, steps, spans, data-loader waits and phases of ``[start, end)`` of a run.

    Only the system files that can hold the window are read (one per node and hour of a trainspect run); the
    framework files are one per worker process, read whole.

    Args:
        run: the run directory, its ``profiler/`` folder or a SageMaker profiler-output folder.
        start: epoch seconds.
        end: epoch seconds (excluded).
        metrics: system metric keys or ``fnmatch`` patterns; default all.
        node: node names or patterns; default all.

    Raises:
        ValueError: ``end <= start``.
        NotRecorded: the run has data but none in the window, which lies outside it (the message gives the span the
            run recorded), or a node or metric it did not record.
    """
    return window_of(SystemMetricsReader(run), FrameworkMetricsReader(run), start, end, metrics, node)


def window_of(
    system: SystemMetricsReader,
    framework: FrameworkMetricsReader,
    start: float,
    end: float,
    metrics: str | Sequence[str] | None = None,
    node: str | Sequence[str] | None = None,
) -> Window:
    """:func:`window` with readers kept open (a notebook following a running job reads only what is new)."""
    if not end > start:
        raise ValueError(f"window: end ({end}) must be after start ({start})")
    samples = system.window_arrays(start, end, node)
    tables = framework.read_tables()
    spans = frames.spans_frame(tables, start, end)
    found = Window(
        start=start,
        end=end,
        system=frames.system_frame(samples, metrics),
        steps=frames.steps_frame(tables, start, end),
        spans=spans,
        loader_waits=spans[spans["kind"] == "dataloader"].reset_index(drop=True),
        phases=frames.phases_frame(tables, start, end),
    )
    if not any(len(f) for f in found.frames().values()):
        _check_inside(system, tables, start, end)
    return found


def _check_inside(system: SystemMetricsReader, tables: dict, start: float, end: float) -> None:
    """Raise when a window with no data lies outside what the run recorded (a gap inside it is just empty)."""
    firsts, lasts = [], []
    span = system.time_span()
    if span is not None:
        firsts.append(span[0])
        lasts.append(span[1])
    for tab in tables.values():
        first, last = tab.first_time(), tab.last_time()
        if first is not None and last is not None:
            firsts.append(first)
            lasts.append(last)
    if not firsts:
        return  # nothing recorded yet: empty frames
    lo, hi = min(firsts), max(lasts)
    if end <= lo or start > hi:
        raise NotRecorded(
            "data in the window",
            [f"[{start:.3f}, {end:.3f})"],
            [f"[{lo:.3f}, {hi:.3f}]"],
            where="(epoch s) of this run",
        )
