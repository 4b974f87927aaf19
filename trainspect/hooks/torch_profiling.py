"""PyTorch adapters of the profiler: a DataLoader timer and the detailed/Python profiling window.

* :func:`install_dataloader_timer` patches ``torch.utils.data.dataloader._BaseDataLoaderIter.__next__`` so
  every DataLoader iterator reports its wait (and ``num_workers``) to the registered recorders, without
  the user changing anything. The patch is reference-counted: the first install patches, the last
  uninstall restores the original. (The patch is process-wide by nature; the registry lives in one
  private object created at import, which starts nothing.) It also starts, per recorder, the
  :class:`~trainspect.hooks.torch_sync_timer.SyncTimer` that records each backward pass's wait for the other
  ranks (``backward_sync`` spans), and the uninstall closes it.
* :class:`TorchProfilingWindow` runs ``torch.profiler`` over the configured detailed window (top operators
  as JSON, a Chrome trace Perfetto opens) and cProfile over the Python window (top functions as JSON, a
  ``.pstats`` file), into ``RunLayout.detailed_dir(worker)`` (format: :mod:`trainspect.profiler.detailed`).
"""

from __future__ import annotations

import cProfile
import logging
import os
import pstats
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
from torch.utils.data import dataloader as _dl

from trainspect.hooks.framework_metrics import FrameworkRecorder
from trainspect.hooks.torch_sync_timer import SyncTimer
from trainspect.profiler.config import ProfileRange, ProfilerConfig
from trainspect.profiler.detailed import write_table
from trainspect.store.layout import RunLayout

__all__ = ["install_dataloader_timer", "uninstall_dataloader_timer", "TorchProfilingWindow"]

logger = logging.getLogger(__name__)
_TOP = 100


class _Patch:
    """The state of the DataLoader patch: the original method and the recorders it reports to."""

    def __init__(self, original: Callable[[Any], Any]) -> None:
        self.recorders: list[FrameworkRecorder] = []
        self.sync_timers: dict[int, SyncTimer] = {}  # id(recorder) -> its backward synchronisation timer
        self.original = original
        self.warned = False

    def report(self, it: Any, start: float, end: float) -> None:
        workers = int(getattr(it, "_num_workers", 0) or 0)
        batch = _batch_size(it)
        for rec in tuple(self.recorders):
            try:
                rec.set_dataloader(workers, batch)
                rec.record_span("dataloader", start, end, None)
            except Exception:  # never raise into the training loop
                if not self.warned:
                    self.warned = True
                    logger.warning("trainspect: dataloader timing failed", exc_info=True)

    def timed(self) -> Callable[[Any], Any]:
        """The patched ``__next__``: the original, timed (StopIteration and user errors pass through untimed)."""
        original = self.original

        def __next__(it: Any) -> Any:  # noqa: N807
            start = time.time()
            item = original(it)
            self.report(it, start, time.time())
            return item

        __next__.trainspect_timer = self  # type: ignore[attr-defined]
        return __next__


_LOCK = threading.Lock()  # installs and uninstalls, from any thread


def _installed() -> _Patch | None:
    return getattr(_dl._BaseDataLoaderIter.__next__, "trainspect_timer", None)


def _batch_size(it: Any) -> int | None:
    """The batch size of a DataLoader iterator's loader (None without a batch sampler: an IterableDataset's own)."""
    size = getattr(getattr(it, "_index_sampler", None), "batch_size", None)
    return size if isinstance(size, int) and size > 0 else None


def install_dataloader_timer(recorder: FrameworkRecorder) -> None:
    """Time every DataLoader ``__next__`` and each backward pass's synchronisation wait for ``recorder``.

    The DataLoader is patched on the first install; the recorder's :class:`SyncTimer` starts here.
    """
    with _LOCK:
        patch = _installed()
        if patch is None:
            patch = _Patch(_dl._BaseDataLoaderIter.__next__)
            _dl._BaseDataLoaderIter.__next__ = patch.timed()  # type: ignore[method-assign,assignment]
        if recorder in patch.recorders:
            return
        patch.recorders.append(recorder)
        timer = patch.sync_timers[id(recorder)] = SyncTimer(recorder)
        timer.start()


