"""The profiler's framework-free core: configuration, the on-disk format, readers, data and analyses."""

from trainspect.profiler.analysis import (
    dataloader_statistics,
    job_statistics,
    phase_ratios,
    python_hotspots,
    step_histogram,
    step_statistics,
    top_operators,
    utilization_statistics,
)
from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.config import FrameworkProfile, ProfileRange, ProfilerConfig
from trainspect.profiler.data import ProfilerData, load_profiler_data
from trainspect.profiler.events import SystemEvent, TraceEvent
from trainspect.profiler.heatmap import heatmap
from trainspect.profiler.horovod import (
    HorovodTimeline,
    last_ready_counts,
    negotiations,
    phase_totals,
    read_horovod_timeline,
    tensor_totals,
)
from trainspect.profiler.ranks import rank_times
from trainspect.profiler.readers import FrameworkMetricsReader, SystemMetricsReader
from trainspect.profiler.window import Window, window, window_of

__all__ = [
    "HorovodTimeline",
    "read_horovod_timeline",
    "negotiations",
    "last_ready_counts",
    "phase_totals",
    "tensor_totals",
    "ProfilerConfig",
    "FrameworkProfile",
    "ProfileRange",
    "SystemMetricsReader",
    "FrameworkMetricsReader",
    "SystemEvent",
    "TraceEvent",
    "SystemArrays",
    "FrameworkTables",
    "ProfilerData",
    "load_profiler_data",
    "job_statistics",
    "utilization_statistics",
    "step_statistics",
    "step_histogram",
    "phase_ratios",
    "top_operators",
    "python_hotspots",
    "dataloader_statistics",
    "heatmap",
    "rank_times",
    "Window",
    "window",
    "window_of",
]
