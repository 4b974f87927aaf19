"""``ReportContext``: what a report is built from, loaded once, each part tolerant of missing or damaged data."""

from __future__ import annotations

import logging
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from trainspect.profiler.analysis import cuda_memory_statistics, timed_step_counts
from trainspect.profiler.config import ALLOWED_INTERVALS_MS
from trainspect.profiler.data import ProfilerData, load_profiler_data
from trainspect.rules.counts import step_counts
from trainspect.rules.record import record_report_verdicts
from trainspect.rules.verdict import Verdict
from trainspect.store import inventory
from trainspect.store.job_events import read_exit, read_stops
from trainspect.store.layout import RunLayout

__all__ = ["ReportContext", "REQUIREMENT_HINTS"]

log = logging.getLogger(__name__)

REQUIREMENT_HINTS: dict[str, str] = {
    "profiler": "No profiler data was recorded. Pass profiler_config=ts.ProfilerConfig() to the hook "
    "(or run with `trainspect run --profile`).",
    "system": "No system metrics were recorded. Pass profiler_config=ts.ProfilerConfig() to the hook "
    "(or `trainspect run --profile`) to sample CPU, GPU, memory and I/O.",
    "gpu": "No GPU metrics were recorded (a CPU-only run, or NVML unavailable: pip install trainspect[gpu]).",
    "steps": "No step timings were recorded. Pass profiler_config=ts.ProfilerConfig() to the hook so that "
    "steps, forward/backward passes and dataloader waits are timed.",
    "operators": "No operator profile was recorded. Enable detailed profiling: "
    "ts.ProfilerConfig(framework_profile_params=ts.profiler.FrameworkProfile()).",
    "python": "No Python profile was recorded. Enable it with "
    "ts.ProfilerConfig(framework_profile_params=ts.profiler.FrameworkProfile()) (cProfile at steps 9-11).",
    "cuda_memory": "No GPU memory of the training job was recorded (it is read from PyTorch's CUDA allocator at each "
    "step when the profiler is on and the job uses CUDA).",
    "dataloader": "No dataloader waits were recorded. They are timed when the profiler is on and the loop "
    "iterates a torch DataLoader.",
    "verdicts": "No rule was evaluated. Pass rules=[...] (or rules='default') to the hook, or run "
    "`trainspect rules DIR`.",
    "triggered": "No rule found issues.",
    "tensors": "No tensors were saved. Register a loss (hook.register_loss) or include collections "
    "(include_collections=['losses', ...]).",
    "price": "Give --price-per-hour (the instance's hourly price) to see the cost of this run.",
}


SHORT_JOB_S = max(ALLOWED_INTERVALS_MS) / 1000.0
"""A job shorter than the longest system-monitor interval may end before its first system sample."""

_NO_SAMPLE = " holds no .tsys file: its system metrics are missing"


def too_short_for_sample(run_dir: Path, profiler: ProfilerData) -> list[str]:
    """The problems "<node folder> holds no .tsys file" of a job that ended too soon for one system sample.

    A node folder without samples is no damage when the job's steps (or its whole life, manifest to end marker)
    took less than :data:`SHORT_JOB_S`: the monitor had not sampled yet.
    """
    found = [p for p in profiler.problems if p.endswith(_NO_SAMPLE)]
    if not found:
        return []
    span = _job_span(run_dir, profiler)
    return found if span is not None and span < SHORT_JOB_S else []


def _job_span(run_dir: Path, profiler: ProfilerData) -> float | None:
    """How long the job ran, in seconds: its timed steps, else manifest creation to end marker; None: unknown."""
    starts = [float(np.min(t.steps["start"])) for t in profiler.framework.values() if t.step_count]
    ends = [float(np.max(t.steps["end"])) for t in profiler.framework.values() if t.step_count]
    if starts:
        return max(ends) - min(starts)
    layout = RunLayout(run_dir)
    manifest, _problem = inventory.read_manifest(layout)
    created = (manifest or {}).get("created")
    try:
        return layout.end_marker.stat().st_mtime - float(created) if created is not None else None
    except (OSError, TypeError, ValueError):
        return None


def _short_note(problem: str) -> str:
    node = Path(problem.removesuffix(_NO_SAMPLE)).name
    return (
        f"Node {node}: the job was too short for a system sample (it ended before the system monitor's first "
        "sample); a longer run, or a shorter system_monitor_interval_millis, records CPU, memory and I/O."
    )