def uninstall_dataloader_timer(recorder: FrameworkRecorder) -> None:
    """Stop reporting to ``recorder`` (its :class:`SyncTimer` closes); the last uninstall restores the original."""
    with _LOCK:
        patch = _installed()
        if patch is None or recorder not in patch.recorders:
            return
        patch.recorders.remove(recorder)
        timer = patch.sync_timers.pop(id(recorder), None)
        if timer is not None:
            timer.close()
        if not patch.recorders:
            _dl._BaseDataLoaderIter.__next__ = patch.original  # type: ignore[method-assign,assignment]


class _Runner:
    """One profiler (detailed or Python) following one :class:`ProfileRange`."""

    def __init__(self, rng: ProfileRange, begin: Callable[[], Any], finish: Callable[[Any, int, int], None]) -> None:
        self.rng, self._begin, self._finish = rng, begin, finish
        self.handle: Any = None
        self.first_step: int | None = None
        self.start_step = 0
        self.created = time.time()
        self.done = False
        self.last_step: int | None = None

    def in_window(self, step: int) -> bool:
        if self.rng.is_time_window:
            return self.rng.contains_time(time.time(), self.created)
        return self.rng.contains_step(step, self.first_step if self.first_step is not None else step)

    def step_start(self, step: int) -> None:
        if self.first_step is None:
            self.first_step = step
        if self.handle is None and not self.done and self.in_window(step):
            self.handle, self.start_step = self._begin(), step

    def step_end(self, step: int) -> None:
        if self.handle is None:
            return
        self.last_step = step
        last = self.rng.duration is None and self.rng.is_time_window
        if last or not self.in_window(step + 1):
            self.stop(step + 1)

    def stop(self, end_step: int) -> None:
        handle, self.handle, self.done = self.handle, None, True
        if handle is not None:
            self._finish(handle, self.start_step, end_step)


