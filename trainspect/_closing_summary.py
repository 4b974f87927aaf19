"""The lines a user reads when a job ends: each rule with issues, where the report is, where the run is.

Printed by ``trainspect run`` after the script ends, and by a hook at close (not under ``trainspect run``, whose
wrapper prints them once for the job). Framework-free: it reads the run directory only.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from pathlib import Path

from trainspect.exceptions import TrainspectError
from trainspect.rules.counts import RuleCounts
from trainspect.rules.verdict import Verdict, read_verdicts
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import read_worker_manifests

__all__ = ["summary_lines", "exit_line", "recorded_nothing"]

_MESSAGE_CHARS = 160
NOTHING_RECORDED = (
    "trainspect: nothing was recorded: no process of the job ran a training step under the hook (PyTorch: no "
    "call of a registered or top-level module and no backward pass; Keras: no fit, evaluate or predict batch; "
    "custom GradientTape loops are not instrumented)"
)


def recorded_nothing(layout: RunLayout) -> bool:
    """Whether no worker of the run saw a step (a worker's run opens at its first step; ``last_step`` -1: none)."""
    workers = read_worker_manifests(layout)
    return not any(doc.get("last_step", 0) is None or doc.get("last_step", 0) >= 0 for doc in workers.values())


def _rule_line(v: Verdict) -> str:
    where = "" if v.first_trigger_step is None else f" from step {v.first_trigger_step}"
    if where and v.mode:
        where += f" ({v.mode})"
    message = " ".join(v.message.split()).removeprefix(f"{v.rule} ")
    if len(message) > _MESSAGE_CHARS:
        message = message[: _MESSAGE_CHARS - 1] + "…"
    return (
        f"trainspect: {v.rule} found issues{where}: {message}"
        if message
        else f"trainspect: {v.rule} found issues{where}"
    )


def summary_lines(run_dir: str | os.PathLike[str], verdicts: Sequence[Verdict] | None = None) -> list[str]:
    """One line per rule with issues, then the report's path (when written) and the run directory's.

    Args:
        run_dir: the run directory.
        verdicts: the current verdicts (default: read from the run's verdict record).

    Example:
        >>> import tempfile
        >>> from trainspect.rules.verdict import Status
        >>> run = tempfile.mkdtemp()
        >>> lines = summary_lines(run, [Verdict("ExplodingTensor", Status.ISSUES_FOUND, message="loss is NaN",
        ...                                     first_trigger_step=12, mode="TRAIN")])
        >>> lines[0]
        'trainspect: ExplodingTensor found issues from step 12 (TRAIN): loss is NaN'
    """
    layout = RunLayout(Path(run_dir))
    if verdicts is None:
        try:
            verdicts = read_verdicts(layout.verdicts)
        except (TrainspectError, OSError):
            verdicts = []
    issues = [v for v in verdicts if v.issues_found]
    lines = [_rule_line(v) for v in issues]
    if recorded_nothing(layout):
        lines.append(NOTHING_RECORDED)
    if verdicts:
        lines.append(f"trainspect: {RuleCounts.of(verdicts).line()}")
    if layout.report.is_file():
        lines.append(f"trainspect: report {layout.report}")
    lines.append(f"trainspect: run directory {Path(run_dir)}")
    return lines


def exit_line(returncode: int) -> str:
    """How the script ended, when it failed ("" when it succeeded).

    Example:
        >>> exit_line(3), exit_line(-15)
        ('trainspect: the script failed with exit status 3', 'trainspect: the script was ended by signal SIGTERM')
    """
    if returncode == 0:
        return ""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = str(-returncode)
        return f"trainspect: the script was ended by signal {name}"
    return f"trainspect: the script failed with exit status {returncode}"
