"""``ProfilerData``: everything the profiler rules and analyses read, loaded once per run directory."""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.detailed import OPERATOR_COLUMNS, PYTHON_COLUMNS, read_tables
from trainspect.profiler.ending import run_over
from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader
from trainspect.store import inventory
from trainspect.store.layout import RunLayout
from trainspect.store.remote import localize

__all__ = ["ProfilerData", "load_profiler_data", "missing_files"]

logger = logging.getLogger(__name__)
_WARNED: set[str] = set()


@dataclass
class ProfilerData:
    """A run's profiler data, as arrays and tables.

    Attributes:
        path: the directory it was loaded from.
        source: ``"trainspect"`` or ``"sagemaker"``.
        system: node -> :class:`~trainspect.profiler.arrays.SystemArrays`.
        framework: worker -> :class:`~trainspect.profiler.arrays.FrameworkTables`.
        operators: top operators of the detailed windows (columns ``detailed.OPERATOR_COLUMNS``).
        python_stats: Python hotspots of the profiled windows (columns ``detailed.PYTHON_COLUMNS``).
        job_ended: whether the job is over (its end marker, ``final=True``, or data older than ``stale_after_s``).
        problems: what could not be read (damaged records, files missing or of the wrong shape), one line each
            naming the file.

    Example:
        >>> import tempfile
        >>> load_profiler_data(tempfile.mkdtemp()).has_gpu
        False
    """

    path: Path
    source: str = "trainspect"
    system: dict[str, SystemArrays] = field(default_factory=dict)
    framework: dict[str, FrameworkTables] = field(default_factory=dict)
    operators: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=OPERATOR_COLUMNS))
    python_stats: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=PYTHON_COLUMNS))
    job_ended: bool = False
    problems: list[str] = field(default_factory=list)

    @property
    def has_gpu(self) -> bool:
        """Whether any node recorded GPU utilisation."""
        return any(a.gpus for a in self.system.values())

    @property
    def has_steps(self) -> bool:
        """Whether any worker recorded a step."""
        return any(t.step_count for t in self.framework.values())

    def start_time(self) -> float | None:
        """Earliest known time (the job's start, first sample or first record), epoch seconds.

        The job's start is the process start for a script's first hook, the hook's start in a notebook or for a
        later run of the same process (:attr:`FrameworkTables.began`).
        """
        cands = [float(a.timestamps[0]) for a in self.system.values() if len(a)]
        cands += [t for t in (f.first_time() for f in self.framework.values()) if t is not None]
        return min(cands) if cands else None

    def end_time(self) -> float | None:
        """Latest known time (last sample, last record or close), epoch seconds."""
        cands = [float(a.timestamps[-1]) for a in self.system.values() if len(a)]
        cands += [t for t in (f.last_time() for f in self.framework.values()) if t is not None]
        return max(cands) if cands else None


def load_profiler_data(
    run_dir: str | os.PathLike[str], *, final: bool = False, stale_after_s: float | None = None
) -> ProfilerData:
    """Read a run's profiler data (trainspect run directory or SageMaker profiler-output folder).

    Damaged records are skipped with one warning per file; a running job gives what is on disk so far. Everything
    skipped or missing is listed in :attr:`ProfilerData.problems`. :attr:`ProfilerData.job_ended` follows
    :func:`trainspect.profiler.ending.run_over` (``final``: the caller knows the job is over; ``stale_after_s``:
    the age of the newest data after which a directory without an end marker is over).
    """
    run_dir, _mirror = localize(run_dir, "profiler")  # a URL: read a synced copy
    system_reader = SystemMetricsReader(run_dir)
    framework_reader = FrameworkMetricsReader(run_dir)
    system = system_reader.read_arrays()
    framework = framework_reader.read_tables()
    root = system_reader.root
    ended = run_over(run_dir, final=final, stale_after_s=stale_after_s)
    problems = system_reader.problems() + framework_reader.problems()
    operators = read_tables(root / "detailed", "operators", problems)
    python_stats = read_tables(root / "detailed", "python", problems)
    if system_reader.source == "trainspect":
        problems += missing_files(Path(run_dir), root)
    return ProfilerData(
        path=Path(run_dir),
        source=system_reader.source,
        system=system,
        framework=framework,
        operators=operators,
        python_stats=python_stats,
        job_ended=ended,
        problems=problems,
    )


def missing_files(run_dir: Path, profiler_root: Path) -> list[str]:
    """Profiler files that a finished run should have and lacks (see :mod:`trainspect.store.inventory`)."""
    over = inventory.job_over(RunLayout(run_dir)) if (run_dir / "profiler") == profiler_root else True
    found = inventory.profiler_problems(profiler_root, over)
    for text in found:
        if text not in _WARNED:  # rules and views load the same run again and again: one warning per file
            if len(_WARNED) < 1000:
                _WARNED.add(text)
            logger.warning("trainspect: %s", text)
    return found
