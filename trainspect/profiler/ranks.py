"""Where each rank's time goes, step cycle by step cycle: its own work and its wait for the other ranks.

Under synchronous data parallelism every rank's step cycle lasts as long as the slowest rank's, so step times hide
the rank that is slow. What differs is how the cycle splits (docs/profiler.md, "Ranks"):

* ``sync_s``: the wait for the other ranks at the end of ``backward()`` (``backward_sync`` spans: from the rank's
  last local gradient to the return of ``backward()``);
* ``compute_s``: the step (first forward to the end of ``optimizer.step()``) less that wait and less any data-loader
  wait inside the step;
* ``loader_s``: the data-loader wait of the cycle;
* ``between_s``: the rest of the cycle, between steps and outside the data loader (an input pipeline that is no
  DataLoader, logging, checkpoints).

A cycle runs from one training step's end to the next's (as InputBottleneck's cycles: the switch to evaluation and
the wait before the first step are left out). Runs recorded without
``backward_sync`` spans (before they existed, or not by the PyTorch hook) have ``sync_s`` 0, so their compute is the
whole step.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from trainspect.modes import ModeKeys
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData

__all__ = ["StepCycles", "step_cycles", "rank_times", "RANK_COLUMNS"]

_DATALOADER, _BACKWARD_SYNC = 4, 5
RANK_COLUMNS = ["worker", "cycles", "compute_s", "loader_s", "between_s", "sync_s", "busy_s", "step_s", "sync_recorded"]
"""Columns of :func:`rank_times`."""


@dataclass(frozen=True)
class StepCycles:
    """One worker's training step cycles, split (seconds; one entry per cycle).

    Attributes:
        steps: the global step ending each cycle.
        cycle_s: the cycle's length (previous step's end to this step's end).
        step_s: the step's own length.
        compute_s: the step less its synchronisation wait and any data-loader wait inside it.
        loader_s: the data-loader wait of the cycle.
        between_s: the rest of the cycle (between steps, outside the data loader).
        sync_s: the wait for the other ranks at the end of the step's backward passes.
        sync_recorded: whether the worker recorded ``backward_sync`` spans at all.
    """

    steps: np.ndarray
    cycle_s: np.ndarray
    step_s: np.ndarray
    compute_s: np.ndarray
    loader_s: np.ndarray
    between_s: np.ndarray
    sync_s: np.ndarray
    sync_recorded: bool

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def busy_s(self) -> np.ndarray:
        """The rank's own time per cycle: the cycle less its synchronisation wait."""
        return np.maximum(self.cycle_s - self.sync_s, 0.0)


def _assign(idx: np.ndarray, ok: np.ndarray, s_step: np.ndarray, glob: np.ndarray) -> None:
    """Spans recorded with their global step belong to that step (in place)."""
    known = s_step >= 0
    if known.any():
        pos = {int(g): i for i, g in enumerate(glob)}
        idx[known] = [pos.get(int(g), -1) for g in s_step[known]]
        ok[known] = idx[known] >= 0


def _spans(tab: FrameworkTables, code: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    sel = tab.spans["kind"] == code
    return tab.spans["start"][sel], tab.spans["end"][sel], tab.spans["global_step"][sel]


def _inside_steps(
    tab: FrameworkTables, code: int, start: np.ndarray, end: np.ndarray, glob: np.ndarray, by_step: bool
) -> np.ndarray:
    """Per step, the total duration of the spans of kind ``code`` inside it (by their global step, else by time)."""
    s_start, s_end, s_step = _spans(tab, code)
    idx = np.searchsorted(start, s_start, "right") - 1  # the last step starting at or before the span
    ok = idx >= 0
    ok[ok] = s_end[ok] <= end[idx[ok]]
    if by_step:
        _assign(idx, ok, s_step, glob)
    out = np.zeros(len(start))
    np.add.at(out, idx[ok], (s_end - s_start)[ok])
    return out


def _per_cycle(tab: FrameworkTables, code: int, end: np.ndarray, glob: np.ndarray) -> np.ndarray:
    """Per cycle (previous step's end, this step's end], the total duration of the spans of kind ``code`` ending in it.

    A span recorded with its global step (Keras' input wait) belongs to that step's cycle.
    """
    s_start, s_end, s_step = _spans(tab, code)
    idx = np.searchsorted(end, s_end, "left")  # the first step ending at or after the span
    ok = idx < len(end)
    _assign(idx, ok, s_step, glob)
    out = np.zeros(len(end))
    np.add.at(out, idx[ok], (s_end - s_start)[ok])
    return out


def step_cycles(tab: FrameworkTables) -> StepCycles:
    """Split every training step cycle of one worker (every cycle when it recorded no training step).

    A cycle runs from one step's end to the next step's end, both of the same mode (as InputBottleneck's), so the
    switch to evaluation and the wait before the first step are left out.
    """
    order = np.argsort(tab.steps["start"], kind="stable")
    start, end = tab.steps["start"][order], tab.steps["end"][order]
    glob, mode = tab.steps["global_step"][order], tab.steps["mode"][order]
    cycle = np.zeros(len(start))
    cycle[1:] = end[1:] - end[:-1]
    keep = np.zeros(len(start), dtype=bool)
    keep[1:] = mode[1:] == mode[:-1]
    keep &= cycle > 0
    train = keep & (mode == int(ModeKeys.TRAIN))
    pick = train if train.any() else keep
    cycle = cycle[pick]
    sync = _inside_steps(tab, _BACKWARD_SYNC, start, end, glob, by_step=True)[pick]
    inside = _inside_steps(tab, _DATALOADER, start, end, glob, by_step=False)[pick]
    loader = np.minimum(_per_cycle(tab, _DATALOADER, end, glob)[pick], cycle)
    step = np.minimum(end[pick] - start[pick], cycle)
    return StepCycles(
        steps=glob[pick],
        cycle_s=cycle,
        step_s=step,
        compute_s=np.maximum(step - sync - inside, 0.0),
        loader_s=loader,
        between_s=np.maximum(cycle - step - np.maximum(loader - inside, 0.0), 0.0),
        sync_s=sync,
        sync_recorded=bool((tab.spans["kind"] == _BACKWARD_SYNC).any()),
    )


def rank_times(data: ProfilerData, min_cycles: int = 1) -> pd.DataFrame:
    """Per worker, the median of each part of its step cycles (seconds), for workers with ``min_cycles`` cycles.

    Returns:
        Columns :data:`RANK_COLUMNS`: ``worker``, ``cycles`` (how many), the medians ``compute_s``, ``loader_s``,
        ``between_s``, ``sync_s``, ``busy_s`` (cycle less the synchronisation wait), ``step_s``, and
        ``sync_recorded`` (whether the worker recorded synchronisation waits); sorted by worker.

    Example:
        >>> import tempfile
        >>> from trainspect.profiler.data import load_profiler_data
        >>> rank_times(load_profiler_data(tempfile.mkdtemp())).empty
        True
    """
    rows = []
    for worker, tab in sorted(data.framework.items()):
        cyc = step_cycles(tab)
        if len(cyc) < max(1, min_cycles):
            continue
        med = [
            float(np.median(a))
            for a in (cyc.compute_s, cyc.loader_s, cyc.between_s, cyc.sync_s, cyc.busy_s, cyc.step_s)
        ]
        rows.append([worker, len(cyc), *med, cyc.sync_recorded])
    return pd.DataFrame(rows, columns=RANK_COLUMNS)