@dataclass
class ReportContext:
    """Everything the report sections read. Build it with :meth:`load` (a run directory) or directly (tests).

    Attributes:
        run_dir: the run directory (may not exist).
        profiler: the run's profiler data (empty when none was recorded or it could not be read).
        verdicts: rule verdicts (from ``rules/verdicts.json`` plus profiler rules evaluated for the report).
        trial: a Trial over the tensors, or ``None`` when the run has none.
        manifest: the job manifest, when readable.
        price_per_hour: the instance's hourly price, for the cost section.
        problems: what could not be read (missing or damaged files, each named), shown at the top of the report.
        notes: what is missing for a reason that is no damage (a job too short for one system sample), one line each.
        stops: the StopTraining stops of ``rules/stopped.json`` (:func:`~trainspect.store.job_events.read_stops`).
        job_exit: how ``trainspect run`` saw the script end (:func:`~trainspect.store.job_events.read_exit`).

    Example:
        >>> import tempfile
        >>> ctx = ReportContext.load(tempfile.mkdtemp())
        >>> ctx.has("system"), ctx.has("verdicts")
        (False, False)
    """

    run_dir: Path
    profiler: ProfilerData
    verdicts: list[Verdict] = field(default_factory=list)
    trial: Any = None
    manifest: dict[str, Any] = field(default_factory=dict)
    price_per_hour: float | None = None
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    stops: list[dict[str, Any]] = field(default_factory=list)
    job_exit: dict[str, Any] | None = None

    @classmethod
    def load(
        cls,
        run_dir: str | os.PathLike[str],
        price_per_hour: float | None = None,
        evaluate_profiler_rules: bool = True,
    ) -> ReportContext:
        """Read a run directory; every part that fails is noted in ``problems`` and left empty.

        Args:
            run_dir: the run directory (or a SageMaker profiler-output folder).
            price_per_hour: the instance's hourly price (enables the cost section).
            evaluate_profiler_rules: evaluate the built-in profiler rules that the run's verdicts lack.
        """
        path = Path(run_dir)
        ctx = cls(run_dir=path, profiler=ProfilerData(path), price_per_hour=price_per_hour)
        if not path.is_dir():
            ctx.problems.append(f"{path} is not a directory: nothing was recorded there.")
            return ctx
        ctx._try("profiler data", ctx._load_profiler)
        ctx._try("rule verdicts", ctx._load_verdicts)
        ctx._try("the tensors (Trial)", ctx._load_trial)
        ctx._try("the manifest", ctx._load_manifest)
        ctx._try("how the job ended", ctx._load_job_events)
        if evaluate_profiler_rules:
            ctx._try("profiler rules", ctx._evaluate_profiler_rules)
        return ctx

    def _try(self, what: str, fn: Any) -> None:
        try:
            fn()
        except Exception as exc:
            log.warning("trainspect report: could not read %s of %s: %s", what, self.run_dir, exc)
            self.problems.append(f"Could not read {what}: {type(exc).__name__}: {exc}")

    def _note(self, problems: list[str]) -> None:
        for text in problems:
            if text not in self.problems:
                self.problems.append(text)

    def _load_profiler(self) -> None:
        self.profiler = load_profiler_data(self.run_dir)
        short = too_short_for_sample(self.run_dir, self.profiler)
        if short:  # no damage: the job ended before the monitor's first sample
            self.profiler.problems = [p for p in self.profiler.problems if p not in short]
            self.notes += [_short_note(p) for p in short]
        self._note(self.profiler.problems)

    def _load_job_events(self) -> None:
        self.stops = read_stops(self.run_dir)
        self.job_exit = read_exit(self.run_dir)

    def failed_early(self) -> str | None:
        """How the script failed before its first step, or ``None``.

        ``"the script failed with exit status 2 before its first step"`` when ``trainspect run`` recorded a non-zero
        exit and no step; a negative status is the signal that ended it (``"was ended by signal SIGKILL"``).
        """
        ended = self.job_exit or {}
        code = ended.get("returncode")
        if not isinstance(code, int) or code == 0 or ended.get("steps_recorded", True):
            return None
        if code < 0:
            try:
                name = signal.Signals(-code).name
            except ValueError:
                name = f"signal {-code}"
            return f"the script was ended by signal {name} before its first step"
        return f"the script failed with exit status {code} before its first step"

    def step_counts(self) -> dict[str, int]:
        """Steps per mode (``{"TRAIN": 300, "EVAL": 3}``): the saved tensors' steps, else the timed steps."""
        counts: dict[str, int] = {}
        if self.trial is not None:
            try:
                counts = step_counts(self.trial)
            except Exception:  # noqa: BLE001 - a damaged trial only loses this count
                counts = {}
        if counts:
            return counts
        return timed_step_counts(self.profiler)

    def _load_verdicts(self) -> None:
        from trainspect.rules.engine import load_verdicts

        self.verdicts = load_verdicts(self.run_dir)
        self._note(inventory.rules_problems(RunLayout(self.run_dir), inventory.job_over(RunLayout(self.run_dir))))

    def _load_trial(self) -> None:
        layout = RunLayout(self.run_dir)
        if not layout.tensors_dir.is_dir() and not layout.manifest.exists():
            return
        from trainspect.store.trial import create_trial

        self.trial = create_trial(self.run_dir)
        self._note(self.trial.problems)

    def _load_manifest(self) -> None:
        manifest, problem = inventory.read_manifest(RunLayout(self.run_dir))
        self.manifest = manifest or {}
        self._note([problem] if problem else [])

    def _evaluate_profiler_rules(self) -> None:
        """Evaluate the built-in rules (tensor, profiler) the record lacks or holds unfinished, over the whole run."""
        from trainspect.rules.completion import evaluate_missing, rules_to_complete
        from trainspect.rules.trial_feed import note_damage
        from trainspect.rules.verdict import Status

        has_profiler = bool(self.profiler.system or self.profiler.framework)
        tensor_rules, profiler_rules = rules_to_complete(self.run_dir, self.verdicts, self.trial, has_profiler)
        over = inventory.job_over(RunLayout(self.run_dir)) or self.profiler.job_ended
        added: list[Verdict] = evaluate_missing(self.trial, tensor_rules, over)
        for rule in profiler_rules:
            try:
                verdict = note_damage(rule.evaluate(self.profiler), self.profiler.problems)
            except Exception as exc:  # one rule's failure is its own verdict, not the report's
                log.warning("trainspect report: profiler rule %s failed: %s", rule.name, exc)
                continue
            if not over and verdict.status is Status.NO_ISSUES_FOUND:
                verdict = verdict.with_status(Status.IN_PROGRESS)
            added.append(verdict)
        replaced = {v.rule for v in added}
        stamped = record_report_verdicts(self.run_dir, added, _Over(self.profiler, over))
        self.verdicts = [v for v in self.verdicts if v.rule not in replaced] + stamped

    # --- what is available -----------------------------------------------------------------------------
    def has(self, requirement: str) -> bool:
        """Whether the data a requirement names is present (keys of :data:`REQUIREMENT_HINTS`)."""
        checks = {
            "profiler": lambda: bool(self.profiler.system or self.profiler.framework),
            "system": lambda: bool(self.profiler.system),
            "gpu": lambda: self.profiler.has_gpu,
            "steps": lambda: self.profiler.has_steps,
            "operators": lambda: not self.profiler.operators.empty,
            "python": lambda: not self.profiler.python_stats.empty,
            "cuda_memory": lambda: not cuda_memory_statistics(self.profiler).empty,
            "dataloader": lambda: any((t.spans["kind"] == 4).any() for t in self.profiler.framework.values()),
            "verdicts": lambda: bool(self.verdicts),
            "triggered": lambda: any(v.triggers > 0 or v.issues_found for v in self.verdicts),
            "tensors": lambda: self.trial is not None and bool(self.trial.tensor_names()),
            "price": lambda: self.price_per_hour is not None,
        }
        check = checks.get(requirement)
        if check is None:
            raise ValueError(f"unknown report requirement {requirement!r}; known: {', '.join(checks)}")
        return bool(check())


@dataclass
class _Over:
    """What :func:`record_report_verdicts` reads of the data: its source, and whether the job has ended."""

    data: Any
    job_ended: bool

    @property
    def source(self) -> str:
        return str(getattr(self.data, "source", "trainspect"))
