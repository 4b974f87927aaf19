"""Dataloader: too few or too many parallel data loaders for the cores (spec 2.9)."""

from __future__ import annotations

from typing import Any

import numpy as np

from trainspect.profiler.analysis import training_loader_of
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData
from trainspect.rules._common import LITERAL
from trainspect.rules.base import Param
from trainspect.rules.profiler._common import ProfilerRule, downsample
from trainspect.rules.profiler.input_bottleneck import input_waits
from trainspect.rules.verdict import Series, Status, Verdict

__all__ = ["Dataloader", "parallel_loaders", "MIN_LOADERS_PERCENT", "MAX_LOADERS_PERCENT", "MIN_WAIT_PERCENT"]

MIN_LOADERS_PERCENT = 70.0
"""Fewer data loaders than this % of the node's cores are too few (the default ``min_threshold``)."""
MAX_LOADERS_PERCENT = 200.0
"""More data loaders than this % of the node's cores are too many (the default ``max_threshold``)."""
MIN_WAIT_PERCENT = 10.0
"""Too few loaders matter only while the input wait exceeds this % of the step cycle (the default
``min_wait_percent``)."""


def parallel_loaders(tab: FrameworkTables) -> dict[int, int]:
    """Per second with dataloader activity: the number of loader processes (epoch second -> count).

    With a known worker count, ``max(1, num_workers)`` (0 workers load in the main process); otherwise the
    number of distinct pids of that second's dataloader events (SageMaker traces).
    """
    sel = tab.spans["kind"] == 4
    secs = np.floor(tab.spans["start"][sel]).astype(np.int64)
    workers, pids = tab.spans["workers"][sel].astype(np.int64), tab.spans["pid"][sel].astype(np.int64)
    if not len(secs):
        return {}
    order = np.lexsort((pids, secs))  # by second, then pid: one pass over sorted runs, no scan per second
    secs, workers, pids = secs[order], workers[order], pids[order]
    first = np.flatnonzero(np.r_[True, secs[1:] != secs[:-1]])
    known_max = np.maximum.reduceat(np.where(workers >= 0, workers, -1), first)
    new_pid = np.r_[True, (secs[1:] != secs[:-1]) | (pids[1:] != pids[:-1])]
    distinct = np.add.reduceat(new_pid.astype(np.int64), first)
    counts = np.where(known_max >= 0, np.maximum(known_max, 1), distinct)
    return {int(s): int(c) for s, c in zip(secs[first], counts, strict=True)}


class Dataloader(ProfilerRule):
    """Flag too few or too many data loader processes for the cores.

    The median number of parallel data loaders per second, once more than ``patience`` seconds are seen,
    below ``min_threshold`` % or above ``max_threshold`` % of the node's cores is a violation. Too few loaders
    count only while the job waits for its input for more than ``min_wait_percent`` % of the step cycle (a job
    whose loader keeps up gains nothing from more workers; without step timings the count decides alone);
    ``literal=True`` judges the count alone, as smdebug.

    Example:
        >>> Dataloader().max_threshold
        200.0
    """

    parameters = (
        Param("min_threshold", float, MIN_LOADERS_PERCENT, "loaders below this % of the cores are too few", min=0),
        Param("max_threshold", float, MAX_LOADERS_PERCENT, "loaders above this % of the cores are too many", min=0),
        Param("patience", int, 10, "seconds with dataloader activity needed before the rule judges", min=1),
        Param(
            "min_wait_percent",
            float,
            MIN_WAIT_PERCENT,
            "too few loaders matter only above this input-wait share of the step cycle",
            min=0,
            max=100,
        ),
        LITERAL,
    )
    min_threshold: float
    max_threshold: float
    patience: int
    min_wait_percent: float
    literal: bool
    recommendation = "Change the number of data loader processes."
    description = "worker count far below or above the core count"

    def evaluate(self, data: ProfilerData) -> Verdict:
        """Judge every node with dataloader activity."""
        spans = [t for t in data.framework.values() if (t.spans["kind"] == 4).any()]
        if not spans:
            return self.no_data("No dataloading metrics found: the rule needs dataloader wait times")
        if not any(a.cpu_cores for a in data.system.values()):
            return self.no_data("no per-core CPU metrics were recorded: the rule needs the number of cores")
        by_node: dict[str, dict[int, int]] = {}
        for tab in spans:
            node = tab.node if tab.node in data.system else next(iter(data.system))
            for sec, n in parallel_loaders(tab).items():
                by_node.setdefault(node, {}).setdefault(sec, 0)
                by_node[node][sec] += n
        waiting = _wait_percent(spans)
        triggers: list[float] = []
        details: dict[str, Any] = {"input_wait_percent": waiting}
        series: list[Series] = []
        most = 0
        for node, per_sec in by_node.items():
            cores = len(data.system[node].cpu_cores) if node in data.system else 0
            secs = np.array(sorted(per_sec), dtype=np.float64)
            counts = np.array([per_sec[int(s)] for s in secs], dtype=np.float64)
            median = int(np.median(counts))
            most = max(most, len(counts))
            low, high = cores * self.min_threshold / 100.0, cores * self.max_threshold / 100.0
            too_few = median < low and (self.literal or not waiting <= self.min_wait_percent)  # NaN: count
            bad = len(counts) > self.patience and (too_few or median > high)
            if bad:
                triggers.append(float(secs[-1]))
            details[node] = {"cores": cores, "dataloaders": median, "min_loaders": low, "max_loaders": high}
            xs, ys = downsample(secs, counts)
            series.append(Series(f"{node} parallel data loaders", xs, ys, "s", (float(secs[-1]),) if bad else (), low))
        details["dataloading_time"] = _times(spans)
        details["num_workers"] = {t.worker: (training_loader_of(t) or {}).get("num_workers") for t in spans}
        if most <= self.patience:
            return self.no_data(f"too little data: {most} seconds with dataloader activity; needs > {self.patience}")
        parts = [
            f"{n}: median {d['dataloaders']} loader(s) for {d['cores']} cores (allowed {d['min_loaders']:g}-"
            f"{d['max_loaders']:g}: min_threshold {self.min_threshold:g}%, max_threshold {self.max_threshold:g}%)"
            for n, d in details.items()
            if isinstance(d, dict) and "cores" in d
        ]
        if waiting == waiting:  # not NaN
            parts.append(f"input wait {waiting:.1f}% of the step cycle (min_wait_percent {self.min_wait_percent:g}%)")
        status = Status.ISSUES_FOUND if triggers else Status.NO_ISSUES_FOUND
        return self.verdict(status, "; ".join(parts), most, triggers, details, series)


def _wait_percent(tabs: list[FrameworkTables]) -> float:
    """The input wait of every worker as a share of their step cycles (NaN without steps)."""
    waits = [input_waits(t) for t in tabs]
    cycle = sum(float(w.cycle_s.sum()) for w in waits)
    return 100.0 * sum(float(w.wait_s.sum()) for w in waits) / cycle if cycle > 0 else float("nan")


def _times(tabs: list[FrameworkTables]) -> dict[str, Any]:
    dur = np.concatenate([(t.spans["end"] - t.spans["start"])[t.spans["kind"] == 4] for t in tabs])
    probs, edges = np.histogram(dur, bins=100)
    p25, p50, p95 = (float(x) for x in np.percentile(dur, [25, 50, 95]))
    return {"p25": p25, "p50": p50, "p95": p95, "probs": probs.tolist(), "binedges": edges.tolist()}
