"""What to save and when: ``SaveConfig`` (per mode) and ``ReductionConfig``, as in smdebug (spec 5.3, 5.5)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys, parse_mode
from trainspect.reductions import NORMS, PLAIN, Reduction

__all__ = [
    "SaveConfigMode",
    "SaveConfig",
    "ReductionConfig",
    "ALLOWED_REDUCTIONS",
    "ALLOWED_NORMS",
    "DEFAULT_SAVE_INTERVAL",
    "parse_int",
    "parse_bool",
    "parse_number",
]

DEFAULT_SAVE_INTERVAL = 500
ALLOWED_REDUCTIONS = PLAIN
ALLOWED_NORMS = NORMS
_SAVE_KEYS = ("save_interval", "start_step", "end_step", "save_steps")


def parse_int(key: str, value: Any, minimum: int | None = 0, allow_none: bool = False) -> int | None:
    """Parse an integer config value (strings allowed), checking its lower bound.

    Raises:
        ConfigError: naming the key, the value and what is allowed.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none", "null")):
        if allow_none:
            return None
        raise ConfigError(f"{key}: a value is required (an integer >= {minimum})")
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError(value)
        number = int(value.strip()) if isinstance(value, str) else int(value)
        if isinstance(value, float) and not value.is_integer():
            raise ValueError(value)
    except (TypeError, ValueError, OverflowError):  # OverflowError: Infinity
        bound = f" >= {minimum}" if minimum is not None else ""
        raise ConfigError(f"{key}={value!r}: expected an integer{bound}") from None
    if minimum is not None and number < minimum:
        raise ConfigError(f"{key}={value!r}: must be an integer >= {minimum}")
    return number


def parse_number(key: str, value: Any, minimum: float | None = 0.0, above: bool = False) -> float:
    """Parse a finite number (strings allowed) that is ``>= minimum`` (``> minimum`` with ``above``).

    Raises:
        ConfigError: not a number, NaN or infinite (``1e999``), or below the bound.

    Example:
        >>> parse_number("price_per_hour", "2.5")
        2.5
    """
    bound = "" if minimum is None else f" {'>' if above else '>='} {minimum:g}"
    try:
        if isinstance(value, bool) or not isinstance(value, (str, int, float)):
            raise TypeError(value)
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    low = minimum is not None and (number <= minimum if above else number < minimum)
    if not math.isfinite(number) or low:
        raise ConfigError(f"{key}={value!r}: expected a finite number{bound}")
    return number


def parse_bool(key: str, value: Any) -> bool:
    """Parse a boolean config value; strings ``true/false/1/0/yes/no`` are accepted.

    Raises:
        ConfigError: the value is not a boolean.
    """
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "false", "0", "no"):
        return value.strip().lower() in ("true", "1", "yes")
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    raise ConfigError(f"{key}={value!r}: expected a boolean (true/false)")


