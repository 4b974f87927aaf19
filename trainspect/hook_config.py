"""The JSON hook configuration (smdebug's format, spec 5.2): keys case-insensitive, values may be strings.

```
{"LocalPath": "runs/exp1",
 "HookParameters": {"save_interval": "100", "train.save_interval": "10", "reductions": "mean,abs_max", ...},
 "CollectionConfigurations": [{"CollectionName": "weights", "CollectionParameters": {"save_interval": "50"}}],
 "Rules": [{"name": "ExplodingTensor", "parameters": {"only_nan": "true"}, "actions": ["StopTraining"]}],
 "ProfilerConfig": {"system_monitor_interval_millis": 500}}
```
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trainspect import env
from trainspect.collections import Collection
from trainspect.config import ReductionConfig, SaveConfig, parse_bool
from trainspect.exceptions import ConfigError
from trainspect.hook_settings import SETTINGS
from trainspect.modes import ModeKeys

__all__ = ["hook_kwargs_from_json", "hook_kwargs_from_dict", "load_json_config", "config_path", "sagemaker_notes"]

_SAVE_KEYS = ("save_interval", "save_steps", "start_step", "end_step")
_REDUCTION_KEYS = ("reductions", "save_raw_tensor", "save_shape")
_HOOK_KEYS = tuple(s.name for s in SETTINGS if s.json == "HookParameters")
"""The hook settings a JSON config gives under HookParameters by their names (:mod:`trainspect.hook_settings`)."""
_COLLECTION_KEYS = ("include_regex", "save_histogram")
_TOP_KEYS = ("localpath", "hookparameters", "collectionconfigurations", "rules", "profilerconfig", "mlflow")
_SAGEMAKER_KEYS = ("s3outputpath", "s3path", "ruleconfigurations", "debugruleconfigurations")  # see sagemaker_notes
_ALIASES = {"collectionconfiguration": "collectionconfigurations"}  # the spelling of smdebug's older configs
SAGEMAKER_CONFIG_PATH = "/opt/ml/input/config/debughookconfig.json"
"""Where SageMaker puts the hook config (read when no path, TRAINSPECT_CONFIG nor SMDEBUG_CONFIG_FILE_PATH is given)."""
_MODES = tuple(m.name.lower() for m in ModeKeys)


def _lower(data: Mapping[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a JSON object, got {type(data).__name__}")
    return {str(k).strip().lower(): v for k, v in data.items()}


def _check_keys(params: Mapping[str, Any], allowed: tuple[str, ...], where: str) -> None:
    for key in params:
        base = key.split(".", 1)[1] if "." in key else key
        mode_ok = "." not in key or key.split(".", 1)[0] in _MODES
        if not mode_ok or base not in allowed or ("." in key and base not in _SAVE_KEYS):
            raise ConfigError(
                f"{where}: unknown key {key!r}; allowed: {', '.join(allowed)} "
                f"(save keys may take a mode prefix: {', '.join(m + '.' for m in _MODES)})"
            )


def _save_config(params: Mapping[str, Any]) -> SaveConfig | None:
    base = {k: params[k] for k in _SAVE_KEYS if k in params}
    per_mode: dict[str, dict[str, Any]] = {}
    for key, value in params.items():
        if "." in key:
            mode, sub = key.split(".", 1)
            per_mode.setdefault(mode.upper(), {})[sub] = value
    if not base and not per_mode:
        return None
    return SaveConfig(mode_save_configs={m: {**base, **d} for m, d in per_mode.items()} or None, **base)


def _reduction_config(params: Mapping[str, Any]) -> ReductionConfig | None:
    if not any(k in params for k in _REDUCTION_KEYS):
        return None
    return ReductionConfig.from_string(
        params.get("reductions") or "",  # a comma-separated string or a JSON list
        save_raw_tensor=params.get("save_raw_tensor", False),
        save_shape=params.get("save_shape", False),
    )


def _regex_list(value: Any, key: str = "include_regex") -> list[str]:
    if isinstance(value, str):
        return [r.strip() for r in value.split(",") if r.strip()]
    if value is None:
        return []
    if isinstance(value, list) and all(isinstance(r, str) for r in value):
        return list(value)
    raise ConfigError(f"{key}={value!r}: expected a list of regexes or a comma-separated string")


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}={value!r}: expected a non-empty string")
    return value.strip()


def _collection(item: Mapping[str, Any]) -> Collection:
    item = _lower(item, "CollectionConfigurations[]")
    name = item.get("collectionname")
    if not name:
        raise ConfigError("CollectionConfigurations: every entry needs a CollectionName")
    name = _text("CollectionName", name)
    params = _lower(item.get("collectionparameters") or {}, f"collection {name}")
    _check_keys(params, _COLLECTION_KEYS + _SAVE_KEYS + _REDUCTION_KEYS, f"collection {name} parameters")
    coll = Collection(name, include_regex=_regex_list(params.get("include_regex"), f"{name}.include_regex"))
    coll.save_config = _save_config(params)
    coll.reduction_config = _reduction_config(params)
    if "save_histogram" in params:
        coll.save_histogram = parse_bool("save_histogram", params["save_histogram"])
    return coll


def hook_kwargs_from_dict(doc: Mapping[str, Any]) -> dict[str, Any]:
    """Turn a parsed JSON config into keyword arguments of a framework hook.

    Raises:
        ConfigError: an unknown key or an invalid value, named in the message.
    """
    top = {_ALIASES.get(k, k): v for k, v in _lower(doc, "config").items()}
    unknown = sorted(set(top) - set(_TOP_KEYS) - set(_SAGEMAKER_KEYS))
    if unknown:
        raise ConfigError(
            f"config: unknown key(s) {', '.join(unknown)}; allowed: LocalPath, HookParameters, "
            "CollectionConfigurations, Rules, ProfilerConfig, MLflow (and SageMaker's S3OutputPath, "
            "RuleConfigurations)"
        )
    hook = _lower(top.get("hookparameters") or {}, "HookParameters")
    _check_keys(hook, _HOOK_KEYS + _SAVE_KEYS + _REDUCTION_KEYS, "HookParameters")
    local = top.get("localpath")
    out_dir = _text("LocalPath", local) if local not in (None, "") else env.TRAINSPECT_OUT_DIR.get()
    if env.TRAINSPECT_RUN_ACTIVE.get() and env.TRAINSPECT_OUT_DIR.get():
        out_dir = env.TRAINSPECT_OUT_DIR.get()  # under `trainspect run`, its run directory wins over LocalPath
    if not out_dir:
        raise ConfigError("config: LocalPath (the run directory) is required (or set TRAINSPECT_OUT_DIR)")
    kwargs: dict[str, Any] = {"out_dir": str(out_dir)}
    for setting in SETTINGS:
        if setting.json == "HookParameters" and setting.name in hook:
            value = hook[setting.name]
            value = _regex_list(value) if setting.name == "include_regex" else value  # comma-separated in JSON
            kwargs[setting.name] = setting.check(setting.name, value)
    kwargs["save_config"] = _save_config(hook)
    kwargs["reduction_config"] = _reduction_config(hook)
    collections = [_collection(c) for c in _listed(top, "collectionconfigurations", "CollectionConfigurations")]
    if collections:
        kwargs["include_collections"] = collections
    kwargs.update(_extras(top))
    return kwargs


def _sagemaker_rule(item: Any) -> Any:
    """A SageMaker rule configuration (``RuleParameters.rule_to_invoke``) in trainspect's ``Rules`` form."""
    if not isinstance(item, Mapping):
        return item
    low = _lower(item, "RuleConfigurations[]")
    params = _lower(low.get("ruleparameters") or {}, "RuleParameters")
    if "rule_to_invoke" not in params:
        return item
    kept = {k: v for k, v in params.items() if k != "rule_to_invoke"}
    return {"name": str(params["rule_to_invoke"]), "parameters": kept}


