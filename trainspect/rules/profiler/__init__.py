"""Built-in profiler rules (spec 2): each judges a :class:`trainspect.profiler.ProfilerData` into a Verdict."""

from trainspect.rules.profiler.batch_size import BatchSize
from trainspect.rules.profiler.cpu_bottleneck import CPUBottleneck
from trainspect.rules.profiler.dataloader import Dataloader
from trainspect.rules.profiler.gpu_memory_increase import GPUMemoryIncrease
from trainspect.rules.profiler.input_bottleneck import InputBottleneck
from trainspect.rules.profiler.io_bottleneck import IOBottleneck
from trainspect.rules.profiler.load_balancing import LoadBalancing
from trainspect.rules.profiler.low_gpu_utilization import LowGPUUtilization
from trainspect.rules.profiler.max_initialization_time import MaxInitializationTime
from trainspect.rules.profiler.overall_framework_metrics import OverallFrameworkMetrics
from trainspect.rules.profiler.overall_system_usage import OverallSystemUsage
from trainspect.rules.profiler.step_outlier import StepOutlier
from trainspect.rules.profiler.worker_straggler import WorkerStraggler

__all__ = [
    "PROFILER_RULES",
    "BatchSize",
    "CPUBottleneck",
    "Dataloader",
    "GPUMemoryIncrease",
    "InputBottleneck",
    "IOBottleneck",
    "LoadBalancing",
    "LowGPUUtilization",
    "MaxInitializationTime",
    "OverallFrameworkMetrics",
    "OverallSystemUsage",
    "StepOutlier",
    "WorkerStraggler",
]

PROFILER_RULES = [
    LowGPUUtilization,
    CPUBottleneck,
    IOBottleneck,
    InputBottleneck,
    BatchSize,
    GPUMemoryIncrease,
    LoadBalancing,
    MaxInitializationTime,
    StepOutlier,
    WorkerStraggler,
    Dataloader,
    OverallSystemUsage,
    OverallFrameworkMetrics,
]
