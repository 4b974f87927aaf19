"""Which reader a directory needs: a trainspect run directory or an smdebug trial; refuses what holds no run."""

from __future__ import annotations

from pathlib import Path

from trainspect.exceptions import NotARunDirectory
from trainspect.store.layout import RunLayout
from trainspect.store.smdebug_source import SmdebugSource
from trainspect.store.source import TrainspectSource

__all__ = ["holds_run", "detect_source"]


def holds_run(path: Path) -> bool:
    """Whether ``path`` holds anything a job records: manifest, tensors, profiler data, verdicts, smdebug index.

    Example:
        >>> import tempfile
        >>> holds_run(Path(tempfile.mkdtemp()))
        False
    """
    layout = RunLayout(path)
    if TrainspectSource.detect(path) or SmdebugSource.detect(path) or layout.end_marker.exists():
        return True
    marks = (
        layout.profiler_dir,
        layout.verdicts.parent,
        layout.workers_dir,
        path / "system",
        path / "framework",
        path / "profiler-output",
    )
    return any(p.is_dir() for p in marks)


def detect_source(path: Path) -> TrainspectSource | SmdebugSource:
    """The reader of a run directory (trainspect's, or an smdebug trial).

    Raises:
        FileNotFoundError: ``path`` does not exist.
        NotARunDirectory: ``path`` is a file, or a directory that holds no run.
    """
    if not path.exists():
        raise FileNotFoundError(f"create_trial: {path} does not exist")
    if not path.is_dir():
        raise NotARunDirectory(f"create_trial: {path} is a file, not a run directory")
    if not holds_run(path):
        raise NotARunDirectory(
            f"create_trial: {path} holds no run (no trainspect.json, tensors/, profiler/ or smdebug index/ in it)"
        )
    if SmdebugSource.detect(path) and not TrainspectSource.detect(path):
        return SmdebugSource(path)
    return TrainspectSource(path)
