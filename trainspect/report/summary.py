"""``RunSummary``: the figures that compare runs, per unit of work (throughput, time and cost per 1,000 steps).

Two runs rarely do the same amount of work, so totals (duration, cost) are not what a comparison ranks: the
summary also holds the steps done, the training loop's length and, where known, the batch size and the steps per
epoch, from which :class:`RunSummary` derives steps/s, samples/s, and time and cost per 1,000 steps and per epoch.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.profiler.analysis import job_statistics, utilization_statistics
from trainspect.report.context import ReportContext

__all__ = ["RunSummary", "summarize", "cost_of", "METRIC_PREFIX"]

METRIC_PREFIX = "trainspect/"
_INT_FIELDS = ("instances", "workers", "steps", "batch_size", "steps_per_epoch")
_DERIVED = ("cost", "steps_per_s", "samples_per_s", "time_per_1k_steps_s", "cost_per_1k_steps", "time_per_epoch_s",
            "cost_per_epoch")  # fmt: skip


def cost_of(price_per_hour: float | None, instances: int, duration_s: float | None) -> float | None:
    """Instance-hours times price: ``price * instances * duration / 3600`` (None when a factor is unknown).

    Example:
        >>> round(cost_of(14.688, 3, 503), 3)
        6.157
    """
    if price_per_hour is None or duration_s is None:
        return None
    return float(price_per_hour) * int(instances) * float(duration_s) / 3600.0


def _per(total: float | None, steps: int, per_steps: float | None) -> float | None:
    """``total`` scaled from ``steps`` steps to ``per_steps`` steps (None when unknown)."""
    if total is None or not steps or not per_steps:
        return None
    return float(total) * float(per_steps) / float(steps)


@dataclass
class RunSummary:
    """Comparable figures of one run.

    ``steps`` counts global training steps (a data-parallel job's workers step together); ``loop_s`` is the
    training loop (first step start to last step end); ``batch_size`` is per worker and per step.

    Example:
        >>> s = RunSummary("a", duration_s=500.0, loop_s=400.0, steps=2000, price_per_hour=3.6, batch_size=32)
        >>> s.steps_per_s, s.samples_per_s, s.time_per_1k_steps_s, s.cost_per_1k_steps
        (5.0, 160.0, 250.0, 0.25)
    """

    name: str
    duration_s: float | None = None
    instances: int = 1
    workers: int = 0
    steps: int = 0
    loop_s: float | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    step_p99_s: float | None = None
    dataloader_wait_percent: float | None = None
    cpu_mean: float | None = None
    cpu_p95: float | None = None
    gpu_mean: float | None = None
    gpu_p95: float | None = None
    memory_p95: float | None = None
    io_wait_p95: float | None = None
    batch_size: int | None = None
    steps_per_epoch: int | None = None
    triggers: dict[str, int] = field(default_factory=dict)
    price_per_hour: float | None = None

    @property
    def cost(self) -> float | None:
        """The run's cost at ``price_per_hour`` (None without a price)."""
        return cost_of(self.price_per_hour, self.instances, self.duration_s)

    @property
    def steps_per_s(self) -> float | None:
        """Training steps per second of the training loop."""
        loop = self.loop_s or self.duration_s
        return self.steps / loop if self.steps and loop else None

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second over all workers (needs ``batch_size``)."""
        rate = self.steps_per_s
        return None if rate is None or not self.batch_size else rate * self.batch_size * max(self.workers, 1)

    @property
    def time_per_1k_steps_s(self) -> float | None:
        """Job time (initialisation included) per 1,000 steps."""
        return _per(self.duration_s, self.steps, 1000)

    @property
    def cost_per_1k_steps(self) -> float | None:
        """Cost per 1,000 steps."""
        return _per(self.cost, self.steps, 1000)

    @property
    def time_per_epoch_s(self) -> float | None:
        """Job time per epoch (needs ``steps_per_epoch``)."""
        return _per(self.duration_s, self.steps, self.steps_per_epoch)

    @property
    def cost_per_epoch(self) -> float | None:
        """Cost per epoch (needs a price and ``steps_per_epoch``)."""
        return _per(self.cost, self.steps, self.steps_per_epoch)

    @property
    def rules_triggered(self) -> list[str]:
        """Names of the rules that triggered at least once."""
        return sorted(r for r, n in self.triggers.items() if n > 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with the derived figures (``cost``, ``steps_per_s`` …)."""
        return {**asdict(self), **{k: getattr(self, k) for k in _DERIVED}}

    def to_metrics(self) -> dict[str, float]:
        """MLflow summary metrics (``trainspect/<name>``) of the known figures."""
        doc = self.to_dict()
        keys = [f.name for f in fields(self) if f.name not in ("name", "triggers")] + ["cost"]
        out = {f"{METRIC_PREFIX}{k}": float(doc[k]) for k in keys if doc.get(k) is not None}
        out.update({f"{METRIC_PREFIX}triggers/{r}": float(n) for r, n in self.triggers.items()})
        out[f"{METRIC_PREFIX}rules_triggered"] = float(len(self.rules_triggered))
        return out

    @classmethod
    def from_metrics(cls, name: str, metrics: dict[str, float]) -> RunSummary:
        """Rebuild a summary from :meth:`to_metrics` (an MLflow run's metrics)."""
        get = {k[len(METRIC_PREFIX) :]: v for k, v in metrics.items() if k.startswith(METRIC_PREFIX)}
        out = cls(name=name)
        for f in fields(cls):
            if f.name in get and f.name not in ("name", "triggers"):
                setattr(out, f.name, int(get[f.name]) if f.name in _INT_FIELDS else float(get[f.name]))
        out.triggers = {k.split("/", 1)[1]: int(v) for k, v in get.items() if k.startswith("triggers/")}
        return out


def _stat(stats: Any, metric: str, column: str = "p95") -> float | None:
    sel = stats[stats["metric"] == metric]
    return float(sel[column].max()) if len(sel) else None


def _cpu(util: Any, column: str) -> float | None:
    """The training job's own processes where recorded, else the whole host."""
    for metric in ("process_cpu_utilization_percent", "cpu_total_utilization_percent", "cpu_utilization_percent"):
        value = _stat(util, metric, column)
        if value is not None:
            return value
    return None


def _train_steps(tab: Any) -> tuple[np.ndarray, np.ndarray]:
    """(start, end) of a worker's TRAIN steps, or of all its steps when it recorded no TRAIN step."""
    starts, ends = np.asarray(tab.steps["start"], np.float64), np.asarray(tab.steps["end"], np.float64)
    train = np.asarray(tab.steps["mode"]) == int(ModeKeys.TRAIN)
    return (starts[train], ends[train]) if train.any() else (starts, ends)


def _add_steps(out: RunSummary, framework: dict[str, Any]) -> None:
    """Step count (the most any worker did), loop length, step time percentiles and the dataloader wait share."""
    durations, loops, waits = [], [], 0.0
    for tab in framework.values():
        if not tab.step_count:
            continue
        start, end = _train_steps(tab)
        if not len(start):
            continue
        durations.append(end - start)
        loops.append(float(end.max() - start.min()))
        out.steps = max(out.steps, len(start))
        sel = tab.spans["kind"] == 4
        waits += float((tab.spans["end"][sel] - tab.spans["start"][sel]).sum())
    if not durations:
        return
    d = np.concatenate(durations)
    out.step_p50_s, out.step_p95_s, out.step_p99_s = (float(x) for x in np.percentile(d, [50, 95, 99]))
    out.loop_s = max(loops)
    if waits > 0 and sum(loops) > 0:
        out.dataloader_wait_percent = 100.0 * waits / sum(loops)


def _saved_train_steps(trial: Any) -> int:
    """Training steps of a run without framework metrics: its last saved TRAIN step + 1 (the hook saves the last)."""
    steps = trial.steps(mode=ModeKeys.TRAIN)
    return max(steps) + 1 if steps else 0


def summarize(ctx: ReportContext, name: str | None = None) -> RunSummary:
    """Summarise a loaded run (see :meth:`ReportContext.load`)."""
    prof = ctx.profiler
    stats = job_statistics(prof)
    nodes = set(prof.system) | {t.node for t in prof.framework.values() if t.node}
    out = RunSummary(
        name=name or (ctx.run_dir.name if ctx.run_dir is not None else "run"),
        duration_s=stats.get("duration_s"),
        instances=max(len(nodes), 1),
        workers=len(prof.framework) or (len(ctx.trial.workers()) if ctx.trial is not None else 0),
        price_per_hour=ctx.price_per_hour,
    )
    if out.duration_s is None and ctx.manifest:
        start, end = ctx.manifest.get("created"), ctx.manifest.get("end_time")
        if isinstance(start, (int, float)) and isinstance(end, (int, float)):
            out.duration_s = float(end - start)
    _add_steps(out, prof.framework)
    if not out.steps and ctx.trial is not None:
        out.steps = _saved_train_steps(ctx.trial)
    if prof.system:
        util = utilization_statistics(prof)
        out.cpu_p95, out.cpu_mean = _cpu(util, "p95"), _cpu(util, "mean")
        out.gpu_p95 = _stat(util, "gpu_total_utilization_percent")
        out.gpu_mean = _stat(util, "gpu_total_utilization_percent", "mean")
        out.memory_p95 = _stat(util, "cpu_memory_used_percent")
        out.io_wait_p95 = _stat(util, "cpu_iowait_percent")
    out.triggers = {v.rule: int(v.triggers) for v in ctx.verdicts}
    return out
