"""The system-metric catalogue: every system metric declared once, read by every consumer.

A :class:`Metric` says what a metric key means (unit, label, chart group), what smdebug/SageMaker and MLflow call
it and how samples aggregate over an interval. Event readers (smdebug names), the analyses (units), the HTML report
(table rows, labels), the TensorBoard plugin (time-series groups, labels and units sent to its JavaScript) and the
MLflow plugin (``system/...`` keys) all read :data:`CATALOGUE`. Adding a metric is a sampler that emits the key
plus one :meth:`MetricCatalogue.declare` below. Keys that are not declared are not dropped: :meth:`~MetricCatalogue.
describe` gives them a generic description (the key as label, the unit read from its suffix).

A per-device metric is declared once with ``{i}`` in its key (``gpu{i}_utilization_percent``); ``{i}`` in the
label, the smdebug name and the MLflow name is replaced by the device index.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, replace

__all__ = ["Metric", "Group", "MetricCatalogue", "CATALOGUE", "UNITS", "unit_symbol", "generic_name"]

UNITS = {"percent": "%", "bytes": "B", "bytes/s": "B/s", "count": "", "s": "s", "W": "W", "°C": "°C", "": ""}
"""The units a metric may declare, with the symbol charts show."""

AGGREGATES = ("mean", "max", "min", "last")

_SUFFIX_UNITS = (
    ("_percent", "percent"),
    ("_bytes_per_second", "bytes/s"),
    ("_bytes", "bytes"),
    ("_watts", "W"),
    ("_celsius", "°C"),
    ("_seconds", "s"),
    ("_count", "count"),
)
_NAME_SUFFIX = re.compile(r"_(percent|bytes_per_second|bytes|watts|celsius|seconds)$")


def unit_symbol(unit: str) -> str:
    """The symbol of a unit on a chart axis (``percent`` -> ``%``, ``bytes/s`` -> ``B/s``).

    Example:
        >>> unit_symbol("percent"), unit_symbol("bytes/s"), unit_symbol("W")
        ('%', 'B/s', 'W')
    """
    return UNITS.get(unit, unit)


def generic_name(key: str) -> str:
    """A readable name of a key without its unit suffix (``gpu0_memory_used_percent`` -> ``gpu0 memory used``)."""
    return _NAME_SUFFIX.sub("", key).replace("_", " ")


@dataclass(frozen=True)
class Group:
    """A chart of the TensorBoard Profiler tab's time series: metrics of one unit drawn together."""

    id: str
    title: str
    unit: str


@dataclass(frozen=True)
class Metric:
    """One system metric.

    Attributes:
        key: the metric key as samplers write it; ``{i}`` stands for a device index (``gpu{i}_power_watts``).
        unit: one of :data:`UNITS`.
        label: the name tables show (``None``: the key itself).
        short: the legend name inside its time-series group (``None``: the key without its unit suffix).
        group: the id of the time-series :class:`Group` it is drawn in (``""``: none).
        smdebug: smdebug's ``(type, name, dimension)`` (SageMaker's system records), or ``None``.
        mlflow: the MLflow key without ``system/`` (``None``: the metric key itself), and ``mlflow_factor``, the
            factor from our unit to MLflow's (bytes to megabytes: ``1e-6``).
        aggregate: how samples over an interval combine (``mean``, ``max``, ``min``, ``last``).
        table: shown in the utilisation statistics tables of the report and the Profiler tab.
        derived: computed by the analyses from other metrics, never sampled.
    """

    key: str
    unit: str
    label: str | None = None
    short: str | None = None
    group: str = ""
    smdebug: tuple[str, str, str] | None = None
    mlflow: str | None = None
    mlflow_factor: float = 1.0
    aggregate: str = "mean"
    table: bool = True
    derived: bool = False

    @property
    def per_device(self) -> bool:
        """Whether the key holds a device index (``{i}``)."""
        return "{i}" in self.key

    def for_device(self, index: str | None) -> Metric:
        """The metric of device ``index``: ``{i}`` filled in (itself when it is not per device)."""
        if index is None or not self.per_device:
            return self

        def fill(text: str | None) -> str | None:
            return None if text is None else text.replace("{i}", index)

        sm = None if self.smdebug is None else (self.smdebug[0], str(fill(self.smdebug[1])), self.smdebug[2])
        return replace(
            self,
            key=str(fill(self.key)),
            label=fill(self.label),
            short=fill(self.short),
            smdebug=sm,
            mlflow=fill(self.mlflow),
        )

    @property
    def display_label(self) -> str:
        """The table label (the key when none is declared)."""
        return self.label or self.key

    @property
    def display_short(self) -> str:
        """The legend name."""
        return self.short or generic_name(self.key)


