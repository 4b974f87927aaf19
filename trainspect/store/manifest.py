"""The job manifest, the per-worker manifests and the end marker."""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import time
from pathlib import Path
from typing import Any

from trainspect.exceptions import RunDirectoryInUse
from trainspect.store.layout import FORMAT_VERSION, RunLayout
from trainspect.store.safe_files import load_json_bounded

__all__ = [
    "all_workers_ended",
    "check_run_directory",
    "claim_run_directory",
    "claim_worker",
    "create_temp_file",
    "mark_job_end",
    "rank_count",
    "read_manifest",
    "read_worker_manifests",
    "write_json_atomic",
    "write_text_atomic",
    "write_worker_manifest",
]


def create_temp_file(directory: Path, prefix: str) -> tuple[int, Path]:
    """Create ``<directory>/.<prefix>-<random>.tmp`` for writing; return its descriptor and path.

    Unlike :func:`tempfile.mkstemp` (always 0600), the file gets an ordinary new file's permissions: 0666
    less the umask (0644 under the usual 022), so the renamed file is as readable as any other the user writes.
    """
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        tmp = directory / f".{prefix}-{secrets.token_hex(6)}.tmp"
        try:
            return os.open(tmp, flags, 0o666), tmp
        except FileExistsError:
            continue


def write_text_atomic(path: Path, text: str, prefix: str | None = None) -> None:
    """Write ``text`` through a temporary file renamed into place; on any failure no temporary file is left.

    Args:
        path: the file to write.
        text: its new content.
        prefix: the temporary file's name prefix (default: the file's name).

    Raises:
        OSError: the file could not be written (disk full, no permission); ``path`` is unchanged.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = create_temp_file(path.parent, prefix or path.name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_json_atomic(path: Path, doc: Any) -> None:
    """Write JSON through a temporary file renamed into place (see :func:`write_text_atomic`)."""
    write_text_atomic(path, json.dumps(doc, indent=1, default=str))


def read_manifest(layout: RunLayout) -> dict[str, Any] | None:
    """Return the job manifest, or None when the directory has none (or it is unreadable)."""
    try:
        return load_json_bounded(layout.manifest)
    except (OSError, ValueError):
        return None


def check_run_directory(layout: RunLayout, job_id: str | None) -> None:
    """Refuse, before anything is written, a directory that holds another job's run.

    ``job_id=None`` (this job's id is not known yet): only a run that has ended is certainly another job's.

    Raises:
        RunDirectoryInUse: the directory's manifest names another job, or the job there has ended.
    """
    existing = read_manifest(layout)
    if existing is None:
        return
    other = job_id is not None and existing.get("job_id") != job_id
    if other or layout.end_marker.exists():
        state = "the run of another job" if other or job_id is None else "the finished run of this job"
        raise RunDirectoryInUse(
            f"{layout.root} already holds {state} (job_id {existing.get('job_id')!r}, "
            f"created {time.ctime(existing.get('created', 0))}); trainspect never merges or overwrites runs: "
            "choose a new out_dir"
        )


def claim_run_directory(layout: RunLayout, job_id: str, manifest: dict[str, Any]) -> None:
    """Create the job manifest, or join it when it belongs to the same job (the other ranks of a job join).

    The manifest is written to a temporary file and hard-linked into place, so it appears complete or not at all.

    Raises:
        RunDirectoryInUse: the directory holds another job's data; nothing is overwritten.
    """
    layout.root.mkdir(parents=True, exist_ok=True)
    doc = {"format_version": FORMAT_VERSION, "job_id": job_id, "created": time.time(), **manifest}
    fd, tmp = create_temp_file(layout.root, "trainspect")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, default=str)
        os.link(tmp, layout.manifest)
    except FileExistsError:
        check_run_directory(layout, job_id)
    finally:
        os.unlink(tmp)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OSError):
        return True
    return True


def claim_worker(layout: RunLayout, worker: str, **fields: Any) -> dict[str, Any] | None:
    """Create one worker's manifest for this process, unless another live process records that worker.

    The manifest is created exclusively (hard-linked into place); one left by a process that ended (it recorded its
    end, or it is gone from this host) is taken over.

    Returns:
        None when this process now holds the worker; else the manifest of the process that does.
    """
    path = layout.worker_manifest(worker)
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"worker": worker, "host": socket.gethostname(), "pid": os.getpid(), **fields}
    fd, tmp = create_temp_file(path.parent, path.name)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(doc, fh, indent=1, default=str)
        try:
            os.link(tmp, path)
            return None
        except FileExistsError:
            pass
        try:
            holder = load_json_bounded(path)
        except (OSError, ValueError):
            holder = {}
        mine = holder.get("pid") == os.getpid() and holder.get("host") == doc["host"]
        gone = holder.get("host") == doc["host"] and isinstance(holder.get("pid"), int) and not _alive(holder["pid"])
        if mine or gone or holder.get("end_time") is not None or not holder:
            os.replace(tmp, path)
            return None
        return holder
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)


def write_worker_manifest(layout: RunLayout, worker: str, **fields: Any) -> None:
    """Write (or update) one worker's manifest: host, node, pid, rank, start and end times."""
    path = layout.worker_manifest(worker)
    doc: dict[str, Any] = {}
    if path.exists():
        try:
            doc = load_json_bounded(path)
        except (OSError, ValueError):
            doc = {}
    doc.setdefault("worker", worker)
    doc.setdefault("host", socket.gethostname())
    doc.setdefault("pid", os.getpid())
    doc.update(fields)
    write_json_atomic(path, doc)


def mark_job_end(layout: RunLayout) -> None:
    """Write the end marker: readers then know the job is over."""
    layout.end_marker.write_text(f"{time.time():.6f}\n", encoding="utf-8")


def read_worker_manifests(layout: RunLayout) -> dict[str, dict[str, Any]]:
    """Return every worker manifest by worker name (unreadable ones are skipped)."""
    out: dict[str, dict[str, Any]] = {}
    if not layout.workers_dir.is_dir():
        return out
    for path in sorted(layout.workers_dir.glob("*.json")):
        try:
            doc = load_json_bounded(path)
        except (OSError, ValueError):
            continue
        out[str(doc.get("worker", path.stem))] = doc
    return out


def rank_count(manifest: dict[str, Any] | None, workers: dict[str, dict[str, Any]], tensor_workers: int) -> int:
    """The job's ranks: the most of the workers with tensors, those with a manifest, and the job's world size.

    With ``include_workers="one"`` (the default) only rank 0 records tensors, but every rank writes its worker
    manifest and the job manifest has the world size.
    """
    world = (manifest or {}).get("world_size")
    return max(tensor_workers, len(workers), world if type(world) is int else 0)


def all_workers_ended(layout: RunLayout, world_size: int) -> bool:
    """Whether ``world_size`` workers have recorded their end (the last one to close writes the end marker)."""
    ended = [w for w in read_worker_manifests(layout).values() if w.get("end_time") is not None]
    return len(ended) >= world_size
