"""Profiler configuration: the system monitor interval and the framework profiling windows (spec 3.1).

Framework-free. A :class:`ProfilerConfig` is passed to the hook, read from the JSON hook config
(:meth:`ProfilerConfig.from_dict`, smdebug's ``ProfilingParameters`` form or snake_case keys, keys
case-insensitive, values may be strings) or built by ``trainspect run`` from its flags.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from trainspect.exceptions import ConfigError

__all__ = ["ALLOWED_INTERVALS_MS", "ProfileRange", "FrameworkProfile", "ProfilerConfig"]

ALLOWED_INTERVALS_MS = (100, 200, 500, 1000, 5000, 60000)
_RANGE_KEYS = {
    "startstep": "start_step",
    "numsteps": "num_steps",
    "startunixtime": "start_unix_time",
    "starttimeinsecsinceepoch": "start_unix_time",
    "duration": "duration",
    "durationinseconds": "duration",
}


def _norm(key: str) -> str:
    return key.replace("_", "").replace("-", "").lower()


def _number(name: str, value: Any, kind: type) -> Any:
    if value is None:
        return None
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)) or not math.isfinite(float(value)):
            raise TypeError(value)  # NaN and Infinity (1e999) are no window
        number = kind(float(value)) if kind is int and isinstance(value, str) else kind(value)
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{name}={value!r}: expected a finite number ({kind.__name__})") from None
    if number < 0 or (kind is int and float(value) != number):
        raise ConfigError(f"{name}={value!r}: expected a non-negative {kind.__name__}")
    return number


@dataclass(frozen=True)
class ProfileRange:
    """A window of steps *or* of wall time during which a profiler runs (smdebug's ``can_start_profiling``).

    Step window: steps ``start_step <= step < start_step + num_steps`` (``num_steps`` defaults to 1; a
    missing ``start_step`` means "the first step seen"). Time window: ``start_unix_time <= now <
    start_unix_time + duration`` (without ``duration``: from the start time until the next step ends).

    Args:
        start_step: first global step profiled.
        num_steps: number of steps profiled.
        start_unix_time: epoch seconds at which profiling starts.
        duration: seconds profiled from ``start_unix_time``.

    Raises:
        ConfigError: step and time fields are mixed, or a value is not a non-negative number.

    Example:
        >>> ProfileRange(start_step=5, num_steps=2).contains_step(6)
        True
    """

    start_step: int | None = None
    num_steps: int | None = None
    start_unix_time: float | None = None
    duration: float | None = None

    def __post_init__(self) -> None:
        for name, kind in (("start_step", int), ("num_steps", int), ("start_unix_time", float), ("duration", float)):
            object.__setattr__(self, name, _number(name, getattr(self, name), kind))
        steps = self.start_step is not None or self.num_steps is not None
        times = self.start_unix_time is not None or self.duration is not None
        if steps and times:
            raise ConfigError(
                f"profile window start_step={self.start_step!r}/num_steps={self.num_steps!r} mixed with "
                f"start_unix_time={self.start_unix_time!r}/duration={self.duration!r}: give either a step window "
                "(start_step, num_steps) or a time window (start_unix_time, duration), not both"
            )
        if self.num_steps == 0:
            raise ConfigError("num_steps=0: expected a positive integer")

    @property
    def is_time_window(self) -> bool:
        """Whether this is a wall-time window."""
        return self.start_unix_time is not None or self.duration is not None

    def contains_step(self, step: int, first_step: int = 0) -> bool:
        """Whether ``step`` lies in the step window (``first_step`` stands in for a missing start)."""
        if self.is_time_window:
            return False
        start = self.start_step if self.start_step is not None else first_step
        return start <= step < start + (self.num_steps or 1)

    def contains_time(self, now: float, started_at: float) -> bool:
        """Whether ``now`` lies in the time window (``started_at`` stands in for a missing start time)."""
        if not self.is_time_window:
            return False
        start = self.start_unix_time if self.start_unix_time is not None else started_at
        if self.duration is None:
            return now >= start
        return start <= now < start + self.duration

    @classmethod
    def from_value(cls, name: str, value: Any) -> ProfileRange | None:
        """Parse a window from a dict, a JSON string (smdebug's sub-config form) or ``None``.

        Raises:
            ConfigError: the value is not a window.
        """
        if value is None or isinstance(value, ProfileRange):
            return value
        if isinstance(value, str):
            if not value.strip():
                return None
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                raise ConfigError(f"{name}={value!r}: expected a JSON object with StartStep/NumSteps") from None
        if not isinstance(value, Mapping):
            raise ConfigError(f"{name}={value!r}: expected a mapping with start_step/num_steps")
        if not value:
            return None
        kwargs: dict[str, Any] = {}
        for key, val in value.items():
            target = _RANGE_KEYS.get(_norm(str(key)))
            if target is None and _norm(str(key)) not in ("metricsregex", "profilername", "cprofiletimer"):
                allowed = "start_step, num_steps, start_unix_time, duration"
                raise ConfigError(f"{name}: unknown key {key!r}; allowed: {allowed}")
            if target is not None:
                kwargs[target] = val
        return cls(**kwargs)


@dataclass(frozen=True)
class FrameworkProfile:
    """Windows of the detailed (operator), dataloader and Python profilers.

    Defaults follow smdebug's ``FrameworkProfile()``: detailed profiling at step 5 for 1 step, dataloader
    profiling at step 7 for 1 step, Python profiling (cProfile, total time) at steps 9-11. A window of
    ``None`` turns that profiler off. Dataloader *wait times* are always recorded (they are cheap); the
    dataloader window is kept for compatibility.

    Example:
        >>> FrameworkProfile.window(start_step=3, num_steps=2).python
        ProfileRange(start_step=3, num_steps=2, start_unix_time=None, duration=None)
    """

    detailed: ProfileRange | None = ProfileRange(start_step=5, num_steps=1)
    dataloader: ProfileRange | None = ProfileRange(start_step=7, num_steps=1)
    python: ProfileRange | None = ProfileRange(start_step=9, num_steps=3)
    python_profiler: str = "cprofile"
    cprofile_timer: str = "total_time"

    def __post_init__(self) -> None:
        for attr in ("detailed", "dataloader", "python"):
            object.__setattr__(self, attr, ProfileRange.from_value(attr, getattr(self, attr)))
        if self.python_profiler != "cprofile":
            raise ConfigError(f"python_profiler={self.python_profiler!r}: allowed: 'cprofile'")
        if self.cprofile_timer not in ("total_time", "cpu_time"):
            raise ConfigError(f"cprofile_timer={self.cprofile_timer!r}: allowed: 'total_time', 'cpu_time'")

    @classmethod
    def window(
        cls,
        start_step: int | None = None,
        num_steps: int | None = None,
        start_unix_time: float | None = None,
        duration: float | None = None,
    ) -> FrameworkProfile:
        """One window for all three profilers (smdebug's ``FrameworkProfile(start_step, num_steps)``)."""
        rng = ProfileRange(start_step, num_steps, start_unix_time, duration)
        return cls(detailed=rng, dataloader=rng, python=rng)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> FrameworkProfile:
        """Parse ``{"start_step": 5, "num_steps": 2}`` or per-profiler keys (``DetailedProfilingConfig``…).

        Raises:
            ConfigError: an unknown key or a bad window.
        """
        norm = {_norm(str(k)): v for k, v in data.items()}
        timer = norm.pop("cprofiletimer", None)
        if timer is not None:
            return replace(cls.from_dict(norm), cprofile_timer=str(timer))
        if any(k in _RANGE_KEYS for k in norm):
            return cls.window(**{_RANGE_KEYS[k]: v for k, v in norm.items() if k in _RANGE_KEYS})
        names = {"detailed": "detailedprofilingconfig", "dataloader": "dataloaderprofilingconfig"}
        names["python"] = "pythonprofilingconfig"
        kwargs: dict[str, Any] = {}
        for attr, key in names.items():  # a sub-config that is not given is off (spec 3.1)
            kwargs[attr] = ProfileRange.from_value(key, norm.get(key, norm.get(attr)))
        python_cfg = norm.get("pythonprofilingconfig")
        if isinstance(python_cfg, str) and "cprofiletimer" in python_cfg.lower():
            timer = {_norm(k): v for k, v in json.loads(python_cfg).items()}.get("cprofiletimer")
            kwargs["cprofile_timer"] = str(timer)
        unknown = set(norm) - set(names.values()) - set(names)
        if unknown:
            raise ConfigError(
                f"framework_profile_params: unknown key(s) {sorted(unknown)}; allowed: "
                "start_step, num_steps, start_unix_time, duration, DetailedProfilingConfig, "
                "DataloaderProfilingConfig, PythonProfilingConfig"
            )
        return cls(**kwargs)


@dataclass(frozen=True)
class ProfilerConfig:
    """What the profiler records.

    Args:
        system_monitor_interval_millis: sampling interval of the system monitor, one of 100, 200, 500
            (default), 1000, 5000, 60000.
        framework_profile_params: windows of the detailed and Python profilers; ``None`` (default) records
            step, phase, span and dataloader timings only.
        enabled: ``False`` turns the whole profiler off.

    Raises:
        ConfigError: the interval is not allowed, or a window mixes steps and times.

    Example:
        >>> ProfilerConfig.from_dict({"SystemMonitorIntervalMillis": "100"}).system_monitor_interval_millis
        100
    """

    system_monitor_interval_millis: int = 500
    framework_profile_params: FrameworkProfile | None = None
    enabled: bool = True

    def __post_init__(self) -> None:
        raw = self.system_monitor_interval_millis
        try:
            interval = int(float(raw)) if not isinstance(raw, bool) and float(raw).is_integer() else -1
        except (TypeError, ValueError):
            interval = -1
        if interval not in ALLOWED_INTERVALS_MS:
            raise ConfigError(
                f"system_monitor_interval_millis={raw!r}: allowed: {', '.join(map(str, ALLOWED_INTERVALS_MS))}"
            )
        object.__setattr__(self, "system_monitor_interval_millis", interval)
        params = self.framework_profile_params
        if isinstance(params, Mapping):
            object.__setattr__(self, "framework_profile_params", FrameworkProfile.from_dict(params))
        elif params is not None and not isinstance(params, FrameworkProfile):
            raise ConfigError(f"framework_profile_params={params!r}: expected a FrameworkProfile, a mapping or None")
        object.__setattr__(self, "enabled", _bool("enabled", self.enabled))

    @property
    def interval_s(self) -> float:
        """The sampling interval in seconds."""
        return self.system_monitor_interval_millis / 1000.0

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ProfilerConfig:
        """Build from the JSON config (spec 3.1 ``ProfilingParameters`` form or snake_case keys).

        Keys are matched case-insensitively and without underscores; values may be strings.

        Raises:
            ConfigError: a bad value or an unknown key.
        """
        if data is not None and not isinstance(data, Mapping):
            raise ConfigError(
                f"ProfilerConfig={data!r}: expected a JSON object, e.g. {{'SystemMonitorIntervalMillis': 500}}"
            )
        if not data:
            return cls()
        norm = {_norm(str(k)): v for k, v in data.items()}
        if "profilingparameters" in norm:
            return cls.from_dict(norm["profilingparameters"])
        kwargs: dict[str, Any] = {}
        for key in ("systemmonitorintervalmillis", "profilingintervalinmilliseconds"):
            if key in norm:
                kwargs["system_monitor_interval_millis"] = norm.pop(key)
        enabled = _pop_enabled(norm)
        fw = _pop_framework(norm)
        for ignored in ("localpath", "rotatemaxfilesizeinbytes", "rotatefilecloseintervalinseconds"):
            norm.pop(ignored, None)
        norm.pop("fileopenfailthreshold", None)
        if norm:
            raise ConfigError(
                f"profiler config: unknown key(s) {sorted(norm)}; allowed: system_monitor_interval_millis, "
                "framework_profile_params, enabled, DetailedProfilingConfig, DataloaderProfilingConfig, "
                "PythonProfilingConfig"
            )
        return cls(framework_profile_params=fw, enabled=enabled, **kwargs)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that :meth:`from_dict` reads back."""
        out: dict[str, Any] = {"system_monitor_interval_millis": self.system_monitor_interval_millis}
        out["enabled"] = self.enabled
        fp = self.framework_profile_params
        if fp is not None:
            out["framework_profile_params"] = {
                name: (None if rng is None else {k: v for k, v in vars(rng).items() if v is not None})
                for name, rng in (("detailed", fp.detailed), ("dataloader", fp.dataloader), ("python", fp.python))
            }
            out["framework_profile_params"]["cprofile_timer"] = fp.cprofile_timer
        return out


def _pop_enabled(norm: dict[str, Any]) -> bool:
    enabled = True
    if "disableprofiler" in norm:
        enabled = not _bool("DisableProfiler", norm.pop("disableprofiler"))
    for key in ("profilerenabled", "enabled"):
        if key in norm:
            enabled = _bool(key, norm.pop(key)) and enabled
    return enabled


def _pop_framework(norm: dict[str, Any]) -> FrameworkProfile | None:
    fw = norm.pop("frameworkprofileparams", None)
    sub = {k: norm.pop(k) for k in list(norm) if k.endswith("profilingconfig")}
    if fw is None and sub:
        fw = sub
    if isinstance(fw, str):
        try:
            fw = json.loads(fw) if fw.strip() else None
        except json.JSONDecodeError:
            raise ConfigError(f"framework_profile_params={fw!r}: expected a JSON object") from None
    if fw is None or isinstance(fw, FrameworkProfile):
        return fw
    if not isinstance(fw, Mapping):
        raise ConfigError(f"framework_profile_params={fw!r}: expected a mapping or FrameworkProfile")
    return FrameworkProfile.from_dict(fw)


def _bool(name: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    low = str(value).strip().lower()
    if low in ("true", "1", "yes"):
        return True
    if low in ("false", "0", "no"):
        return False
    raise ConfigError(f"{name}={value!r}: expected true or false")
