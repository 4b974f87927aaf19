"""What is missing or damaged in a run directory, found from the files that refer to each other.

Every file a job writes has a partner or a reference: a tensor data file its index, a worker folder its
``collections.json`` and its worker manifest, a node's profiler folder its ``.tsys`` files, an operator table its
Chrome trace, the rules the hook ran their ``rules/verdicts.json``. A file deleted from a finished run is found
through that partner and named in one line, so that no reader loses data silently. Checks that a running job could
fail for a moment (a file about to be written) run only once the job is over: its end marker exists, every worker
recorded its end, or nothing under the run changed for :data:`QUIET_S` seconds.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from trainspect.exceptions import DamagedFile
from trainspect.store.jsonfile import NUMBER, Obj, load_json
from trainspect.store.layout import RunLayout
from trainspect.store.run_writer import COLLECTIONS_FILE

__all__ = [
    "MANIFEST_SHAPE",
    "WORKER_SHAPE",
    "QUIET_S",
    "read_manifest",
    "job_over",
    "tensor_problems",
    "profiler_problems",
    "rules_problems",
    "run_problems",
]

QUIET_S = 5.0
"""A run whose files have not changed for this long is treated as over (a killed job)."""
MANIFEST_SHAPE = Obj(
    optional={
        "format_version": int,
        "job_id": str,
        "created": NUMBER,
        "world_size": int,
        "config": dict,
        "framework": str,
        "trainspect_version": str,
    },
)
WORKER_SHAPE = Obj(
    optional={
        "worker": str,
        "pid": int,
        "start_time": NUMBER,
        "end_time": NUMBER,
        "last_step": int,
        "world_size": int,
        "rank": int,
    }
)


def read_manifest(layout: RunLayout) -> tuple[dict[str, Any] | None, str | None]:
    """Return (the job manifest or None, a problem line or None)."""
    try:
        return load_json(layout.manifest, MANIFEST_SHAPE), None
    except FileNotFoundError:
        return None, None
    except DamagedFile as exc:
        return None, str(exc)


def _workers(layout: RunLayout) -> tuple[dict[str, dict[str, Any]], list[str]]:
    docs: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    if layout.workers_dir.is_dir():
        for path in sorted(layout.workers_dir.glob("*.json")):
            try:
                docs[path.stem] = load_json(path, WORKER_SHAPE)
            except (DamagedFile, FileNotFoundError) as exc:
                problems.append(str(exc))
    return docs, problems


def _newest_mtime(folders: list[Path]) -> float:
    newest = 0.0
    for folder in folders:
        if not folder.is_dir():
            continue
        for path in folder.rglob("*"):
            try:
                newest = max(newest, path.stat().st_mtime)
            except OSError:
                continue
    return newest


def job_over(layout: RunLayout) -> bool:
    """Whether the job is over: end marker, every worker's recorded end, or no change for :data:`QUIET_S` s."""
    if layout.end_marker.exists():
        return True
    workers, _problems = _workers(layout)
    if workers and all(w.get("end_time") is not None for w in workers.values()):
        return True
    folders = [layout.tensors_dir, layout.profiler_dir, layout.workers_dir]
    return time.time() - _newest_mtime(folders) > QUIET_S


_SHOWN = 5
"""More missing partners than this in one folder are reported as one line with a count."""


def _pairs(folder: Path, first: str, second: str, what: str, both: bool = True) -> list[str]:
    """Files ``first`` whose partner ``second`` (same ``{}`` part) is missing, and with ``both`` the other way round."""
    out: list[str] = []
    for mine, other in ((first, second), (second, first))[: 2 if both else 1]:
        head, tail = mine.split("{}")
        lines = []
        for path in sorted(folder.glob(mine.replace("{}", "*"))):
            key = path.name[len(head) : len(path.name) - len(tail)]
            partner = folder / other.format(key)
            if not partner.exists():
                lines.append(f"{partner} is missing ({path.name} is there): {what}")
        if len(lines) > _SHOWN:
            lines = [f"{len(lines):,} {other.replace('{}', '*')} files are missing (first: {lines[0]})"]
        out += lines
    return out


