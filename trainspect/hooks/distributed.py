"""Who this process is in a job: its rank, the world size, the job id and the node, whatever launcher started it.

The rank comes, in this order, from

1. the ``torch.distributed`` process group, once initialised (``mp.spawn``, Lightning's launchers, Ray Train,
   accelerate and DeepSpeed all initialise one before training); it is authoritative;
2. a launcher's variables: ``RANK``/``WORLD_SIZE`` (torchrun, accelerate, DeepSpeed's launcher, Ray), else
   Horovod's ``HOROVOD_RANK``/``HOROVOD_SIZE`` (``horovodrun``, what ``hvd.rank()`` returns), else Slurm's
   ``SLURM_PROCID``/``SLURM_NTASKS`` (``srun``);
3. nothing: a single process.

A hook built before its process group exists (a Lightning script, an ``mp.spawn`` worker, a Ray worker under
``trainspect run``) cannot know its rank yet: :func:`settle` returns None until it can (``final=False``), and the
collector opens the run at the first step, when the group is up. Ranks that disagree (``RANK=0`` in the environment
but rank 1 in the process group) are refused (:class:`RankConflict`) rather than mixed into one worker's files.

The job id, shared by every rank of one job, comes from ``TRAINSPECT_JOB_ID``, torchrun's run id, else the first
rank's proposal agreed through the process group's key-value store (no collective: ``compare_set``), else the
rendezvous address.

Reads ``torch.distributed`` only if the script imported it (never imports torch): the collector is framework-neutral.
"""

from __future__ import annotations

import hashlib
import logging
import multiprocessing
import socket
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainspect import env

__all__ = ["JobIdentity", "RankConflict", "settle", "process_group", "may_join_later", "close_with_process_group"]

log = logging.getLogger(__name__)

_STORE_KEY = "trainspect/job_id"


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
    source: str = "single process"
    """Where the rank came from: ``torch.distributed``, ``RANK/WORLD_SIZE``, ``SLURM_PROCID``, ``single process``."""

    @property
    def worker(self) -> str:
        """The worker name (``worker_<rank>``)."""
        return f"worker_{self.rank}"

    @property
    def chief(self) -> bool:
        """Whether this is rank 0."""
        return self.rank == 0


class RankConflict(Exception):
    """Two sources name different ranks for this process; the message names both."""


def process_group() -> Any:
    """``torch.distributed`` when the script imported it and its default process group is initialised, else None."""
    dist = sys.modules.get("torch.distributed")
    try:
        if dist is not None and dist.is_available() and dist.is_initialized():
            return dist
    except Exception:  # a half-torn-down group
        return None
    return None


def _launcher_rank() -> tuple[int, int, int, str] | None:
    """(rank, world size, local rank, source) from a launcher's variables, or None."""
    if env.RANK.is_set() and env.WORLD_SIZE.is_set():
        return env.RANK.get(), max(1, env.WORLD_SIZE.get()), env.LOCAL_RANK.get(), "RANK/WORLD_SIZE"
    if env.HOROVOD_RANK.is_set() and env.HOROVOD_SIZE.is_set():
        return env.HOROVOD_RANK.get(), max(1, env.HOROVOD_SIZE.get()), env.HOROVOD_LOCAL_RANK.get(), "HOROVOD_RANK"
    if env.SLURM_PROCID.is_set() and env.SLURM_NTASKS.get() > 1:
        return env.SLURM_PROCID.get(), env.SLURM_NTASKS.get(), env.SLURM_LOCALID.get(), "SLURM_PROCID/SLURM_NTASKS"
    return None


def _launcher_job_id(world_size: int) -> str | None:
    """A job id every rank derives alike from its launcher's variables, when there is one."""
    explicit = env.TRAINSPECT_JOB_ID.get()
    if explicit:
        return explicit
    run_id = env.TORCHELASTIC_RUN_ID.get()
    if run_id and run_id != "none":
        key = f"{run_id}|{env.MASTER_ADDR.get()}|{env.MASTER_PORT.get()}|{world_size}"
        return "dist-" + hashlib.sha256(key.encode()).hexdigest()[:24]
    return None


def _rendezvous_job_id(world_size: int) -> str:
    key = "|".join(
        str(v.get())
        for v in (
            env.MASTER_ADDR,
            env.MASTER_PORT,
            env.HOROVOD_GLOO_RENDEZVOUS_ADDR,
            env.HOROVOD_GLOO_RENDEZVOUS_PORT,
            env.SLURM_JOB_ID,
        )
    )
    key += f"|{world_size}"
    return "dist-" + hashlib.sha256(key.encode()).hexdigest()[:24]


def _store_job_id(dist: Any, fresh: str) -> str | None:
    """The job id agreed through the default group's store: the first rank to ask sets it (no collective)."""
    try:
        store = dist.distributed_c10d._get_default_store()
        agreed = store.compare_set(_STORE_KEY, "", "dist-" + fresh[:24])
    except Exception as exc:  # no such store (or API) here: fall back to the rendezvous address
        log.debug("trainspect: no job id from the process group's store: %s", exc)
        return None
    text = agreed.decode() if isinstance(agreed, bytes) else str(agreed)
    return text or None


def _node() -> str:
    return env.TRAINSPECT_NODE_ID.get() or socket.gethostname()


