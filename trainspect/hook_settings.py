"""The hook's settings, declared once: every framework hook, the collector, JSON configs and the docs read this table.

One row per setting (:class:`Setting`): its name, default, which frameworks take it, how a value is checked (one
``ConfigError`` line naming the setting, the value and what is allowed) and what it does. From it:

* ``trainspect.torch.Hook(out_dir, **settings)`` and ``trainspect.keras.Hook`` take exactly their framework's rows
  (their signatures are made from the table: ``inspect.signature`` and ``help()`` show them);
* :func:`check_settings` validates what a script gives, at construction;
* :func:`defaults` gives what ``trainspect run`` merges a script's own hook with (:mod:`trainspect.hooks.job`);
* the JSON config (:mod:`trainspect.hook_config`) takes the rows whose ``json`` is ``HookParameters`` under that key;
* :func:`markdown_table` is the table in docs/configuration.md (a test keeps them equal).

Adding a setting: one row here, then read ``settings.<name>`` where it acts.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from trainspect.collections import Collection
from trainspect.config import ReductionConfig, SaveConfig, parse_bool
from trainspect.exceptions import ConfigError

__all__ = ["Setting", "SETTINGS", "HookSettings", "check_settings", "defaults", "signature", "markdown_table"]

REQUIRED = inspect.Parameter.empty
"""The default of a setting without one (``out_dir``)."""
BOTH = ("pytorch", "tensorflow")


def _path(key: str, value: Any) -> str | os.PathLike[str]:
    if not isinstance(value, (str, os.PathLike)) or not os.fspath(value):
        raise ConfigError(f"{key}={value!r}: expected a path (a string or os.PathLike)")
    return value  # type: ignore[no-any-return]


def _optional_path(key: str, value: Any) -> Any:
    return None if value is None else _path(key, value)


def _instance(cls: type) -> Callable[[str, Any], Any]:
    def check(key: str, value: Any) -> Any:
        if value is not None and not isinstance(value, cls):
            raise ConfigError(f"{key}={value!r}: expected a {cls.__name__} or None")
        return value

    return check


def _names(kinds: tuple[type, ...], what: str) -> Callable[[str, Any], Any]:
    """None, a string, or the items as a list (a generator is read once, here)."""

    def check(key: str, value: Any) -> Any:
        if value is None or isinstance(value, str):
            return value
        if isinstance(value, Iterable) and not isinstance(value, Mapping):
            items = list(value)
            if all(isinstance(v, kinds) for v in items):
                return items
        raise ConfigError(f"{key}={value!r}: expected {what}")

    return check


def _choice(*allowed: str) -> Callable[[str, Any], str]:
    def check(key: str, value: Any) -> str:
        word = value.strip().lower() if isinstance(value, str) else value
        if word not in allowed:
            raise ConfigError(f"{key}={value!r}: allowed: {', '.join(map(repr, allowed))}")
        return word  # type: ignore[no-any-return]

    return check


def _profiler(key: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        from trainspect.profiler.config import ProfilerConfig

        return ProfilerConfig.from_dict(value)
    if value is not None and not hasattr(value, "system_monitor_interval_millis"):
        raise ConfigError(f"{key}={value!r}: expected a ProfilerConfig, a dict of its settings, or None")
    return value


def _as_given(key: str, value: Any) -> Any:
    return value  # checked where it acts (the rules, the MLflow options: HookExtras)


@dataclass(frozen=True)
class Setting:
    """One setting of the hooks.

    Attributes:
        name: the keyword argument.
        default: its value when not given (:data:`REQUIRED`: none).
        check: ``check(name, value)`` returns the value the hook uses or raises ``ConfigError``.
        doc: what it does (one sentence, Markdown).
        frameworks: the hooks that take it.
        json: where a JSON config gives it (``HookParameters``: under that key, by its name).
    """

    name: str
    default: Any
    check: Callable[[str, Any], Any]
    doc: str
    frameworks: tuple[str, ...] = BOTH
    json: str = "HookParameters"

    def __post_init__(self) -> None:
        if not self.frameworks:
            object.__setattr__(self, "frameworks", BOTH)


SETTINGS: tuple[Setting, ...] = (
    Setting(
        "out_dir", REQUIRED, _path, "the run directory (a path, or an `s3://`, `gs://`, `az://` URL)", json="LocalPath"
    ),
    Setting("export_tensorboard", True, parse_bool, "write TensorBoard summaries: losses, scalars, histograms"),
    Setting("tensorboard_dir", None, _optional_path, "where the event files go (default: the run directory)"),
    Setting("dry_run", False, parse_bool, "decide everything, write nothing"),
    Setting(
        "reduction_config",
        None,
        _instance(ReductionConfig),
        "reductions saved instead of raw tensors, for collections without their own",
        json="HookParameters (reductions, save_raw_tensor, save_shape)",
    ),
    Setting(
        "save_config",
        None,
        _instance(SaveConfig),
        "when collections without their own save (default every 500 steps)",
        json="HookParameters (save_interval, save_steps, start_step, end_step; per mode: train.save_interval …)",
    ),
    Setting(
        "include_regex",
        None,
        _names((str,), "a regex or a list of regexes"),
        "regexes of tensor names added to collection `default`",
    ),
    Setting(
        "include_collections",
        None,
        _names((str, Collection), "a list of collection names or Collection objects"),
        "collections to record (default: losses only)",
        json="CollectionConfigurations",
    ),
    Setting("save_all", False, parse_bool, "record every tensor (collection `all`)"),
    Setting(
        "include_workers",
        "one",
        _choice("one", "all"),
        '`"one"`: only the chief records tensors (every rank when the parameters are sharded); `"all"`: every rank',
    ),
    Setting("rules", None, _as_given, 'rules judged live while training, or `"default"`', json="Rules"),
    Setting(
        "profiler_config",
        None,
        _profiler,
        "system and framework profiling (a `ProfilerConfig` or a dict of its settings)",
        json="ProfilerConfig",
    ),
    Setting(
        "mlflow_run",
        None,
        _as_given,
        "the MLflow run to log to (None: the active run, if any; True: the active or a new one; False: never; "
        "a dict of options)",
        json="MLflow",
    ),
    Setting(
        "local_gradients",
        False,
        parse_bool,
        "record each rank's own gradient before any reduction (smdebug's), not the one the optimizer applies",
        frameworks=("pytorch",),
    ),
    Setting(
        "on_backlog",
        "degrade",
        _choice("degrade", "block"),
        '`"degrade"`: behind training, keep losses and scalars, drop raw tensors and record the gap; `"block"`: '
        "training waits (smdebug's)",
    ),
)
"""Every hook setting, in the order of the hooks' signatures."""

