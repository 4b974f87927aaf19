"""Where each kind of data lives inside a run directory (docs/format.md describes the files)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["RunLayout", "FORMAT_VERSION", "safe_component"]

FORMAT_VERSION = 1
_SAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def safe_component(name: str) -> str:
    """Turn a worker or node name into one safe path component (no separators, no ``..``)."""
    cleaned = _SAFE.sub("_", name).strip(".") or "_"
    return cleaned


@dataclass(frozen=True)
class RunLayout:
    """Paths inside one run directory.

    Example:
        >>> RunLayout("/tmp/run").tensor_dir("worker_0").as_posix()
        '/tmp/run/tensors/worker_0'
    """

    root: Path

    def __init__(self, root: str | os.PathLike[str]) -> None:
        object.__setattr__(self, "root", Path(root))

    # --- job level -------------------------------------------------------------------------------------
    @property
    def manifest(self) -> Path:
        """The job manifest (JSON): format version, framework, config, start time."""
        return self.root / "trainspect.json"

    @property
    def end_marker(self) -> Path:
        """Written when the job is over (same name as smdebug's)."""
        return self.root / "training_job_end.ts"

    @property
    def workers_dir(self) -> Path:
        """One JSON file per worker: host, node, pid, start and end times."""
        return self.root / "workers"

    def worker_manifest(self, worker: str) -> Path:
        """The manifest of one worker."""
        return self.workers_dir / f"{safe_component(worker)}.json"

    # --- tensors ---------------------------------------------------------------------------------------
    @property
    def tensors_dir(self) -> Path:
        """Parent of the per-worker tensor folders."""
        return self.root / "tensors"

    def tensor_dir(self, worker: str) -> Path:
        """Tensor data and index files of one worker."""
        return self.tensors_dir / safe_component(worker)

    def tensorboard_dir(self, worker: str, single: bool = True) -> Path:
        """Where TensorBoard event files go: the run root for the chief (so the run is named after it)."""
        if single:
            return self.root
        return self.root / "tb_workers" / safe_component(worker)

    # --- profiler --------------------------------------------------------------------------------------
    @property
    def profiler_dir(self) -> Path:
        """Parent of all profiler data."""
        return self.root / "profiler"

    def system_dir(self, node: str) -> Path:
        """System-metric chunks of one node."""
        return self.profiler_dir / "system" / safe_component(node)

    @property
    def horovod_timeline(self) -> Path:
        """A copy of Horovod's timeline (``HOROVOD_TIMELINE``, written by rank 0), made when rank 0's hook closes."""
        return self.profiler_dir / "horovod" / "timeline.json"

    def framework_dir(self, worker: str) -> Path:
        """Framework events (steps, phases, spans) of one worker."""
        return self.profiler_dir / "framework" / safe_component(worker)

    def detailed_dir(self, worker: str) -> Path:
        """Chrome traces, operator tables and pstats files of one worker's profiled window."""
        return self.profiler_dir / "detailed" / safe_component(worker)

    # --- rules and report ------------------------------------------------------------------------------
    @property
    def verdicts(self) -> Path:
        """Rule verdicts (JSON, rewritten atomically)."""
        return self.root / "rules" / "verdicts.json"

    @property
    def report(self) -> Path:
        """The self-contained HTML report."""
        return self.root / "report.html"