def tensor_problems(layout: RunLayout, over: bool | None = None) -> list[str]:
    """Missing or damaged manifests, tensor indexes, tensor data files and collection files."""
    if not layout.tensors_dir.is_dir() and not layout.workers_dir.is_dir() and not layout.manifest.exists():
        return []
    over = job_over(layout) if over is None else over
    manifest, problem = read_manifest(layout)
    problems = [problem] if problem else []
    workers, worker_problems = _workers(layout)
    problems += worker_problems
    if not over:
        return problems
    if manifest is None and problem is None:
        problems.append(f"{layout.manifest} (the job manifest) is missing")
    if not layout.end_marker.exists() and workers and all(w.get("end_time") is not None for w in workers.values()):
        problems.append(f"{layout.end_marker} is missing although every worker recorded its end")
    folders = sorted(p for p in layout.tensors_dir.iterdir() if p.is_dir()) if layout.tensors_dir.is_dir() else []
    for folder in folders:
        known = folder.name in workers or layout.worker_manifest(folder.name).exists()  # unreadable: named above
        problems += _tensor_folder_problems(layout, folder, known or not layout.workers_dir.is_dir())
    return problems


def _tensor_folder_problems(layout: RunLayout, folder: Path, has_worker_manifest: bool) -> list[str]:
    problems = _pairs(folder, "data-{}.bin", "index-{}.idx", "the tensors of that file cannot be located", both=False)
    if not (folder / COLLECTIONS_FILE).exists():
        problems.append(
            f"{folder / COLLECTIONS_FILE} is missing: collection membership is not known, the built-in "
            "collections' patterns are used"
        )
    if not has_worker_manifest:
        problems.append(f"{layout.worker_manifest(folder.name)} (the worker manifest) is missing")
    if not any(folder.glob("index-*.idx")) and not any(folder.glob("data-*.bin")):
        problems.append(f"{folder} holds no tensor index or data file: no step of {folder.name} can be read")
    return problems


def profiler_problems(profiler_root: Path, over: bool = True) -> list[str]:
    """Profiler folders left without their data files, operator tables without traces and the other way round."""
    if not over or not profiler_root.is_dir():
        return []
    problems: list[str] = []
    for sub, suffix, what in (("system", ".tsys", "system metrics"), ("framework", ".tfw", "framework metrics")):
        base = profiler_root / sub
        for folder in sorted(p for p in base.iterdir() if p.is_dir()) if base.is_dir() else []:
            if not any(folder.glob(f"*{suffix}")):
                problems.append(f"{folder} holds no {suffix} file: its {what} are missing")
    detailed = profiler_root / "detailed"
    for folder in sorted(p for p in detailed.iterdir() if p.is_dir()) if detailed.is_dir() else []:
        problems += _pairs(folder, "operators_{}.json", "trace_{}.json", "that profiled window is incomplete")
        problems += _pairs(folder, "python_{}.json", "python_{}.pstats", "that Python profile is incomplete")
    return problems


def rules_problems(layout: RunLayout, over: bool = True) -> list[str]:
    """A rules folder without its verdict file, or a hook given rules whose verdicts are missing."""
    if not over or layout.verdicts.exists():
        return []
    manifest, _problem = read_manifest(layout)
    config = (manifest or {}).get("config")
    rules = config.get("rules") if isinstance(config, dict) else None
    if layout.verdicts.parent.is_dir() or rules:
        return [f"{layout.verdicts} is missing: the verdicts of the rules evaluated during the run are lost"]
    return []


def run_problems(root: str | Path) -> list[str]:
    """Every problem of :func:`tensor_problems`, :func:`profiler_problems` and :func:`rules_problems`."""
    layout = RunLayout(root)
    over = job_over(layout)
    return tensor_problems(layout, over) + profiler_problems(layout.profiler_dir, over) + rules_problems(layout, over)
