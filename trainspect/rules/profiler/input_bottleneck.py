"""InputBottleneck: most of the step cycle is spent waiting for input (no GPU needed to judge it)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.profiler.analysis import training_loader_of
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import ProfilerRule, downsample
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["InputBottleneck", "input_waits"]

_DATALOADER = 4


@dataclass(frozen=True)
class InputWaits:
    """The step cycles of one worker and the input wait inside each.

    A cycle runs from one step's end to the next step's end (both steps of the same mode), so it holds the
    wait for the next batch whether the hook times it between steps (a DataLoader's ``__next__``) or at the
    start of the step (Keras' data adapter).

    Attributes:
        steps: global step ending each cycle.
        modes: its mode (ModeKeys values).
        ends: epoch seconds each cycle ends.
        cycle_s: each cycle's length.
        wait_s: input wait inside each cycle.
    """

    steps: np.ndarray
    modes: np.ndarray
    ends: np.ndarray
    cycle_s: np.ndarray
    wait_s: np.ndarray

    @property
    def share_percent(self) -> float:
        """Input wait as a share of all cycles (NaN without cycles)."""
        total = float(self.cycle_s.sum())
        return 100.0 * float(self.wait_s.sum()) / total if total > 0 else float("nan")


def _positions(glob: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Per wanted global step, the (last) index holding it in ``glob``, -1 where none does (sorted, not hashed)."""
    order = np.argsort(glob, kind="stable")
    ordered = glob[order]
    at = np.searchsorted(ordered, wanted, "right") - 1
    hit = (at >= 0) & (ordered[np.maximum(at, 0)] == wanted)
    return np.where(hit, order[np.maximum(at, 0)], -1)


def input_waits(tab: FrameworkTables) -> InputWaits:
    """Attribute every dataloader wait of a worker to the step cycle it delays.

    A wait recorded with its global step belongs to that step; one without (a DataLoader's ``__next__``) to the
    first step starting after it ended. Cycles whose two steps differ in mode (the switch to evaluation) are
    left out, as are waits before the first step.
    """
    order = np.argsort(tab.steps["start"], kind="stable")
    start, end = tab.steps["start"][order], tab.steps["end"][order]
    glob, mode = tab.steps["global_step"][order], tab.steps["mode"][order]
    sel = tab.spans["kind"] == _DATALOADER
    s_end, s_dur = tab.spans["end"][sel], (tab.spans["end"] - tab.spans["start"])[sel]
    s_step = tab.spans["global_step"][sel]
    idx = np.searchsorted(start, s_end, "left")  # the first step starting at or after the wait ended
    known = s_step >= 0
    if known.any():
        idx[known] = _positions(glob, s_step[known])
    wait = np.zeros(len(start))
    ok = (idx >= 0) & (idx < len(start))
    np.add.at(wait, idx[ok], s_dur[ok])
    keep = np.zeros(len(start), dtype=bool)
    keep[1:] = mode[1:] == mode[:-1]
    cycle = np.zeros(len(start))
    cycle[1:] = end[1:] - end[:-1]
    keep &= cycle > 0
    return InputWaits(glob[keep], mode[keep], end[keep], cycle[keep], np.minimum(wait[keep], cycle[keep]))


class InputBottleneck(ProfilerRule):
    """Flag training that spends most of its step cycle waiting for input.

    Per worker, the time spent in the data pipeline (a PyTorch DataLoader's ``__next__``, Keras' wait for the
    batch) is summed over the step cycles (one step's end to the next step's end); more than ``threshold``
    percent of the cycles' time, judged once more than ``patience`` cycles are recorded, triggers. Steps whose
    own cycle waited more than ``threshold`` percent count as triggers. The rule needs no GPU: an input-bound
    loop on a CPU-only machine is caught too. smdebug has no such rule (its CPUBottleneck needs a GPU and its
    Dataloader rule only counts loader processes).

    Example:
        >>> InputBottleneck().threshold
        50.0
    """

    parameters = (
        Param("threshold", float, 50.0, "input wait above this % of the step cycle triggers", min=0, max=100),
        Param("patience", int, 10, "step cycles needed before the rule judges", min=1),
    )
    threshold: float
    patience: int
    recommendation = (
        "Feed the loop faster: DataLoader(num_workers=N) with N up to the free cores, pin_memory=True when "
        "training on a GPU, prefetch_factor=2-4 and persistent_workers=True (tf.data: num_parallel_calls and "
        ".prefetch(tf.data.AUTOTUNE)); move expensive __getitem__ work (decoding, augmentation) offline or cache it."
    )
    description = "most of the step cycle is spent waiting for input"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every worker with steps and dataloader waits."""
        if not data.has_steps:
            return self.no_data("no steps were recorded: the rule needs framework step timings")
        tabs = {w: t for w, t in data.framework.items() if t.step_count and (t.spans["kind"] == _DATALOADER).any()}
        if not tabs:
            return self.no_data(
                "no input waits were recorded: the profiler times them when the loop iterates a "
                "torch DataLoader or a Keras fit"
            )
        waits = {w: input_waits(t) for w, t in tabs.items()}
        most = max(len(w.cycle_s) for w in waits.values())
        if most <= self.patience:
            return self.no_data(
                f"too little data: {most} step cycles; the rule needs more than patience={self.patience}", most
            )
        bad = {w: x for w, x in waits.items() if len(x.cycle_s) > self.patience and x.share_percent > self.threshold}
        parts = [self._describe(w, x, tabs[w]) for w, x in sorted(waits.items()) if len(x.cycle_s) > self.patience]
        details: dict[str, Any] = {w: self._details(x, tabs[w]) for w, x in waits.items()}
        series = [self._series(w, x, w in bad) for w, x in sorted(waits.items())]
        status = Status.ISSUES_FOUND if bad else Status.NO_ISSUES_FOUND
        times = np.concatenate([x.ends[self._over(x)] for x in bad.values()]) if bad else np.zeros(0)
        verdict = self.verdict(status, "; ".join(parts), most, tuple(times), details, series, tuple(sorted(waits)))
        return self._with_steps(verdict, list(bad.values()))

    def _over(self, x: InputWaits) -> np.ndarray:
        return 100.0 * x.wait_s > self.threshold * x.cycle_s

    def _series(self, worker: str, x: InputWaits, triggered: bool) -> Series:
        xs, ys = downsample(x.ends, 100.0 * x.wait_s / x.cycle_s)
        trig = tuple(float(t) for t in x.ends[self._over(x)][:500]) if triggered else ()
        return Series(f"{worker} input wait (% of step cycle)", xs, ys, "s", trig, self.threshold)

    def _describe(self, worker: str, x: InputWaits, tab: FrameworkTables) -> str:
        loaders = (training_loader_of(tab) or {}).get("num_workers")
        how = "" if loaders is None or loaders < 0 else f", DataLoader num_workers={loaders}"
        waited, total = float(x.wait_s.sum()), float(x.cycle_s.sum())
        return (
            f"{worker}: {x.share_percent:.1f}% of the step cycle waited for input ({waited:.2f} s of {total:.2f} s "
            f"over {len(x.cycle_s)} steps{how}; threshold {self.threshold:g}%)"
        )

    @staticmethod
    def _details(x: InputWaits, tab: FrameworkTables) -> dict[str, Any]:
        share = 100.0 * x.wait_s / np.where(x.cycle_s > 0, x.cycle_s, 1.0)
        return {
            "input_wait_percent": round(x.share_percent, 3),
            "input_wait_s": float(x.wait_s.sum()),
            "cycle_s": float(x.cycle_s.sum()),
            "cycles": len(x.cycle_s),
            "p50_wait_s": float(np.percentile(x.wait_s, 50)) if len(x.wait_s) else None,
            "p50_wait_percent": float(np.percentile(share, 50)) if len(share) else None,
            "num_workers": (training_loader_of(tab) or {}).get("num_workers"),
        }

    def _with_steps(self, verdict: Verdict, bad: list[InputWaits]) -> Verdict:
        """Fill the trigger steps (global) and their mode(s) from the cycles above the threshold."""
        steps = np.concatenate([x.steps[self._over(x)] for x in bad]) if bad else np.zeros(0, np.int64)
        if not len(steps):
            return verdict
        modes = np.unique(np.concatenate([x.modes[self._over(x)] for x in bad]))
        return replace(
            verdict,
            triggers=len(steps),
            first_trigger_step=int(steps.min()),
            last_trigger_step=int(steps.max()),
            mode="+".join(ModeKeys(int(m)).name for m in modes),
        )