def _parse_steps(key: str, value: Any) -> tuple[int, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        items: Iterable[Any] = [v for v in value.replace(" ", "").split(",") if v]
    elif isinstance(value, Iterable) and not isinstance(value, Mapping):
        items = value
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        items = [value]
    else:
        raise ConfigError(f"{key}={value!r}: expected a list of integers >= 0 (or a comma-separated string)")
    return tuple(sorted({int(parse_int(key, v) or 0) for v in items}))


@dataclass(frozen=True)
class SaveConfigMode:
    """When to save within one mode: ``step in save_steps or (start <= step < end and step % interval == 0)``.

    Example:
        >>> [s for s in range(300) if SaveConfigMode(save_interval=100, end_step=201).should_save(s)]
        [0, 100, 200]
    """

    save_interval: int = DEFAULT_SAVE_INTERVAL
    start_step: int = 0
    end_step: int | None = None
    save_steps: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "save_interval", parse_int("save_interval", self.save_interval, minimum=1))
        object.__setattr__(self, "start_step", parse_int("start_step", self.start_step, minimum=0))
        object.__setattr__(self, "end_step", parse_int("end_step", self.end_step, minimum=0, allow_none=True))
        object.__setattr__(self, "save_steps", _parse_steps("save_steps", self.save_steps))

    def should_save(self, step: int) -> bool:
        """Return whether ``step`` (a mode step) is saved."""
        if step in self.save_steps:
            return True
        if step < self.start_step or (self.end_step is not None and step >= self.end_step):
            return False
        return (step - 0) % self.save_interval == 0

    def stable_until(self, step: int) -> int | None:
        """Return the first step after ``step`` whose :meth:`should_save` may differ from ``step``'s (None: none).

        Example:
            >>> cfg = SaveConfigMode(save_interval=100)
            >>> cfg.stable_until(0), cfg.stable_until(1), SaveConfigMode(save_interval=1).stable_until(7)
            (1, 100, None)
        """
        if self.should_save(step):
            if self.save_interval == 1 and self.start_step <= step and (self.end_step is None or step < self.end_step):
                return self.end_step  # every step saves until end_step (listed steps save anyway)
            return step + 1
        candidates = [s for s in self.save_steps if s > step][:1]
        first = max(step + 1, self.start_step)
        scheduled = first + (-first) % self.save_interval
        if self.end_step is None or scheduled < self.end_step:
            candidates.append(scheduled)
        return min(candidates) if candidates else None

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], base: SaveConfigMode | None = None) -> SaveConfigMode:
        """Build from a dict (string values allowed), starting from ``base``'s values.

        Raises:
            ConfigError: an unknown key (only save_interval, start_step, end_step, save_steps exist).
        """
        if not isinstance(data, Mapping):
            raise ConfigError(f"save config={data!r}: expected a mapping with keys {', '.join(_SAVE_KEYS)}")
        lowered = {str(k).lower(): v for k, v in data.items()}
        unknown = sorted(set(lowered) - set(_SAVE_KEYS))
        if unknown:
            raise ConfigError(f"save config: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(_SAVE_KEYS)}")
        values = (base or cls()).to_dict()
        values.update(lowered)
        return cls(**values)


