"""Who this process is in a job: job id, rank, worker and node names, from torchrun's environment."""

from __future__ import annotations

import hashlib
import socket
import uuid
from dataclasses import dataclass

from trainspect import env

__all__ = ["JobIdentity", "identity"]


@dataclass(frozen=True)
class JobIdentity:
    """The place of this process in the job.

    Example:
        >>> JobIdentity("j", 1, 0, 2, "n").worker
        'worker_1'
    """

    job_id: str
    rank: int
    local_rank: int
    world_size: int
    node: str

    @property
    def worker(self) -> str:
        """The worker name (``worker_<rank>``)."""
        return f"worker_{self.rank}"

    @property
    def chief(self) -> bool:
        """Whether this is rank 0."""
        return self.rank == 0


def _job_id(world_size: int) -> str:
    explicit = env.TRAINSPECT_JOB_ID.get()
    if explicit:
        return explicit
    run_id = env.TORCHELASTIC_RUN_ID.get()
    if world_size > 1 or (run_id and run_id != "none"):
        key = f"{run_id}|{env.MASTER_ADDR.get()}|{env.MASTER_PORT.get()}|{world_size}"
        return "dist-" + hashlib.sha256(key.encode()).hexdigest()[:24]
    return uuid.uuid4().hex


def identity() -> JobIdentity:
    """Return this process's identity: every rank of one torchrun job derives the same job id."""
    world = max(1, env.WORLD_SIZE.get())
    node = env.TRAINSPECT_NODE_ID.get() or socket.gethostname()
    return JobIdentity(_job_id(world), env.RANK.get(), env.LOCAL_RANK.get(), world, node)
