"""``ReportContext``: what a report is built from, loaded once, each part tolerant of missing or damaged data."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainspect.profiler.analysis import cuda_memory_statistics
from trainspect.profiler.data import ProfilerData, load_profiler_data
from trainspect.rules.record import record_report_verdicts
from trainspect.rules.verdict import Verdict
from trainspect.store import inventory
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
        self._note(self.profiler.problems)

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
        if not self.profiler.system and not self.profiler.framework:
            return
        from trainspect.rules.profiler import PROFILER_RULES
        from trainspect.rules.source import note_damage

        have = {v.rule for v in self.verdicts}
        added: list[Verdict] = []
        for rule_cls in PROFILER_RULES:
            rule = rule_cls()  # type: ignore[abstract]
            if rule.name in have:
                continue
            try:
                added.append(note_damage(rule.evaluate(self.profiler), self.profiler.problems))
            except Exception as exc:  # one rule's failure is its own verdict, not the report's
                log.warning("trainspect report: profiler rule %s failed: %s", rule.name, exc)
        self.verdicts.extend(record_report_verdicts(self.run_dir, added, self.profiler))

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