@dataclass(frozen=True)
class SaveConfig:
    """When to save, per mode. The simple form applies one ``SaveConfigMode`` to every mode.

    Args:
        mode_save_configs: ``{mode: SaveConfigMode or dict}`` for per-mode settings.
        save_interval: save every N mode steps (default 500).
        start_step: first mode step to save.
        end_step: mode step at which saving stops (exclusive).
        save_steps: mode steps always saved.

    Example:
        >>> cfg = SaveConfig(save_interval=10, mode_save_configs={"EVAL": {"save_interval": 1}})
        >>> cfg.should_save_step("train", 5), cfg.should_save_step("eval", 5)
        (False, True)
    """

    mode_save_configs: Mapping[Any, Any] | None = None
    save_interval: int | None = None
    start_step: int | None = None
    end_step: int | None = None
    save_steps: Any = None
    modes: dict[ModeKeys, SaveConfigMode] = field(init=False, repr=False, compare=True)

    def __post_init__(self) -> None:
        simple = {k: getattr(self, k) for k in _SAVE_KEYS if getattr(self, k) is not None}
        base = SaveConfigMode.from_dict(simple)
        per_mode = {m: base for m in ModeKeys}
        if self.mode_save_configs is not None and not isinstance(self.mode_save_configs, Mapping):
            raise ConfigError(f"mode_save_configs={self.mode_save_configs!r}: expected a mapping {{mode: settings}}")
        for key, value in (self.mode_save_configs or {}).items():
            try:
                mode = parse_mode(key)
            except ValueError as exc:
                raise ConfigError(f"mode_save_configs: {exc}") from None
            if isinstance(value, SaveConfigMode):
                per_mode[mode] = value
            elif isinstance(value, Mapping):
                per_mode[mode] = SaveConfigMode.from_dict(value, base)
            elif value is not None:
                raise ConfigError(f"mode_save_configs.{mode.name}={value!r}: expected a SaveConfigMode or a mapping")
        for mode, cfg in per_mode.items():
            if cfg.end_step is not None and cfg.end_step < cfg.start_step:
                where = "" if cfg == base else f" (mode {mode.name})"
                raise ConfigError(
                    f"SaveConfig{where}: start_step={cfg.start_step}, end_step={cfg.end_step}: end_step (exclusive) "
                    "must be at least start_step"
                )
        object.__setattr__(self, "modes", per_mode)

    def get_save_config(self, mode: ModeKeys | str) -> SaveConfigMode:
        """Return the settings of one mode."""
        return self.modes[parse_mode(mode)]

    def should_save_step(self, mode: ModeKeys | str, step: int) -> bool:
        """Return whether mode step ``step`` of ``mode`` is saved."""
        return self.modes[parse_mode(mode)].should_save(step)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form ``{"TRAIN": {...}, "EVAL": {...}, ...}``."""
        return {m.name: c.to_dict() for m, c in self.modes.items()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SaveConfig:
        """Build from the JSON form (a per-mode dict or a flat one)."""
        if any(str(k).upper() in ModeKeys.__members__ for k in data):
            return cls(mode_save_configs=dict(data))
        return cls(**{str(k).lower(): v for k, v in data.items()})

    @classmethod
    def every(cls, interval: int) -> SaveConfig:
        """Save every ``interval`` steps in every mode."""
        return cls(save_interval=interval)


def _names(key: str, value: Any, allowed: tuple[str, ...]) -> tuple[str, ...]:
    """A comma-separated string or a list of strings, as a tuple."""
    if isinstance(value, str):
        return tuple(v.strip() for v in value.split(",") if v.strip())
    if isinstance(value, Iterable) and not isinstance(value, Mapping):
        items = tuple(value)
        if all(isinstance(v, str) for v in items):
            return items
    raise ConfigError(f"{key}={value!r}: expected a list of names from {', '.join(allowed)}")


@dataclass(frozen=True)
class ReductionConfig:
    """Which reductions to save instead of (or with) the raw tensor.

    Reductions are computed on the tensor's device; only the floats travel to the host.

    Example:
        >>> [r.key for r in ReductionConfig.from_string("min,abs_mean,l2").names()]
        ['min', 'l2', 'abs_mean']
    """

    reductions: tuple[str, ...] = ()
    abs_reductions: tuple[str, ...] = ()
    norms: tuple[str, ...] = ()
    abs_norms: tuple[str, ...] = ()
    save_raw_tensor: bool = False
    save_shape: bool = False

    def __post_init__(self) -> None:
        for key, allowed in (
            ("reductions", ALLOWED_REDUCTIONS),
            ("abs_reductions", ALLOWED_REDUCTIONS),
            ("norms", ALLOWED_NORMS),
            ("abs_norms", ALLOWED_NORMS),
        ):
            items = _names(key, getattr(self, key), allowed)
            bad = [v for v in items if v not in allowed]
            if bad:
                raise ConfigError(f"{key}: {', '.join(map(repr, bad))} not allowed; allowed: {', '.join(allowed)}")
            object.__setattr__(self, key, items)
        object.__setattr__(self, "save_raw_tensor", parse_bool("save_raw_tensor", self.save_raw_tensor))
        object.__setattr__(self, "save_shape", parse_bool("save_shape", self.save_shape))

    def names(self) -> list[Reduction]:
        """Return every configured reduction (each equal to its ``(name, abs)`` tuple)."""
        out = [Reduction(r, False) for r in self.reductions + self.norms]
        out += [Reduction(r, True) for r in self.abs_reductions + self.abs_norms]
        return out

    @property
    def has_reductions(self) -> bool:
        """Whether any reduction is configured (then only reductions are saved unless save_raw_tensor)."""
        return bool(self.names())

    @classmethod
    def from_string(
        cls, text: str | Iterable[str], save_raw_tensor: Any = False, save_shape: Any = False
    ) -> ReductionConfig:
        """Parse ``"min,max,abs_mean,l2"`` (also the older ``l1_norm``/``abs_l2_norm`` spellings).

        Raises:
            ConfigError: an unknown reduction; the message lists the allowed ones.
        """
        if not isinstance(text, str):  # a JSON list of names
            text = ",".join(_names("reductions", text, ALLOWED_REDUCTIONS + ALLOWED_NORMS))
        buckets: dict[str, list[str]] = {"reductions": [], "abs_reductions": [], "norms": [], "abs_norms": []}
        for raw in (t.strip().lower() for t in text.split(",") if t.strip()):
            try:
                red = Reduction.parse(raw)
            except ValueError:
                allowed = ", ".join(ALLOWED_REDUCTIONS + ALLOWED_NORMS)
                message = f"reductions: {raw!r} is not a reduction; allowed: {allowed} and abs_ variants"
                raise ConfigError(message) from None
            bucket = "norms" if red.name in ALLOWED_NORMS else "reductions"
            buckets[("abs_" if red.absolute else "") + bucket].append(red.name)
        return cls(**{k: tuple(v) for k, v in buckets.items()}, save_raw_tensor=save_raw_tensor, save_shape=save_shape)

    def to_dict(self) -> dict[str, Any]:
        """Return the JSON form."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}