def check_rule_entries(rules: Any, where: str) -> list[Any]:
    """The rules a hook or a config lists, as a list, each entry's ``parameters`` checked to be a mapping.

    Raises:
        ConfigError: not a list, or an entry whose parameters are not ``{name: value}``.
    """
    if isinstance(rules, (str, bytes, Mapping)) or not isinstance(rules, Iterable):
        raise ConfigError(f"{where}={rules!r}: expected a list of rules (Rule objects, names or config objects)")
    entries = list(rules)
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        low = _lower(entry, where)
        params = low.get("parameters", low.get("params"))
        if params is not None and not isinstance(params, Mapping):
            name = low.get("name") or low.get("rule") or "?"
            raise ConfigError(f"{where}: {name}.parameters={params!r}: expected an object {{name: value}}")
    return entries


def _listed(top: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = top.get(key)
    if value is None:
        return []
    if isinstance(value, (str, Mapping)) or not isinstance(value, Iterable):
        raise ConfigError(f"{where}={value!r}: expected a JSON list")
    return list(value)


def _extras(top: Mapping[str, Any]) -> dict[str, Any]:
    kwargs: dict[str, Any] = {}
    rules = _listed(top, "rules", "Rules")
    for key in ("ruleconfigurations", "debugruleconfigurations"):
        rules += [_sagemaker_rule(item) for item in _listed(top, key, key)]
    rules = check_rule_entries(rules, "Rules")
    if rules:
        from trainspect.rules import rules_from_config

        kwargs["rules"] = rules_from_config(rules)
    if top.get("mlflow") is not None:
        kwargs["mlflow_run"] = top["mlflow"]  # true/false, a run id, or {"RunId", "TrackingUri", ...}: HookExtras
    if top.get("profilerconfig") is not None:
        from trainspect.profiler.config import ProfilerConfig

        kwargs["profiler_config"] = ProfilerConfig.from_dict(top["profilerconfig"])
    return kwargs


def config_path() -> str | None:
    """The hook config to read when none is named: TRAINSPECT_CONFIG, SMDEBUG_CONFIG_FILE_PATH, SageMaker's file."""
    path = env.TRAINSPECT_CONFIG.get() or env.SMDEBUG_CONFIG_FILE_PATH.get()
    if path:
        return path
    return SAGEMAKER_CONFIG_PATH if Path(SAGEMAKER_CONFIG_PATH).is_file() else None


def load_json_config(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Read the JSON file (path, else :func:`config_path`).

    Raises:
        ConfigError: no path, an unreadable file, or malformed JSON (with line and column).
    """
    path = path or config_path()
    if not path:
        raise ConfigError(
            f"config: no path given, and neither TRAINSPECT_CONFIG nor SMDEBUG_CONFIG_FILE_PATH is set (nor is there "
            f"a {SAGEMAKER_CONFIG_PATH})"
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror or exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            f"config file {str(path)!r} is not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    if not isinstance(doc, dict):
        raise ConfigError(f"config file {str(path)!r}: expected a JSON object at the top level")
    return doc


def sagemaker_notes(doc: Mapping[str, Any]) -> dict[str, str]:
    """SageMaker-only settings of a config that trainspect keeps in the manifest but does not act on."""
    top = _lower(doc, "config")
    names = {"s3outputpath": "S3OutputPath", "s3path": "S3Path"}
    return {name: str(top[key]) for key, name in names.items() if top.get(key)}


def hook_kwargs_from_json(path: str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Read a JSON config file and return hook keyword arguments."""
    return hook_kwargs_from_dict(load_json_config(path))
