"""Opening a run for one worker: its identity settled, the run directory and the worker's files claimed.

Never two processes into one worker's files: the worker's manifest is claimed exclusively
(:func:`~trainspect.store.manifest.claim_worker`), and a process whose sources name different ranks records
nothing. A refusal is one warning line naming both sides; training goes on unrecorded.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from trainspect import env
from trainspect.exceptions import RunDirectoryInUse
from trainspect.hooks.distributed import JobIdentity, RankConflict, may_join_later, settle
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import check_run_directory, claim_run_directory, claim_worker

__all__ = ["absolute_out_dir", "check_before_open", "settle_identity", "open_worker"]

log = logging.getLogger(__name__)


def absolute_out_dir(path: Path) -> Path:
    """``path`` made absolute now, so that a later ``os.chdir`` does not move the run.

    In a Ray worker, which Ray moves into its session directory before the training function runs, a relative
    ``out_dir`` is taken from the directory the job was started from (``PWD``), as a user reads it.
    """
    path = path.expanduser()
    if path.is_absolute():
        return path
    started = env.PWD.get()
    if env.RAY_RAYLET_PID.is_set() and started and Path(started).is_absolute() and Path(started).is_dir():
        resolved = Path(started) / path
        if resolved != Path.cwd() / path:
            log.info("trainspect: out_dir %s in a Ray worker is taken from %s (where the job started)", path, started)
        return resolved
    return Path.cwd() / path


def _early_job_id() -> str | None:
    """Return the job id when it is known before the run opens (``TRAINSPECT_JOB_ID``, a process group, torchrun)."""
    try:
        ident = settle(final=False)
    except RankConflict:
        return None
    return ident.job_id if ident is not None else env.TRAINSPECT_JOB_ID.get()


def check_before_open(layout: RunLayout, job_id: str | None) -> None:
    """At construction: refuse a directory that certainly holds another job's run.

    Certain when this job's id is known, when the run there has ended, or when this process shows no sign of
    becoming a rank of a job later (no launcher variables, not a spawned child): a plain script.

    Raises:
        RunDirectoryInUse: the directory holds another job's run.
    """
    known = job_id or _early_job_id()
    if known is None and not may_join_later():
        known = "a new job"
    check_run_directory(layout, known)


def settle_identity(layout: RunLayout, final: bool, job_id: str | None, fresh: str) -> JobIdentity | None:
    """Return this process's identity for ``layout``'s run (None: not yet); ranks that disagree are refused.

    A refusal returns an identity whose ``source`` starts with ``"refused"``: the caller records nothing.
    """
    try:
        ident = settle(final, fresh)
    except RankConflict as exc:
        log.warning(
            "trainspect: %s; this process records nothing into %s rather than mix two ranks' files "
            "(unset the stale variables, or let torch.distributed set them)",
            exc,
            layout.root,
        )
        return JobIdentity(job_id or "", 0, 0, 1, "", "refused: " + str(exc))
    if ident is not None and job_id:
        ident = JobIdentity(job_id, ident.rank, ident.local_rank, ident.world_size, ident.node, ident.source)
    return ident


def open_worker(
    layout: RunLayout, job_id: str, manifest: dict[str, Any], worker: str, ident: JobIdentity, tensors: bool
) -> bool:
    """Claim the run directory for ``job_id`` and ``worker``'s files for this process; False (warned) if refused."""
    if ident.source.startswith("refused"):
        return False
    try:
        claim_run_directory(layout, job_id, manifest)
    except RunDirectoryInUse as exc:
        log.warning("trainspect: %s; nothing is recorded, training goes on", exc)
        return False
    fields = {
        "node": ident.node,
        "rank": ident.rank,
        "local_rank": ident.local_rank,
        "world_size": ident.world_size,
        "rank_source": ident.source,
        "records_tensors": tensors,
        "start_time": time.time(),
    }
    holder = claim_worker(layout, worker, **fields)
    if holder is not None:
        log.warning(
            "trainspect: %s of %s is already recorded by pid %s on %s (rank %s from %s); this process (rank %s "
            "from %s) records nothing rather than mix two processes into one worker's files",
            worker,
            Path(layout.root),
            holder.get("pid"),
            holder.get("host"),
            holder.get("rank"),
            holder.get("rank_source", "its environment"),
            ident.rank,
            ident.source,
        )
        return False
    return True