_BY_NAME = {s.name: s for s in SETTINGS}


@dataclass(frozen=True)
class HookSettings:
    """A hook's checked settings (:func:`check_settings`): one attribute per row of :data:`SETTINGS`."""

    values: dict[str, Any] = field(default_factory=dict)

    def __getattr__(self, name: str) -> Any:
        try:
            return self.values[name]
        except KeyError:
            raise AttributeError(name) from None

    def replace(self, **changes: Any) -> HookSettings:
        """A copy with ``changes`` (not checked again: for values trainspect itself decides)."""
        return HookSettings({**self.values, **changes})


def defaults(framework: str = "pytorch") -> dict[str, Any]:
    """Every setting's default for ``framework`` (``out_dir``, which has none, left out)."""
    return {s.name: s.default for s in SETTINGS if framework in s.frameworks and s.default is not REQUIRED}


def check_settings(framework: str, given: Mapping[str, Any]) -> HookSettings:
    """Check what a script gives a ``framework`` hook; the defaults fill the rest.

    Raises:
        ConfigError: an unknown setting (naming the allowed ones), a missing ``out_dir``, or a bad value.
    """
    allowed = [s.name for s in SETTINGS if framework in s.frameworks]
    unknown = [k for k in given if k not in allowed]
    if unknown:
        raise ConfigError(f"{unknown[0]}: not a setting of this hook; allowed: {', '.join(allowed)}")
    values = {}
    for name in allowed:
        setting = _BY_NAME[name]
        if name not in given and setting.default is REQUIRED:
            raise ConfigError(f"{name}: required")
        value = given.get(name, setting.default)
        values[name] = setting.check(name, value) if name in given else value
    return HookSettings(values)


def signature(framework: str) -> inspect.Signature:
    """The hook constructor's signature for ``framework`` (``self``, then one keyword per setting)."""
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for s in SETTINGS:
        if framework in s.frameworks:
            kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
            params.append(inspect.Parameter(s.name, kind, default=s.default))
    return inspect.Signature(params)


def markdown_table() -> str:
    """The settings as the Markdown table of docs/configuration.md."""
    lines = ["| setting | default | hooks | JSON config | what it does |", "|---|---|---|---|---|"]
    for s in SETTINGS:
        default = "required" if s.default is REQUIRED else f"`{s.default!r}`"
        hooks = "PyTorch, Keras" if s.frameworks == BOTH else "PyTorch"
        lines.append(f"| `{s.name}` | {default} | {hooks} | {s.json} | {s.doc} |")
    return "\n".join(lines) + "\n"
