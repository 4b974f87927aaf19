"""``RunSummary``: the figures that compare runs, per unit of work (throughput, time and cost per 1,000 steps).

Two runs rarely do the same amount of work, so totals (duration, cost) are not what a comparison ranks: the
summary also holds the steps done, the training loop's length and, where known, the batch size and the steps per
epoch, from which :class:`RunSummary` derives steps/s, samples/s, and time and cost per 1,000 steps and per epoch.
Every per-unit figure comes from the training loop (first step start to last step end), so start-up is its own
figure (``startup_s``) and the throughput and the time per 1,000 steps are one figure seen two ways.

It also holds what says whether a run is fit to be ranked: the rules that found issues, a loss that became NaN or
Inf, StopTraining stops, and the training loss at each saved step (compare puts the two runs' losses side by side).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.profiler.analysis import job_statistics, utilization_statistics
from trainspect.report.context import ReportContext
from trainspect.rules.counts import RuleCounts
from trainspect.store.job_events import read_stops, stop_text
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import rank_count, read_worker_manifests

__all__ = ["RunSummary", "summarize", "cost_of", "METRIC_PREFIX", "REPORT_ARTIFACT"]

METRIC_PREFIX = "trainspect/"
REPORT_ARTIFACT = "trainspect/report.html"
_INT_FIELDS = ("instances", "workers", "steps", "batch_size", "steps_per_epoch")
_DERIVED = (
    "cost",
    "steps_per_s",
    "samples_per_s",
    "time_per_1k_steps_s",
    "cost_per_1k_steps",
    "time_per_epoch_s",
    "cost_per_epoch",
)
# MLflow summary metrics (``trainspect/<key>``): the fields and derived figures logged; the job's duration is logged
# as ``job_s`` (MLflow shows its own run duration), ``duration_s`` of older runs is still read back
_METRIC_KEYS = (
    "instances",
    "workers",
    "steps",
    "loop_s",
    "step_p50_s",
    "step_p95_s",
    "step_p99_s",
    "dataloader_wait_percent",
    "cpu_mean",
    "cpu_p95",
    "gpu_mean",
    "gpu_p95",
    "memory_p95",
    "io_wait_p95",
    "batch_size",
    "steps_per_epoch",
    "price_per_hour",
    "cost",
    "steps_per_s",
    "time_per_1k_steps_s",
    "samples_per_s",
    "startup_s",
)
_READ_BACK = ("duration_s", *(k for k in _METRIC_KEYS if k not in _DERIVED))
_BATCHES = 20  # batch means: the standard error of the mean step cycle from up to 20 contiguous blocks


def cost_of(price_per_hour: float | None, instances: int, duration_s: float | None) -> float | None:
    """Instance-hours times price: ``price * instances * duration / 3600`` (None when a factor is unknown).

    Example:
        >>> round(cost_of(14.688, 3, 503), 3)
        6.157
    """
    if price_per_hour is None or duration_s is None:
        return None
    return float(price_per_hour) * int(instances) * float(duration_s) / 3600.0


def _nonfinite_text(value: float) -> str:
    return "NaN" if value != value else ("Inf" if value > 0 else "-Inf")


@dataclass
class RunSummary:
    """Comparable figures of one run.

    ``steps`` counts global training steps (a data-parallel job's workers step together); ``loop_s`` is the
    training loop (first step start to last step end); ``startup_s`` the job's start to its first step;
    ``batch_size`` is per worker and per step. ``cycle_rel_se`` is the relative standard error of the mean step
    cycle (step plus input wait), the noise of the throughput.

    Example:
        >>> s = RunSummary("a", duration_s=500.0, loop_s=400.0, steps=2000, price_per_hour=3.6, batch_size=32)
        >>> s.steps_per_s, s.samples_per_s, s.time_per_1k_steps_s, s.cost_per_1k_steps
        (5.0, 160.0, 200.0, 0.2)
    """

    name: str
    duration_s: float | None = None
    instances: int = 1
    workers: int = 0
    steps: int = 0
    loop_s: float | None = None
    startup_s: float | None = None
    step_p50_s: float | None = None
    step_p95_s: float | None = None
    step_p99_s: float | None = None
    cycle_p50_s: float | None = None
    cycle_p95_s: float | None = None
    cycle_rel_se: float | None = None
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
    issues: tuple[str, ...] = ()
    rules_line: str = ""
    stops: tuple[str, ...] = ()
    diverged: str = ""
    loss_name: str = ""
    train_loss: dict[int, float] = field(default_factory=dict)
    eval_loss: float | None = None
    report: str = ""

    @property
    def cost(self) -> float | None:
        """The run's cost at ``price_per_hour`` (None without a price)."""
        return cost_of(self.price_per_hour, self.instances, self.duration_s)

    @property
    def steps_per_s(self) -> float | None:
        """Training steps per second of the training loop (of the job when the loop is unknown)."""
        loop = self.loop_s or self.duration_s
        return self.steps / loop if self.steps and loop else None

    @property
    def samples_per_s(self) -> float | None:
        """Samples per second over all workers (needs ``batch_size``)."""
        rate = self.steps_per_s
        return None if rate is None or not self.batch_size else rate * self.batch_size * max(self.workers, 1)

    @property
    def time_per_1k_steps_s(self) -> float | None:
        """Training-loop time per 1,000 steps: ``1000 / steps_per_s`` (start-up excluded)."""
        rate = self.steps_per_s
        return None if not rate else 1000.0 / rate

    @property
    def cost_per_1k_steps(self) -> float | None:
        """Cost of the training-loop time per 1,000 steps."""
        return cost_of(self.price_per_hour, self.instances, self.time_per_1k_steps_s)

    @property
    def time_per_epoch_s(self) -> float | None:
        """Training-loop time per epoch: ``steps_per_epoch / steps_per_s`` (needs ``steps_per_epoch``)."""
        rate = self.steps_per_s
        return None if not rate or not self.steps_per_epoch else self.steps_per_epoch / rate

    @property
    def cost_per_epoch(self) -> float | None:
        """Cost of the training-loop time per epoch (needs a price and ``steps_per_epoch``)."""
        return cost_of(self.price_per_hour, self.instances, self.time_per_epoch_s)

    @property
    def rules_triggered(self) -> list[str]:
        """Names of the rules that triggered at least once."""
        return sorted(r for r, n in self.triggers.items() if n > 0)

    @property
    def broken(self) -> bool:
        """The loss became NaN/Inf or a StopTraining action stopped the run: its speed is not the same work's."""
        return bool(self.diverged or self.stops)

    @property
    def healthy(self) -> bool:
        """No rule found issues, the loss stayed finite and nothing stopped the training."""
        return not self.broken and not self.issues

    @property
    def final_loss(self) -> tuple[int, float] | None:
        """(TRAIN step, loss) of the last saved training loss."""
        if not self.train_loss:
            return None
        step = max(self.train_loss)
        return step, self.train_loss[step]

    def verdict(self) -> str:
        """``"healthy"``, or what is wrong: ``"diverged (loss NaN from step 52); stopped by …; 2 rules found issues"``.

        Example:
            >>> RunSummary("a", diverged="loss NaN from step 52", issues=("ExplodingTensor",)).verdict()
            'diverged (loss NaN from step 52); 1 rule found issues (ExplodingTensor)'
        """
        parts = [f"diverged ({self.diverged})"] if self.diverged else []
        parts += list(self.stops)
        if len(self.issues) == 1:
            parts.append(f"1 rule found issues ({self.issues[0]})")
        elif self.issues:
            parts.append(f"{len(self.issues)} rules found issues")
        return "; ".join(parts) or "healthy (no rule found issues)"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict, with the derived figures (``cost``, ``steps_per_s`` …)."""
        return {**asdict(self), **{k: getattr(self, k) for k in _DERIVED}}

    def to_metrics(self) -> dict[str, float]:
        """MLflow summary metrics (``trainspect/<name>``) of the known figures.

        The per-unit figures ``steps_per_s``, ``time_per_1k_steps_s`` (training loop), ``samples_per_s`` (with a
        batch size) and ``startup_s``; the job's duration as ``job_s`` (``duration_s`` before; MLflow's own run
        duration is another figure).
        """
        doc = self.to_dict()
        out = {f"{METRIC_PREFIX}{k}": float(doc[k]) for k in _METRIC_KEYS if doc.get(k) is not None}
        if self.duration_s is not None:
            out[f"{METRIC_PREFIX}job_s"] = float(self.duration_s)
        out.update({f"{METRIC_PREFIX}triggers/{r}": float(n) for r, n in self.triggers.items()})
        out[f"{METRIC_PREFIX}rules_triggered"] = float(len(self.rules_triggered))
        return out

    @classmethod
    def from_metrics(cls, name: str, metrics: dict[str, float]) -> RunSummary:
        """Rebuild a summary from :meth:`to_metrics` (an MLflow run's metrics; ``duration_s`` of older runs).

        Rules that triggered count as issues; a ``first_nonfinite_step`` metric (the MLflow plugin's, of any
        worker) as a diverged run, from the earliest such step.
        """
        get = {k[len(METRIC_PREFIX) :]: v for k, v in metrics.items() if k.startswith(METRIC_PREFIX)}
        if "job_s" in get:
            get["duration_s"] = get["job_s"]
        out = cls(name=name)
        for key in _READ_BACK:
            if key in get:
                setattr(out, key, int(get[key]) if key in _INT_FIELDS else float(get[key]))
        out.triggers = {k.split("/", 1)[1]: int(v) for k, v in get.items() if k.startswith("triggers/")}
        out.issues = tuple(out.rules_triggered)
        nonfinite = [int(v) for k, v in metrics.items() if _is_first_nonfinite(k)]
        if nonfinite:
            out.diverged = f"a logged value NaN/Inf from step {min(nonfinite)}"
        return out


def _is_first_nonfinite(key: str) -> bool:
    """Whether ``key`` is the MLflow plugin's first non-finite step, of rank 0 or of another worker.

    ``trainspect/first_nonfinite_step`` (``/<name>``), or ``worker_1/trainspect/first_nonfinite_step``: a rank that
    diverged alone.

    Example:
        >>> name = "trainspect/first_nonfinite_step"
        >>> [_is_first_nonfinite(k) for k in (name, f"worker_3/{name}", f"w/x/{name}", f"x{name}", "trainspect/steps")]
        [True, True, False, False, False]
    """
    head, sep, rest = key.partition(METRIC_PREFIX)
    return (
        bool(sep)
        and "/" not in head[:-1]
        and head[-1:] in ("", "/")
        and rest.split("/", 1)[0] == "first_nonfinite_step"
    )


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
    """(start, end) of a worker's TRAIN steps by start, or of all its steps when it recorded no TRAIN step."""
    starts, ends = np.asarray(tab.steps["start"], np.float64), np.asarray(tab.steps["end"], np.float64)
    train = np.asarray(tab.steps["mode"]) == int(ModeKeys.TRAIN)
    if train.any():
        starts, ends = starts[train], ends[train]
    order = np.argsort(starts, kind="stable")
    return starts[order], ends[order]


def step_cycles(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Step cycles: start to next start (the input wait included), the last step's own duration last.

    They add up to the training loop (first start to last end), so their mean is ``loop / steps``.

    Example:
        >>> step_cycles(np.array([0.0, 1.0, 3.0]), np.array([0.5, 2.0, 3.5])).tolist()
        [1.0, 2.0, 0.5]
    """
    return np.append(np.diff(start), end[-1] - start[-1]) if len(start) else np.zeros(0)


def relative_se(cycles: np.ndarray) -> float | None:
    """Relative standard error of the mean cycle, by batch means (contiguous blocks: drift and bursts count).

    Example:
        >>> round(relative_se(np.array([1.0, 1.2] * 60)), 4)
        0.0
        >>> relative_se(np.array([1.0])) is None
        True
    """
    n = len(cycles)
    mean = float(cycles.mean()) if n else 0.0
    if n < 2 or mean <= 0:
        return None
    size = max(1, n // _BATCHES)
    k = n // size
    means = cycles[: k * size].reshape(k, size).mean(axis=1)
    return float(means.std(ddof=1) / math.sqrt(k) / mean)


def _add_steps(out: RunSummary, framework: dict[str, Any]) -> None:
    """Step count (the most any worker did), loop length, step and cycle percentiles, noise, input-wait share."""
    durations, cycles, loops, waits, noise = [], [], [], 0.0, []
    for tab in framework.values():
        start, end = _train_steps(tab) if tab.step_count else (np.zeros(0), np.zeros(0))
        if not len(start):
            continue
        durations.append(end - start)
        cycles.append(step_cycles(start, end))
        noise.append(relative_se(cycles[-1]))
        loops.append(float(end.max() - start.min()))
        out.steps = max(out.steps, len(start))
        sel = tab.spans["kind"] == 4
        waits += float((tab.spans["end"][sel] - tab.spans["start"][sel]).sum())
    if not durations:
        return
    d, c = np.concatenate(durations), np.concatenate(cycles)
    out.step_p50_s, out.step_p95_s, out.step_p99_s = (float(x) for x in np.percentile(d, [50, 95, 99]))
    out.cycle_p50_s, out.cycle_p95_s = (float(x) for x in np.percentile(c, [50, 95]))
    known = [x for x in noise if x is not None]
    out.cycle_rel_se = max(known) if known else None
    out.loop_s = max(loops)
    if waits > 0 and sum(loops) > 0:
        out.dataloader_wait_percent = 100.0 * waits / sum(loops)


def _saved_train_steps(trial: Any) -> int:
    """Training steps of a run without framework metrics: its last saved TRAIN step + 1 (the hook saves the last)."""
    steps = trial.steps(mode=ModeKeys.TRAIN)
    return max(steps) + 1 if steps else 0


def _loss_tensor(trial: Any) -> str:
    """The training loss's name: ``loss``, else the first of the ``losses`` collection ("" when none)."""
    if trial.has_tensor("loss"):
        return "loss"
    names = trial.tensor_names(collection="losses")
    return names[0] if names else ""


def _scalars(tensor: Any, mode: ModeKeys) -> dict[int, float]:
    """``{mode step: value}`` of a scalar tensor (mean of a non-scalar)."""
    return {int(s): float(np.mean(v)) for s, v in sorted(tensor.values(mode=mode).items())}


def _last_evaluation(trial: Any, values: dict[int, float]) -> float | None:
    """Mean loss of the last evaluation: the last run of consecutive EVAL global steps."""
    if not values:
        return None
    by_global = sorted((trial.global_step(ModeKeys.EVAL, s), v) for s, v in values.items())
    last = [by_global[-1]]
    for gs, v in reversed(by_global[:-1]):
        if gs != last[-1][0] - 1:
            break
        last.append((gs, v))
    return float(np.mean([v for _, v in last]))


def _add_loss(out: RunSummary, trial: Any) -> None:
    """The training loss by TRAIN step, where it first became NaN/Inf, and the last evaluation's loss."""
    name = _loss_tensor(trial)
    if not name:
        return
    out.loss_name, out.train_loss = name, _scalars(trial.tensor(name), ModeKeys.TRAIN)
    for other in [name, *trial.tensor_names(collection="losses")]:  # ``loss`` may be the TRAIN loss only
        out.eval_loss = _last_evaluation(trial, _scalars(trial.tensor(other), ModeKeys.EVAL))
        if out.eval_loss is not None:
            break
    bad = [s for s, v in out.train_loss.items() if not math.isfinite(v)]
    if bad:
        step = trial.global_step(ModeKeys.TRAIN, bad[0])
        out.diverged = f"loss {_nonfinite_text(out.train_loss[bad[0]])} from step {step}"


def _add_health(out: RunSummary, ctx: ReportContext) -> None:
    """Rules with issues (the shared count's line), StopTraining stops, the loss, and the report's path."""
    counts = RuleCounts.of(ctx.verdicts)
    out.issues, out.rules_line = tuple(counts.issues), counts.line() if counts.total else ""
    out.triggers = {v.rule: int(v.triggers) for v in ctx.verdicts}
    if ctx.trial is not None:
        try:
            _add_loss(out, ctx.trial)
        except Exception as exc:  # noqa: BLE001 - an unreadable loss loses the loss rows only
            ctx.problems.append(f"Could not read the training loss: {type(exc).__name__}: {exc}")
    if ctx.run_dir is not None:
        out.stops = tuple(stop_text(s) for s in read_stops(ctx.run_dir))
        report = Path(ctx.run_dir) / "report.html"
        out.report = str(report.resolve()) if report.is_file() else ""


def _worker_count(ctx: ReportContext, manifests: dict[str, dict[str, Any]]) -> int:
    """The job's workers: those profiled, else its ranks (:func:`~trainspect.store.manifest.rank_count`)."""
    if ctx.profiler.framework:
        return len(ctx.profiler.framework)
    return rank_count(ctx.manifest, manifests, len(ctx.trial.workers()) if ctx.trial is not None else 0)


def summarize(ctx: ReportContext, name: str | None = None) -> RunSummary:
    """Summarise a loaded run (see :meth:`ReportContext.load`)."""
    prof = ctx.profiler
    stats = job_statistics(prof)
    manifests = read_worker_manifests(RunLayout(ctx.run_dir)) if ctx.run_dir is not None else {}
    nodes = set(prof.system) | {t.node for t in prof.framework.values() if t.node}
    nodes |= {str(m["node"]) for m in manifests.values() if m.get("node")}
    out = RunSummary(
        name=name or (ctx.run_dir.name if ctx.run_dir is not None else "run"),
        duration_s=stats.get("duration_s"),
        startup_s=stats.get("initialization_s"),
        instances=max(len(nodes), 1),
        workers=_worker_count(ctx, manifests),
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
    _add_health(out, ctx)
    return out