class MetricCatalogue:
    """Metric declarations by key, and the lookups consumers use.

    Example:
        >>> cat = MetricCatalogue()
        >>> cat.declare(Metric("gpu{i}_fan_percent", "percent", label="GPU {i} fan", mlflow="gpu_{i}_fan_percentage"))
        >>> m = cat.describe("gpu3_fan_percent")
        >>> m.label, m.mlflow, m.unit
        ('GPU 3 fan', 'gpu_3_fan_percentage', 'percent')
        >>> cat.describe("fancy_watts").unit, cat.known("fancy_watts")
        ('W', False)
    """

    def __init__(self) -> None:
        self._metrics: dict[str, Metric] = {}
        self._groups: dict[str, Group] = {}
        self._patterns: list[tuple[re.Pattern[str], Metric]] = []
        self._cache: dict[str, tuple[Metric, bool]] = {}
        self._sm_cache: dict[tuple[str, str, str], str | None] = {}

    def declare(self, metric: Metric) -> None:
        """Add a metric.

        Raises:
            ValueError: the key is taken, the unit, group or aggregation is unknown, or the group has another unit.
        """
        if metric.key in self._metrics:
            raise ValueError(f"metric {metric.key!r} is already declared")
        if metric.unit not in UNITS:
            raise ValueError(f"metric {metric.key!r}: unit={metric.unit!r}; allowed: {', '.join(UNITS)}")
        if metric.aggregate not in AGGREGATES:
            raise ValueError(f"metric {metric.key!r}: aggregate={metric.aggregate!r}; allowed: {', '.join(AGGREGATES)}")
        if metric.group and metric.group not in self._groups:
            raise ValueError(f"metric {metric.key!r}: group={metric.group!r}; declared: {', '.join(self._groups)}")
        if metric.group and self._groups[metric.group].unit != metric.unit:
            raise ValueError(
                f"metric {metric.key!r}: unit {metric.unit!r} differs from its group's "
                f"({self._groups[metric.group].unit!r}); declare a group per unit"
            )
        self._metrics[metric.key] = metric
        if metric.per_device:
            pattern = re.compile("^" + re.escape(metric.key).replace(r"\{i\}", r"(\d+)") + "$")
            self._patterns.append((pattern, metric))
        self._cache.clear()
        self._sm_cache.clear()

    def remove(self, key: str) -> None:
        """Remove a declaration (tests and plugins that declared one temporarily)."""
        metric = self._metrics.pop(key)
        self._patterns = [(p, m) for p, m in self._patterns if m is not metric]
        self._cache.clear()
        self._sm_cache.clear()

    def declare_group(self, group: Group) -> None:
        """Add a time-series group (charts draw groups in declaration order)."""
        if group.unit not in UNITS:
            raise ValueError(f"group {group.id!r}: unit={group.unit!r}; allowed: {', '.join(UNITS)}")
        self._groups[group.id] = group

    def remove_group(self, group_id: str) -> None:
        """Remove a time-series group (remove the metrics drawn in it first).

        Raises:
            ValueError: a declared metric still names the group.
        """
        users = [m.key for m in self._metrics.values() if m.group == group_id]
        if users:
            raise ValueError(f"group {group_id!r} is used by {users}")
        del self._groups[group_id]

    def groups(self) -> list[Group]:
        """The time-series groups in order."""
        return list(self._groups.values())

    def metrics(self) -> list[Metric]:
        """The declarations in order (templates for per-device metrics)."""
        return list(self._metrics.values())

    def instances(self, metric: Metric, keys: Iterable[str]) -> list[str]:
        """The keys (in their order) that are ``metric``: its key, or for a per-device metric every device's."""
        if not metric.per_device:
            return [k for k in keys if k == metric.key]
        pattern = next(p for p, m in self._patterns if m is metric)
        return [k for k in keys if pattern.match(k)]

    def _resolve(self, key: str) -> tuple[Metric, bool]:
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        found: Metric | None = self._metrics.get(key)
        if found is None:
            for pattern, metric in self._patterns:
                m = pattern.match(key)
                if m:
                    found = metric.for_device(m.group(1))
                    break
        result = (found, True) if found is not None else (Metric(key, _unit_from_suffix(key)), False)
        if len(self._cache) < 100_000:
            self._cache[key] = result
        return result

    def known(self, key: str) -> bool:
        """Whether ``key`` is declared (directly or through a per-device template)."""
        return self._resolve(key)[1]

    def describe(self, key: str) -> Metric:
        """The declaration of ``key`` with the device index filled in; a generic one for an unknown key."""
        return self._resolve(key)[0]

    def key_for_smdebug(self, type_: str, name: str, dimension: str) -> str | None:
        """The key of an smdebug ``(type, name, dimension)``, or ``None`` when no metric declares it."""
        triple = (type_, name, dimension)
        if triple not in self._sm_cache:
            if len(self._sm_cache) > 100_000:
                self._sm_cache.clear()
            self._sm_cache[triple] = self._find_smdebug(name, dimension)
        return self._sm_cache[triple]

    def _find_smdebug(self, name: str, dimension: str) -> str | None:
        for metric in self._metrics.values():
            if metric.smdebug is None or metric.smdebug[2] != dimension:
                continue
            sm_name = metric.smdebug[1]
            if not metric.per_device:
                if sm_name == name:
                    return metric.key
                continue
            m = re.match("^" + re.escape(sm_name).replace(r"\{i\}", r"(\d+)") + "$", name or "")
            if m:
                return metric.key.replace("{i}", m.group(1))
        return None


