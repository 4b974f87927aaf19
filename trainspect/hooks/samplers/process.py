"""CPU and memory of the training job's own processes: the workers and their children (DataLoader workers …).

Host-wide figures (:class:`~trainspect.hooks.samplers.cpu.CPUSampler`) count every process on the machine; on a
shared machine other jobs would be blamed on the training. This sampler sums only the job's process tree.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable

import psutil

from trainspect.hooks.samplers.base import Sampler

__all__ = ["ProcessTreeSampler"]

_TREE_REFRESH_S = 1.0
"""How often the roots are asked for again (the tree below them is listed at every sample)."""


class ProcessTreeSampler(Sampler):
    """``process_cpu_utilization_percent``, ``process_memory_used_bytes`` and ``process_count`` of the job.

    ``process_cpu_utilization_percent`` is the CPU time of the tree over the period as a share of all the host's
    cores, the scale of the host's ``cpu_utilization_percent`` (one busy core of 8 is 12.5%). Processes that
    appear between two readings count from their start; one that ends loses at most its last period.

    Args:
        roots: returns the root pids of the job (default: this process); their descendants are included.

    Example:
        >>> s = ProcessTreeSampler()
        >>> s.collect(); s.collect()
        >>> sorted(s.aggregate())
        ['process_count', 'process_cpu_utilization_percent', 'process_memory_used_bytes']
    """

    def __init__(self, roots: Callable[[], Iterable[int]] | None = None) -> None:
        self._roots = roots or (lambda: [os.getpid()])
        self._cores = psutil.cpu_count() or 1
        self._procs: dict[int, psutil.Process] = {}
        self._roots_listed = -_TREE_REFRESH_S
        self._root_pids: list[int] = []
        self._ppids = _ParentMap()
        self._prev: tuple[float, float, dict[int, float]] | None = None
        self._last: dict[str, float] = {}

    def _tree(self, now: float) -> dict[int, psutil.Process]:
        """The processes of the tree, listed at every sample (so short-lived DataLoader workers are seen)."""
        if now - self._roots_listed >= _TREE_REFRESH_S:
            self._roots_listed = now
            self._root_pids = sorted(set(self._roots()))
        procs: dict[int, psutil.Process] = {}
        for pid in self._ppids.descendants(self._root_pids):
            proc = self._procs.get(pid)
            try:
                procs[pid] = proc if proc is not None else psutil.Process(pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self._procs = procs
        return procs

    def collect(self) -> None:
        """Read the CPU times and resident memory of every process of the tree."""
        mono, wall = time.monotonic(), time.time()
        cpu: dict[int, float] = {}
        created: dict[int, float] = {}
        rss = 0.0
        for pid, proc in list(self._tree(mono).items()):
            try:
                with proc.oneshot():
                    times = proc.cpu_times()
                    cpu[pid] = float(times.user) + float(times.system)
                    rss += float(proc.memory_info().rss)
                    created[pid] = proc.create_time()
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._procs.pop(pid, None)
        if self._prev is not None:
            then_mono, then_wall, before = self._prev
            used = sum(_since(c, before.get(p), created[p] >= then_wall) for p, c in cpu.items())
            dt = max(mono - then_mono, 1e-9)
            self._last = {
                "process_cpu_utilization_percent": max(0.0, 100.0 * used / (dt * self._cores)),
                "process_memory_used_bytes": rss,
                "process_count": float(len(cpu)),
            }
        self._prev = (mono, wall, cpu)

    def pids(self) -> list[int]:
        """The pids of the tree at the last reading (the roots before the first one)."""
        return list(self._procs) or list(self._roots())

    def aggregate(self) -> dict[str, float]:
        """The last period's figures (empty before the second reading)."""
        return dict(self._last)


def _since(now: float, before: float | None, new: bool) -> float:
    """CPU seconds a process used in the period: the difference, or all of it when it started in the period."""
    if before is not None:
        return max(now - before, 0.0)
    return now if new else 0.0


class _ParentMap:
    """Parent pid of every process on the host, kept up to date cheaply: only new pids are read."""

    def __init__(self) -> None:
        self.parent: dict[int, int] = {}

    def descendants(self, roots: list[int]) -> list[int]:
        """The live roots and all their descendants."""
        current = set(psutil.pids())
        for gone in self.parent.keys() - current:
            del self.parent[gone]
        for pid in current - self.parent.keys():
            try:
                self.parent[pid] = psutil.Process(pid).ppid()
            except psutil.Error:
                continue
        children: dict[int, list[int]] = {}
        for pid, ppid in self.parent.items():
            children.setdefault(ppid, []).append(pid)
        out, todo, seen = [], [r for r in roots if r in current], set()
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                out.append(pid)
                todo.extend(children.get(pid, ()))
        return out