def _from_group(dist: Any, fresh: str) -> JobIdentity:
    rank, world = int(dist.get_rank()), int(dist.get_world_size())
    launcher = _launcher_rank()
    if launcher is not None and launcher[3] == "RANK/WORLD_SIZE" and (launcher[0], launcher[1]) != (rank, world):
        raise RankConflict(
            f"torch.distributed says rank {rank} of {world}, RANK={launcher[0]} WORLD_SIZE={launcher[1]} in the "
            "environment"
        )
    local = env.LOCAL_RANK.get() if env.LOCAL_RANK.is_set() else (launcher[2] if launcher else rank)
    job = _launcher_job_id(world) or (_store_job_id(dist, fresh) if world > 1 else None)
    job = job or (_rendezvous_job_id(world) if world > 1 else fresh)
    return JobIdentity(job, rank, local, world, _node(), "torch.distributed")


def settle(final: bool, fresh: str | None = None) -> JobIdentity | None:
    """Return this process's identity, or None while it may still change (``final=False``: no process group yet).

    ``final=True`` (the first step): whatever is known now is the answer; with no group and no launcher variables,
    a single process. ``fresh``: a new job's id, made beforehand (a compiled model's first forward pass calls this:
    no ``uuid`` call there).

    Raises:
        RankConflict: the process group and the environment name different ranks.
    """
    fresh = fresh or uuid.uuid4().hex
    dist = process_group()
    if dist is not None:
        return _from_group(dist, fresh)
    launcher = _launcher_rank()
    if launcher is not None and launcher[1] > 1:
        rank, world, local, source = launcher
        job = _launcher_job_id(world)
        if job is None and not final:
            return None  # the ranks agree on a job id through the process group, once there is one
        return JobIdentity(job or _rendezvous_job_id(world), rank, local, world, _node(), source)
    if not final:
        return None
    return JobIdentity(env.TRAINSPECT_JOB_ID.get() or fresh, 0, 0, 1, _node())


def may_join_later() -> bool:
    """Whether this process may still become a rank of a job: a launcher's variables, or a spawned child process."""
    hints = (
        env.RANK,
        env.WORLD_SIZE,
        env.LOCAL_RANK,
        env.MASTER_ADDR,
        env.MASTER_PORT,
        env.SLURM_PROCID,
        env.HOROVOD_RANK,
    )
    return any(v.is_set() for v in hints) or multiprocessing.parent_process() is not None


class _GroupEnd:
    """Callbacks run when the default process group is destroyed, before it is (one wrapper per process)."""

    def __init__(self, dist: Any) -> None:
        self.original = dist.destroy_process_group
        self.callbacks: list[Callable[[], None]] = []
        self.running = False

    def __call__(self, group: Any = None) -> Any:
        if group is None and not self.running:
            self.running = True
            try:
                callbacks, self.callbacks = self.callbacks, []
                for callback in reversed(callbacks):
                    try:
                        callback()
                    except Exception as exc:  # the job's teardown goes on whatever a hook does
                        log.warning("trainspect: closing a hook with its process group failed: %s", exc)
            finally:
                self.running = False
        return self.original(group)


def close_with_process_group(callback: Callable[[], None]) -> None:
    """Call ``callback`` when the default ``torch.distributed`` group is destroyed (``destroy_process_group()``).

    Ray Train, Lightning and most scripts destroy it when training ends; Ray then kills its workers, so no exit
    handler would close their hooks. The public ``destroy_process_group`` is wrapped once per process; the name in
    the modules and the training code that imported it before is pointed at the wrapper (:func:`_rebind_imported`).
    """
    dist = sys.modules.get("torch.distributed")
    if dist is None:
        return
    wrapper = getattr(dist, "destroy_process_group", None)
    if wrapper is None:
        return
    if not isinstance(wrapper, _GroupEnd):
        wrapper = _GroupEnd(dist)
        setattr(dist, "destroy_process_group", wrapper)  # noqa: B010
        c10d = sys.modules.get("torch.distributed.distributed_c10d")
        if c10d is not None and getattr(c10d, "destroy_process_group", None) is wrapper.original:
            setattr(c10d, "destroy_process_group", wrapper)  # noqa: B010
    _rebind_imported(wrapper.original, wrapper)  # each run: code imported since, another training function
    if callback not in wrapper.callbacks:
        wrapper.callbacks.append(callback)


def _rebind_imported(original: Callable[..., Any], wrapper: _GroupEnd) -> None:
    """Point ``destroy_process_group`` at ``wrapper`` in each module that imported ``original`` by that name.

    A script that imported it before its hook was made (``from torch.distributed import destroy_process_group`` at
    its top: the PyTorch DDP tutorial's style) would otherwise destroy the group without closing its hooks first:
    Ray's killed workers lose their last steps, and a gloo DDP rank can hang in PyTorch's teardown (the main thread
    frees the group holding the GIL while a gloo thread waits for the GIL to free a finished allreduce; closing the
    hooks first lets that thread finish). The modules' namespaces are searched, and those of the code on the call
    stack (the training function: ``mp.spawn`` runs the script's ``main`` with globals that are not its module's).
    A name bound under another name or kept elsewhere is not found.
    """
    spaces = [getattr(module, "__dict__", None) for module in list(sys.modules.values())]
    frame: Any = sys._getframe(1)
    while frame is not None:
        spaces.append(frame.f_globals)
        frame = frame.f_back
    for state in spaces:
        if isinstance(state, dict) and state.get("destroy_process_group") is original:
            state["destroy_process_group"] = wrapper