def _unit_from_suffix(key: str) -> str:
    return next((unit for suffix, unit in _SUFFIX_UNITS if key.endswith(suffix)), "")


CATALOGUE = MetricCatalogue()
"""The built-in metrics, below; plugins may :meth:`~MetricCatalogue.declare` more."""

for _group in (
    Group("cpu", "CPU (all cores) and I/O wait", "percent"),
    Group("memory", "Memory used", "percent"),
    Group("gpu_memory", "GPU memory used", "percent"),
    Group("io", "Disk I/O", "bytes/s"),
    Group("network", "Network", "bytes/s"),
):
    CATALOGUE.declare_group(_group)

for _metric in (
    Metric("process_cpu_utilization_percent", "percent", "CPU, training job's processes (% of all cores)"),
    Metric("process_memory_used_bytes", "bytes", "Memory, training job's processes"),
    Metric("process_count", "count", "Processes of the training job"),
    Metric("cpu_total_utilization_percent", "percent", "CPU, whole host (mean of cores)", derived=True),
    Metric(
        "cpu{i}_utilization_percent",
        "percent",
        "CPU {i}",
        smdebug=("cpu", "cpu{i}", "CPUUtilization"),
        mlflow="cpu_{i}_utilization_percentage",
        table=False,
    ),
    Metric(
        "cpu_utilization_percent",
        "percent",
        "CPU, whole host (all cores)",
        "CPU (all cores)",
        "cpu",
        ("cpu", "total", "TotalCPUUtilization"),
        "cpu_utilization_percentage",
    ),
    Metric(
        "cpu_memory_used_percent",
        "percent",
        "CPU memory, whole host",
        "memory used",
        "memory",
        ("cpu", "MemoryUsedPercent", "Memory"),
        "system_memory_usage_percentage",
    ),
    Metric(
        "cpu_memory_used_bytes",
        "bytes",
        "CPU memory used, whole host",
        smdebug=("cpu", "MemoryUsedBytes", "Memory"),
        mlflow="system_memory_usage_megabytes",
        mlflow_factor=1e-6,
        table=False,
    ),
    Metric(
        "cpu_iowait_percent",
        "percent",
        "I/O wait",
        "I/O wait",
        "cpu",
        ("cpu", "total", "I/OWaitPercentage"),
        "cpu_iowait_percentage",
    ),
    Metric("gpu_total_utilization_percent", "percent", "GPU (mean of GPUs)", derived=True),
    Metric(
        "disk_read_bytes_per_second", "bytes/s", "Disk read", "read", "io", ("io", "DiskReadBytesPerSecond", "Disk")
    ),
    Metric(
        "disk_write_bytes_per_second", "bytes/s", "Disk write", "write", "io", ("io", "DiskWriteBytesPerSecond", "Disk")
    ),
    Metric(
        "network_sent_bytes_per_second",
        "bytes/s",
        "Network sent",
        "sent",
        "network",
        ("network", "NetworkSentBytesPerSecond", "Algorithm"),
    ),
    Metric(
        "network_received_bytes_per_second",
        "bytes/s",
        "Network received",
        "received",
        "network",
        ("network", "NetworkReceivedBytesPerSecond", "Algorithm"),
    ),
    Metric(
        "gpu{i}_utilization_percent",
        "percent",
        smdebug=("gpu", "gpu{i}", "GPUUtilization"),
        mlflow="gpu_{i}_utilization_percentage",
    ),
    Metric(
        "gpu{i}_memory_used_percent",
        "percent",
        group="gpu_memory",
        smdebug=("gpu", "gpu{i}", "GPUMemoryUtilization"),
        mlflow="gpu_{i}_memory_usage_percentage",
    ),
    Metric(
        "gpu{i}_memory_used_bytes",
        "bytes",
        smdebug=("gpu", "gpu{i}", "GPUMemoryUsedBytes"),
        mlflow="gpu_{i}_memory_usage_megabytes",
        mlflow_factor=1e-6,
    ),
    Metric("gpu{i}_power_watts", "W", smdebug=("gpu", "gpu{i}", "GPUPowerWatts"), mlflow="gpu_{i}_power_usage_watts"),
    Metric(
        "gpu{i}_temperature_celsius",
        "°C",
        smdebug=("gpu", "gpu{i}", "GPUTemperatureCelsius"),
        mlflow="gpu_{i}_temperature_celsius",
    ),
    Metric(
        "gpu{i}_process_memory_used_bytes",
        "bytes",
        "GPU {i} memory, training job's processes",
        smdebug=("gpu", "gpu{i}", "GPUProcessMemoryUsedBytes"),
        mlflow="gpu_{i}_process_memory_usage_megabytes",
        mlflow_factor=1e-6,
    ),
    Metric(
        "gpu{i}_process_memory_used_percent",
        "percent",
        "GPU {i} memory, training job's processes (%)",
        "job's memory",
        "gpu_memory",
        smdebug=("gpu", "gpu{i}", "GPUProcessMemoryUtilization"),
        mlflow="gpu_{i}_process_memory_usage_percentage",
    ),
):
    CATALOGUE.declare(_metric)