class TorchProfilingWindow:
    """Detailed (torch.profiler) and Python (cProfile) profiling of the configured step or time windows.

    Args:
        run_dir: the run directory.
        worker: the worker's name.
        config: the profiler config; without ``framework_profile_params`` nothing is profiled.
    """

    def __init__(self, run_dir: str | os.PathLike[str], worker: str, config: ProfilerConfig | None = None) -> None:
        self.worker = worker
        self.directory = RunLayout(run_dir).detailed_dir(worker)
        params = (config or ProfilerConfig()).framework_profile_params
        self._runners: list[_Runner] = []
        self._timer = time.process_time if params and params.cprofile_timer == "cpu_time" else None
        if params is not None and params.detailed is not None:
            self._runners.append(_Runner(params.detailed, self._begin_torch, self._finish_torch))
        if params is not None and params.python is not None:
            self._runners.append(_Runner(params.python, self._begin_python, self._finish_python))

    def on_step_start(self, global_step: int) -> None:
        """A step begins: start a profiler whose window opens here."""
        for runner in self._runners:
            self._guard(runner, runner.step_start, global_step)

    def on_step_end(self, global_step: int) -> None:
        """A step ended: stop and write a profiler whose window closes here."""
        for runner in self._runners:
            self._guard(runner, runner.step_end, global_step)

    def close(self) -> None:
        """Stop and write any profiler still running."""
        for runner in self._runners:
            if runner.handle is not None:
                last = runner.last_step if runner.last_step is not None else runner.start_step
                self._guard(runner, runner.stop, last + 1)

    def _guard(self, runner: _Runner, fn: Callable[[int], None], step: int) -> None:
        try:
            fn(step)
        except Exception:
            runner.done, runner.handle = True, None
            logger.warning("trainspect: profiling window of %s failed and is off", self.worker, exc_info=True)

    # --- torch.profiler ------------------------------------------------------------------------------
    def _begin_torch(self) -> Any:
        activities = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        prof = torch.profiler.profile(activities=activities, record_shapes=False)
        prof.__enter__()
        return prof

    def _finish_torch(self, prof: Any, start: int, end: int) -> None:
        prof.__exit__(None, None, None)
        self.directory.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(self.directory / f"trace_{start}-{end}.json"))
        rows: list[dict[str, Any]] = []
        averages = list(prof.key_averages())
        for device, self_attr, total_attr in (
            ("cpu", "self_cpu_time_total", "cpu_time_total"),
            ("gpu", "self_device_time_total", "device_time_total"),
        ):
            found = [(e, float(getattr(e, self_attr, 0.0) or 0.0)) for e in averages]
            found = sorted((p for p in found if p[1] > 0), key=lambda p: -p[1])[:_TOP]
            rows += [
                {
                    "device": device,
                    "name": e.key,
                    "calls": int(e.count),
                    "self_time_us": t,
                    "total_time_us": float(getattr(e, total_attr, 0.0) or 0.0),
                }
                for e, t in found
            ]
        write_table(self.directory, "operators", self.worker, start, end, rows)

    # --- cProfile ------------------------------------------------------------------------------------
    def _begin_python(self) -> Any:
        prof = cProfile.Profile(self._timer) if self._timer else cProfile.Profile()
        prof.enable()
        return prof

    def _finish_python(self, prof: Any, start: int, end: int) -> None:
        prof.disable()
        self.directory.mkdir(parents=True, exist_ok=True)
        prof.dump_stats(str(self.directory / f"python_{start}-{end}.pstats"))
        stats = _for_the_job(pstats.Stats(prof).stats)  # type: ignore[attr-defined]
        top = sorted(stats.items(), key=lambda kv: -kv[1][2])[:_TOP]
        rows = [
            {
                "function": func,
                "filename": filename,
                "line": int(line),
                "calls": int(nc),
                "total_time_s": float(tt),
                "cumulative_time_s": float(ct),
            }
            for (filename, line, func), (_cc, nc, tt, ct, _callers) in top
        ]
        write_table(self.directory, "python", self.worker, start, end, rows)


def _for_the_job(stats: dict[Any, Any]) -> dict[Any, Any]:
    """Each function's own time less the share it spent for trainspect or the profilers (the .pstats keeps all).

    What a profiler calls is the profiler's, through any number of callers (``getattr`` under torch.profiler's
    parser); what trainspect calls is trainspect's for two levels (``json.dumps``, ``pathlib`` under its writers),
    not further: its wrappers (the DataLoader timer) call the training's own code.
    """
    from trainspect.profiler.analysis import is_own_frame, is_profiler_frame

    own = {key: is_own_frame(key[2], key[0]) for key in stats}
    prof = _shares(stats, {key: 1.0 if is_profiler_frame(key[2], key[0]) else 0.0 for key in stats}, 8)
    ours = _shares(stats, {key: 1.0 if own[key] and not prof[key] else 0.0 for key in stats}, 2)
    return {
        key: (cc, nc, tt if own[key] else tt * max(0.0, 1.0 - prof[key] - ours[key]), ct, callers)
        for key, (cc, nc, tt, ct, callers) in stats.items()
    }


def _shares(stats: dict[Any, Any], seed: dict[Any, float], depth: int) -> dict[Any, float]:
    """Per function, the share of its calls (by cumulative time) made, through up to ``depth`` callers, by seeds."""
    share = dict(seed)
    for _ in range(depth):
        share = {key: seed[key] or _caller_share(stats[key][4], share) for key in stats}
    return share


def _caller_share(callers: dict[Any, Any], share: dict[Any, float]) -> float:
    total = sum(v[3] for v in callers.values())
    if total <= 0:
        return 0.0
    return sum(v[3] * share.get(c, 0.0) for c, v in callers.items()) / total
