"""Profiler analyses the HTML report and the TensorBoard plugin render (they compute; callers render).

Every function takes a :class:`~trainspect.profiler.data.ProfilerData` (``load_profiler_data(run_dir)``)
and returns plain data: a dict or a DataFrame whose columns are listed in its docstring. Times are epoch
seconds, durations seconds, unless a column name says otherwise. Empty input gives an empty result with
the same columns, never an error.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from trainspect.modes import ModeKeys
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.detailed import PYTHON_COLUMNS
from trainspect.profiler.metrics import CATALOGUE

__all__ = [
    "job_statistics",
    "utilization_statistics",
    "step_statistics",
    "step_histogram",
    "phase_ratios",
    "top_operators",
    "python_hotspots",
    "is_own_frame",
    "is_profiler_frame",
    "dataloader_statistics",
    "training_loader",
    "timed_step_counts",
    "training_loader_of",
    "cuda_memory_statistics",
]

_OWN_FILES = re.compile(
    r"[/\\](site-packages|dist-packages)[/\\]trainspect[/\\]|[/\\]torch[/\\](profiler|autograd[/\\]profiler)"
    r"|[/\\](cProfile|profile|pstats)\.py$"
)
_OWN_BUILTINS = re.compile(r"_lsprof|profiler|kineto|_itt|torch\._C\._autograd\.", re.IGNORECASE)
_PACKAGE_DIR = str(Path(__file__).resolve().parent.parent)


def job_statistics(data: ProfilerData) -> dict[str, Any]:
    """Job start, end and phases over every worker.

    Returns:
        ``start``, ``end``, ``duration_s`` (from the job's start: see :meth:`ProfilerData.start_time`), the
        ``process_start`` of the earliest process when known and ``before_job_s``, the time its process ran before
        the job began (a notebook's idle kernel, an earlier run of the same script; 0 for a script's first run);
        with steps also ``training_loop_start``, ``training_loop_end``,
        ``initialization_s``, ``training_loop_s``, ``finalization_s`` and their ``*_percent`` of the job
        (negative values clamped to 0; finalization is ``None`` until a worker closed). Empty dict when no
        data.
    """
    start, end = data.start_time(), data.end_time()
    if start is None or end is None:
        return {}
    out: dict[str, Any] = {"start": start, "end": end, "duration_s": end - start}
    procs = [t.process_start for t in data.framework.values() if t.process_start is not None]
    if procs:
        out["process_start"] = min(procs)
        out["before_job_s"] = max(start - min(procs), 0.0)
    tabs = [t for t in data.framework.values() if t.step_count]
    if not tabs:
        return out
    loop_start = min(float(t.steps["start"][0]) for t in tabs)
    loop_end = max(float(t.steps["end"].max()) for t in tabs)
    closes = [t.close_time for t in data.framework.values() if t.close_time is not None]
    phases = {
        "initialization_s": max(loop_start - start, 0.0),
        "training_loop_s": max(loop_end - loop_start, 0.0),
        "finalization_s": max(max(closes) - loop_end, 0.0) if closes else None,
    }
    out.update(training_loop_start=loop_start, training_loop_end=loop_end, **phases)
    total = out["duration_s"] or 1.0
    for key, value in phases.items():
        out[key.replace("_s", "_percent")] = None if value is None else 100.0 * value / total
    return out


def utilization_statistics(data: ProfilerData) -> pd.DataFrame:
    """Per node and metric: ``node, metric, unit, min, max, mean, p50, p90, p95, p99, samples``.

    ``metric`` is the metric key (``cpu0_utilization_percent``…) plus ``cpu_total_utilization_percent``
    (mean over cores) and ``gpu_total_utilization_percent`` (mean over GPUs) per row; ``unit`` is the one the
    metric catalogue declares (:mod:`trainspect.profiler.metrics`), read from the key's suffix for other keys.
    """
    rows = []
    for node, arr in data.system.items():
        series = {k: arr.values[:, i].astype(np.float64) for i, k in enumerate(arr.keys)}
        if arr.cpu_cores:
            series["cpu_total_utilization_percent"] = arr.cpu_total()
        if arr.gpus:
            gpu = arr.matrix([f"gpu{g}_utilization_percent" for g in arr.gpus]).astype(np.float64)
            series["gpu_total_utilization_percent"] = np.nanmean(gpu, axis=1)
        for key, v in series.items():
            v = v[np.isfinite(v)]
            if not len(v):
                continue
            p50, p90, p95, p99 = (float(x) for x in np.percentile(v, [50, 90, 95, 99]))
            rows.append(
                [
                    node,
                    key,
                    CATALOGUE.describe(key).unit,
                    float(v.min()),
                    float(v.max()),
                    float(v.mean()),
                    p50,
                    p90,
                    p95,
                    p99,
                    len(v),
                ]
            )
    cols = ["node", "metric", "unit", "min", "max", "mean", "p50", "p90", "p95", "p99", "samples"]
    return pd.DataFrame(rows, columns=cols)


def _steps(data: ProfilerData) -> pd.DataFrame:
    frames = [t.steps_df() for t in data.framework.values() if t.step_count]
    cols = ["worker", "mode", "mode_step", "global_step", "start", "end", "duration"]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=cols)


def step_statistics(data: ProfilerData) -> pd.DataFrame:
    """Per worker and mode: ``worker, mode, count, mean, min, p50, p95, p99, max, between_mean``.

    Durations in seconds; ``between_mean`` is the mean time from one step's end to the next one's start.
    """
    rows = []
    for (worker, mode), grp in _steps(data).groupby(["worker", "mode"], sort=True):
        d = grp["duration"].to_numpy(dtype=np.float64)
        s = grp.sort_values("start")
        gaps = (s["start"].to_numpy()[1:] - s["end"].to_numpy()[:-1]) if len(s) > 1 else np.zeros(0)
        p50, p95, p99 = (float(x) for x in np.percentile(d, [50, 95, 99]))
        rows.append(
            [
                worker,
                mode,
                len(d),
                float(d.mean()),
                float(d.min()),
                p50,
                p95,
                p99,
                float(d.max()),
                float(gaps.mean()) if len(gaps) else float("nan"),
            ]
        )
    cols = ["worker", "mode", "count", "mean", "min", "p50", "p95", "p99", "max", "between_mean"]
    return pd.DataFrame(rows, columns=cols)


def step_histogram(data: ProfilerData, bins: int = 50) -> pd.DataFrame:
    """Step-duration histogram per worker and mode: ``worker, mode, bin_start, bin_end, count`` (seconds)."""
    rows = []
    for (worker, mode), grp in _steps(data).groupby(["worker", "mode"], sort=True):
        counts, edges = np.histogram(grp["duration"].to_numpy(dtype=np.float64), bins=bins)
        rows += [[worker, mode, float(edges[i]), float(edges[i + 1]), int(c)] for i, c in enumerate(counts)]
    return pd.DataFrame(rows, columns=["worker", "mode", "bin_start", "bin_end", "count"])


def phase_ratios(data: ProfilerData) -> dict[str, dict[str, float]]:
    """Where the time went, in percent.

    Returns:
        ``{"modes": {"train", "eval", "predict", "other"}}`` — share of the training loop (first step start
        to last step end, summed over workers) spent in steps of each mode; ``other`` is time between steps.
        ``{"spans": {"forward", "backward", "optimizer", "dataloader", "other"}}`` — share of step time plus
        dataloader time; ``other`` is step time outside forward, backward and optimizer spans.
        Empty dicts when nothing was recorded.
    """
    modes: dict[str, float] = {}
    spans = {"forward": 0.0, "backward": 0.0, "optimizer": 0.0, "dataloader": 0.0}
    loop = step_total = 0.0
    for tab in data.framework.values():
        if tab.step_count:
            loop += float(tab.steps["end"].max() - tab.steps["start"].min())
            dur = tab.steps["end"] - tab.steps["start"]
            step_total += float(dur.sum())
            for m in np.unique(tab.steps["mode"]):
                name = ModeKeys(int(m)).name.lower()
                modes[name] = modes.get(name, 0.0) + float(dur[tab.steps["mode"] == m].sum())
        for code, name in ((1, "forward"), (2, "backward"), (3, "optimizer"), (4, "dataloader")):
            sel = tab.spans["kind"] == code
            spans[name] += float((tab.spans["end"][sel] - tab.spans["start"][sel]).sum())
    out: dict[str, dict[str, float]] = {"modes": {}, "spans": {}}
    if loop > 0:
        out["modes"] = {k: 100.0 * v / loop for k, v in modes.items()}
        out["modes"]["other"] = max(0.0, 100.0 - sum(out["modes"].values()))
    other = max(step_total - spans["forward"] - spans["backward"] - spans["optimizer"], 0.0)
    denom = step_total + spans["dataloader"]
    if denom > 0:
        out["spans"] = {k: 100.0 * v / denom for k, v in {**spans, "other": other}.items()}
    return out


def top_operators(data: ProfilerData, device: str | None = None, n: int = 20) -> pd.DataFrame:
    """Most expensive operators of the detailed windows, by self time.

    Args:
        data: the run's profiler data.
        device: ``"cpu"``, ``"gpu"`` or ``None`` for both.
        n: rows per (worker, device).

    Returns:
        Columns ``worker, device, name, calls, self_time_us, total_time_us, percent`` (share of the device's
        self time, summed over the windows), sorted by ``self_time_us`` descending.
    """
    ops = data.operators
    cols = ["worker", "device", "name", "calls", "self_time_us", "total_time_us", "percent"]
    if ops.empty:
        return pd.DataFrame(columns=cols)
    if device is not None:
        ops = ops[ops["device"] == device]
    agg = ops.groupby(["worker", "device", "name"], as_index=False)[["calls", "self_time_us", "total_time_us"]].sum()
    agg["percent"] = 100.0 * agg["self_time_us"] / agg.groupby(["worker", "device"])["self_time_us"].transform("sum")
    agg = agg.sort_values("self_time_us", ascending=False)
    return agg.groupby(["worker", "device"], sort=False).head(n).reset_index(drop=True)[cols]


def is_own_frame(function: str, filename: str) -> bool:
    """Whether a profiled frame is trainspect's or the profilers' own (cProfile, torch.profiler), not the job's.

    Example:
        >>> is_own_frame("_parse_kineto_results", "/x/site-packages/torch/autograd/profiler.py")
        True
        >>> is_own_frame("<built-in method torch._C._autograd._disable_profiler>", "~")
        True
        >>> is_own_frame("forward", "/home/me/train.py")
        False
    """
    return str(filename).startswith(_PACKAGE_DIR) or is_profiler_frame(function, filename)


def is_profiler_frame(function: str, filename: str) -> bool:
    """Whether a profiled frame is a profiler's own (cProfile, torch.profiler) or trainspect's installed copy."""
    name = str(filename)
    if name in ("~", ""):
        return bool(_OWN_BUILTINS.search(str(function)))
    return bool(_OWN_FILES.search(name))


def python_hotspots(data: ProfilerData, n: int = 20, include_own: bool = False) -> pd.DataFrame:
    """Functions with the most own time in the Python-profiled windows.

    Args:
        data: the run's profiler data.
        n: rows per worker.
        include_own: keep trainspect's and the profilers' own frames (left out by default: they are the cost of
            measuring, not of the training).

    Returns:
        Columns of ``detailed.PYTHON_COLUMNS`` minus the window (``worker, function, filename, line, calls,
        total_time_s, cumulative_time_s``), summed over windows, top ``n`` per worker by ``total_time_s``.
    """
    stats = data.python_stats
    cols = [c for c in PYTHON_COLUMNS if c not in ("start_step", "end_step")]
    if not stats.empty and not include_own:
        own = [is_own_frame(f, p) for f, p in zip(stats["function"], stats["filename"], strict=True)]
        stats = stats[~np.asarray(own, dtype=bool)]
    if stats.empty:
        return pd.DataFrame(columns=cols)
    keys = ["worker", "function", "filename", "line"]
    agg = stats.groupby(keys, as_index=False)[["calls", "total_time_s", "cumulative_time_s"]].sum()
    agg = agg.sort_values("total_time_s", ascending=False)
    return agg.groupby("worker", sort=False).head(n).reset_index(drop=True)[cols]


def _train_waits(tab: FrameworkTables) -> np.ndarray:
    """Which dataloader waits fed TRAIN steps: the step a wait lies in, else the next one to start."""
    sel = tab.spans["kind"] == 4
    starts, ends = tab.spans["start"][sel], tab.spans["end"][sel]
    if not tab.step_count:
        return np.ones(len(starts), dtype=bool)
    s_start, s_end, modes = tab.steps["start"], tab.steps["end"], tab.steps["mode"]
    before = np.searchsorted(s_start, starts, side="right") - 1
    inside = (before >= 0) & (s_end[np.clip(before, 0, None)] >= ends)
    owner = np.where(inside, before, before + 1)
    known = owner < len(s_start)
    train = np.zeros(len(starts), dtype=bool)
    train[known] = modes[owner[known]] == int(ModeKeys.TRAIN)
    return train


def _most_common(values: np.ndarray) -> int | None:
    values = values[values >= 0]
    if not len(values):
        return None
    uniq, counts = np.unique(values.astype(np.int64), return_counts=True)
    return int(uniq[int(np.argmax(counts))])


def training_loader_of(tab: FrameworkTables) -> dict[str, int | None] | None:
    """The loader one worker's TRAIN steps drew from: ``{"num_workers", "batch_size"}`` (None: no waits recorded).

    Not the loader that ran last (a validation loader with 0 workers after a training loader with 4): the waits
    that fed TRAIN steps decide; a run without TRAIN steps gives its loaders' most common values.
    """
    sel = tab.spans["kind"] == 4
    if not sel.any():
        return None
    train = _train_waits(tab)
    pick = train if train.any() else np.ones(len(train), dtype=bool)
    workers = _most_common(tab.spans["workers"][sel][pick])
    batch: int | None = None
    if tab.loaders:
        times = np.array([e["time"] for e in tab.loaders])
        sizes = np.array([e["batch_size"] if isinstance(e.get("batch_size"), int) else -1 for e in tab.loaders])
        at = np.searchsorted(times, tab.spans["start"][sel][pick], side="right") - 1
        batch = _most_common(sizes[at[at >= 0]])
    return {"num_workers": workers, "batch_size": batch}


def timed_step_counts(data: ProfilerData) -> dict[str, int]:
    """Timed steps per mode (the most of any worker): ``{"TRAIN": 300, "EVAL": 3}``, never added up.

    GLOBAL (no mode set) is counted only when no other mode has steps.
    """
    counts: dict[str, int] = {}
    for table in data.framework.values():
        modes = np.asarray(table.steps["mode"])
        for mode in ModeKeys:
            n = int(np.count_nonzero(modes == int(mode.value)))
            counts[mode.name] = max(counts.get(mode.name, 0), n)
    named = ("TRAIN", "EVAL", "PREDICT")
    if any(counts.get(m) for m in named):
        counts.pop("GLOBAL", None)
    return {m: counts[m] for m in (*named, "GLOBAL") if counts.get(m)}


def training_loader(data: ProfilerData) -> dict[str, int | None] | None:
    """The training loader's ``num_workers`` and ``batch_size`` (per worker process; the chief's when they differ).

    None when no dataloader wait was recorded (no profiler, or a loop that is not fed by a DataLoader).
    """
    for worker in sorted(data.framework):
        found = training_loader_of(data.framework[worker])
        if found is not None:
            return found
    return None


def dataloader_statistics(data: ProfilerData) -> pd.DataFrame:
    """Per worker: ``worker, num_workers, count, mean_s, p50_s, p95_s, max_s, total_s, loop_percent``.

    ``loop_percent`` is the dataloader wait as a share of the worker's training loop; ``num_workers`` is the
    training loader's (:func:`training_loader_of`).
    """
    rows = []
    for worker, tab in data.framework.items():
        sel = tab.spans["kind"] == 4
        if not sel.any():
            continue
        d = (tab.spans["end"] - tab.spans["start"])[sel]
        loop = float(tab.steps["end"].max() - tab.steps["start"].min()) if tab.step_count else float("nan")
        loader = training_loader_of(tab) or {}
        rows.append(
            [
                worker,
                loader.get("num_workers"),
                len(d),
                float(d.mean()),
                float(np.percentile(d, 50)),
                float(np.percentile(d, 95)),
                float(d.max()),
                float(d.sum()),
                100.0 * float(d.sum()) / loop if loop and loop > 0 else float("nan"),
            ]
        )
    cols = ["worker", "num_workers", "count", "mean_s", "p50_s", "p95_s", "max_s", "total_s", "loop_percent"]
    return pd.DataFrame(rows, columns=cols)


_CUDA_MEMORY = re.compile(r"^gpu(\d+)_memory_(allocated|reserved|peak_allocated)_bytes$")


def cuda_memory_statistics(data: ProfilerData) -> pd.DataFrame:
    """The job's own GPU memory from the framework's allocator, per worker and device.

    Columns: ``worker, device, steps, allocated_first_bytes, allocated_last_bytes, allocated_max_bytes,
    reserved_max_bytes, peak_bytes, growth_bytes`` (``growth``: last minus first allocated). Read from the
    ``step_metrics`` the PyTorch hook writes per step (``gpu<d>_memory_*_bytes``); empty on a CPU-only run.
    """
    rows = []
    for worker, tab in data.framework.items():
        metrics = tab.step_metrics
        devices = sorted({int(m.group(1)) for k in metrics if (m := _CUDA_MEMORY.match(k))})
        for d in devices:
            alloc = np.asarray(metrics.get(f"gpu{d}_memory_allocated_bytes", []), dtype=float)
            alloc = alloc[np.isfinite(alloc)]
            if not alloc.size:
                continue
            reserved = np.asarray(metrics.get(f"gpu{d}_memory_reserved_bytes", [np.nan]), dtype=float)
            peak = np.asarray(metrics.get(f"gpu{d}_memory_peak_allocated_bytes", [np.nan]), dtype=float)
            rows.append(
                [
                    worker,
                    f"gpu{d}",
                    int(alloc.size),
                    float(alloc[0]),
                    float(alloc[-1]),
                    float(alloc.max()),
                    float(np.nanmax(reserved)) if np.isfinite(reserved).any() else float("nan"),
                    float(np.nanmax(peak)) if np.isfinite(peak).any() else float("nan"),
                    float(alloc[-1] - alloc[0]),
                ]
            )
    cols = [
        "worker",
        "device",
        "steps",
        "allocated_first_bytes",
        "allocated_last_bytes",
        "allocated_max_bytes",
        "reserved_max_bytes",
        "peak_bytes",
        "growth_bytes",
    ]
    return pd.DataFrame(rows, columns=cols)
