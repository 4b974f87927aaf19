"""MLflow params of a job: the hook's configuration and the training loader, so run comparison says what changed.

* From the run's manifest (``trainspect.json``'s ``config``) and the hook: ``trainspect.save_interval``,
  ``trainspect.collections``, ``trainspect.rules``, ``trainspect.save_all``, ``trainspect.reductions``,
  ``trainspect.include_workers``, ``trainspect.profiler`` ("off", or what it samples), ``trainspect.run_dir``
  (the run directory's name, not its path), ``trainspect.log_every_n_steps``.
* From the profiler's record of the training DataLoader: ``batch_size`` and ``num_workers``, when known.

MLflow params are immutable: each key is logged once, and a key the run already holds is left as it is
(:meth:`~trainspect.mlflow_plugin.sink.MlflowSink.log_params`). Values are cut at 6,000 characters.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from trainspect.store.layout import RunLayout
from trainspect.store.manifest import read_manifest

__all__ = ["hook_params", "loader_params", "profiler_param"]

log = logging.getLogger(__name__)

PREFIX = "trainspect."


def profiler_param(config: Any) -> str:
    """What the profiler records, in words (``"off"`` without one).

    Example:
        >>> from trainspect.profiler.config import ProfilerConfig
        >>> profiler_param(None), profiler_param(ProfilerConfig(system_monitor_interval_millis=100))
        ('off', 'system every 100 ms, framework')
    """
    if config is None or not getattr(config, "enabled", True):
        return "off"
    parts = [f"system every {int(config.system_monitor_interval_millis)} ms", "framework"]
    if getattr(config, "framework_profile_params", None) is not None:
        parts.append("detailed")
    return ", ".join(parts)


def _save_interval(save_config: Any) -> str | None:
    """One interval when every mode saves alike (``10``), else per mode (``TRAIN=10, EVAL=1``)."""
    if not isinstance(save_config, dict) or not save_config:
        return None
    per_mode = {m: (c or {}).get("save_interval") for m, c in save_config.items() if isinstance(c, dict)}
    values = set(per_mode.values())
    if len(values) == 1:
        return str(values.pop())
    return ", ".join(f"{m}={v}" for m, v in per_mode.items())


def _rules(rules: Any) -> str:
    return ", ".join(str(r) for r in rules) if isinstance(rules, list) and rules else "none"


def hook_params(
    run_dir: str | os.PathLike[str],
    profiler_config: Any = None,
    log_every_n_steps: int | None = None,
    profiler_known: bool = True,
) -> dict[str, str]:
    """The hook's configuration as params (from the manifest's config).

    ``profiler_known``: whether ``profiler_config`` is the hook's own, so that "off" is a fact, not a guess.
    """
    path = Path(run_dir)
    config = (read_manifest(RunLayout(path)) or {}).get("config") or {}
    out: dict[str, str] = {PREFIX + "run_dir": path.name}
    interval = _save_interval(config.get("save_config"))
    if interval is not None:
        out[PREFIX + "save_interval"] = interval
    if "include_collections" in config:
        out[PREFIX + "collections"] = ", ".join(map(str, config.get("include_collections") or [])) or "none"
    if "rules" in config:
        out[PREFIX + "rules"] = _rules(config.get("rules"))
    for key in ("save_all", "reduction_config", "include_workers"):
        if key in config:
            out[PREFIX + key.replace("reduction_config", "reductions")] = str(config[key])
    if profiler_known:
        out[PREFIX + "profiler"] = profiler_param(profiler_config)
    if log_every_n_steps is not None:
        out[PREFIX + "log_every_n_steps"] = str(int(log_every_n_steps))
    return out


def loader_params(profiler: Any) -> dict[str, str]:
    """``batch_size`` and ``num_workers`` of the training DataLoader, where the profiler recorded them."""
    if profiler is None:
        return {}
    out: dict[str, str] = {}
    try:
        from trainspect.profiler import analysis

        if hasattr(analysis, "training_loader"):
            info = analysis.training_loader(profiler) or {}
            for key in ("batch_size", "num_workers"):
                value = info.get(key)
                if value is not None:
                    out[key] = str(int(value))
        if "num_workers" not in out:
            stats = analysis.dataloader_statistics(profiler)
            if len(stats) and stats["num_workers"].notna().any():
                out["num_workers"] = str(int(stats["num_workers"].dropna().max()))
    except Exception as exc:  # a damaged profile must not stop the close
        log.debug("trainspect: no loader params for MLflow: %s", exc)
    return out
