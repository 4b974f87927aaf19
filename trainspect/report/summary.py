"""``RunSummary``: the few numbers that compare runs (duration, instances, utilisation, step time, triggers, cost)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from trainspect.profiler.analysis import job_statistics, utilization_statistics
from trainspect.report.context import ReportContext

__all__ = ["RunSummary", "summarize", "cost_of", "METRIC_PREFIX"]

METRIC_PREFIX = "trainspect/"


def cost_of(price_per_hour: float | None, instances: int, duration_s: float | None) -> float | None:
    """Instance-hours times price: ``price * instances * duration / 3600`` (None when a factor is unknown).

    Example:
        >>> round(cost_of(14.688, 3, 503), 3)
        6.157
    """
    if price_per_hour is None or duration_s is None:
        return None
    return float(price_per_hour) * int(instances) * float(duration_s) / 3600.0


@dataclass
class RunSummary:
    """Comparable figures of one run.

    Example:
        >>> RunSummary("a", duration_s=503.0, instances=3, price_per_hour=14.688).cost.__round__(2)
        6.16
    """

    name: str
    duration_s: float | None = None
    instances: int = 1
    workers: int = 0
    steps: int = 0
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    cpu_p95: float | None = None
    gpu_p95: float | None = None
    memory_p95: float | None = None
    io_wait_p95: float | None = None
    triggers: dict[str, int] = field(default_factory=dict)
    price_per_hour: float | None = None

    @property
    def cost(self) -> float | None:
        """The run's cost at ``price_per_hour`` (None without a price)."""
        return cost_of(self.price_per_hour, self.instances, self.duration_s)

    @property
    def rules_triggered(self) -> list[str]:
        """Names of the rules that triggered at least once."""
        return sorted(r for r, n in self.triggers.items() if n > 0)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with ``cost``."""
        return {**asdict(self), "cost": self.cost}

    def to_metrics(self) -> dict[str, float]:
        """MLflow summary metrics (``trainspect/<name>``) of the known figures."""
        keys = ("duration_s", "instances", "workers", "steps", "step_p50_s", "step_p95_s", "cpu_p95", "gpu_p95",
                "memory_p95", "io_wait_p95", "price_per_hour", "cost")  # fmt: skip
        doc = self.to_dict()
        out = {f"{METRIC_PREFIX}{k}": float(doc[k]) for k in keys if doc.get(k) is not None}
        out.update({f"{METRIC_PREFIX}triggers/{r}": float(n) for r, n in self.triggers.items()})
        out[f"{METRIC_PREFIX}rules_triggered"] = float(len(self.rules_triggered))
        return out

    @classmethod
    def from_metrics(cls, name: str, metrics: dict[str, float]) -> RunSummary:
        """Rebuild a summary from :meth:`to_metrics` (an MLflow run's metrics)."""
        get = {k[len(METRIC_PREFIX) :]: v for k, v in metrics.items() if k.startswith(METRIC_PREFIX)}
        out = cls(name=name)
        for key in ("duration_s", "step_p50_s", "step_p95_s", "cpu_p95", "gpu_p95", "memory_p95", "io_wait_p95",
                    "price_per_hour"):  # fmt: skip
            if key in get:
                setattr(out, key, float(get[key]))
        for key in ("instances", "workers", "steps"):
            if key in get:
                setattr(out, key, int(get[key]))
        out.triggers = {k.split("/", 1)[1]: int(v) for k, v in get.items() if k.startswith("triggers/")}
        return out


def _p95(stats: Any, metric: str) -> float | None:
    sel = stats[stats["metric"] == metric]
    return float(sel["p95"].max()) if len(sel) else None


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
    durations = [t.steps["end"] - t.steps["start"] for t in prof.framework.values() if t.step_count]
    if durations:
        d = np.concatenate(durations)
        out.steps = len(d)
        out.step_p50_s, out.step_p95_s = (float(x) for x in np.percentile(d, [50, 95]))
    if prof.system:
        util = utilization_statistics(prof)
        out.cpu_p95 = (  # the training job's own processes where recorded, else the whole host
            _p95(util, "process_cpu_utilization_percent")
            or _p95(util, "cpu_total_utilization_percent")
            or _p95(util, "cpu_utilization_percent")
        )
        out.gpu_p95 = _p95(util, "gpu_total_utilization_percent")
        out.memory_p95 = _p95(util, "cpu_memory_used_percent")
        out.io_wait_p95 = _p95(util, "cpu_iowait_percent")
    out.triggers = {v.rule: int(v.triggers) for v in ctx.verdicts}
    return out
