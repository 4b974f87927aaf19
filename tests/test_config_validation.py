"""Every configuration value is checked when the hook (or its config) is built: one ConfigError line naming the key."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "store"))

from storetrain import write_run  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.cli import main  # noqa: E402
from trainspect.exceptions import ConfigError  # noqa: E402
from trainspect.hook_config import hook_kwargs_from_dict  # noqa: E402
from trainspect.hooks.hook_extras import HookExtras  # noqa: E402
from trainspect.profiler.config import FrameworkProfile, ProfilerConfig  # noqa: E402
from trainspect.rules import VanishingGradient  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


def _a(value: Any) -> Any:
    """A value of the wrong type, hidden from the type checker (the point is what happens at run time)."""
    return value


def _hook(tmp: Path, **kw: Any) -> Any:
    return ts.torch.Hook(str(tmp / "run"), export_tensorboard=False, **kw)


def _json(tmp: Path, doc: dict[str, Any]) -> Any:
    path = tmp / "hook.json"
    path.write_text(json.dumps({"LocalPath": str(tmp / "run"), **doc}), encoding="utf-8")
    return ts.torch.Hook.create_from_json_file(path)


# (what is built, the key the one-line message must name)
BAD: list[tuple[str, Callable[[Path], Any], str]] = [
    ("mlflow price", lambda t: _hook(t, mlflow_run={"price_per_hour": "cheap"}), "MLflow.price_per_hour='cheap'"),
    ("mlflow interval nan", lambda t: _hook(t, mlflow_run={"interval_s": float("nan")}), "MLflow.interval_s"),
    ("mlflow every 0", lambda t: _hook(t, mlflow_run={"log_every_n_steps": 0}), "MLflow.log_every_n_steps"),
    ("mlflow unknown", lambda t: _hook(t, mlflow_run={"pricePerHr": 1}), "MLflow.pricePerHr"),
    ("mlflow uri", lambda t: _hook(t, mlflow_run={"tracking_uri": 5}), "MLflow.tracking_uri"),
    ("mlflow log_run_dir", lambda t: _hook(t, mlflow_run={"log_run_dir": "sometimes"}), "MLflow.log_run_dir"),
    ("mlflow_run 5", lambda t: _hook(t, mlflow_run=5), "mlflow_run=5"),
    ("include_workers", lambda t: _hook(t, include_workers="some"), "include_workers='some'"),
    ("export_tensorboard", lambda t: ts.torch.Hook(str(t / "run"), export_tensorboard="maybe"), "export_tensorboard"),
    ("save_all", lambda t: _hook(t, save_all=3), "save_all=3"),
    ("dry_run", lambda t: _hook(t, dry_run="x"), "dry_run='x'"),
    ("local_gradients", lambda t: _hook(t, local_gradients=[1]), "local_gradients"),
    ("reduction_config", lambda t: _hook(t, reduction_config="min"), "reduction_config='min'"),
    ("save_config", lambda t: _hook(t, save_config=10), "save_config"),
    ("include_regex", lambda t: _hook(t, include_regex=5), "include_regex=5"),
    ("include_collections", lambda t: _hook(t, include_collections=5), "include_collections=5"),
    ("tensorboard_dir", lambda t: _hook(t, tensorboard_dir=5), "tensorboard_dir=5"),
    ("out_dir", lambda t: ts.torch.Hook(5), "out_dir=5"),
    ("rules", lambda t: _hook(t, rules=5), "rules=5"),
    (
        "rule param inf",
        lambda t: _hook(t, rules=[VanishingGradient]) and VanishingGradient(threshold="1e999"),
        "threshold='1e999'",
    ),
    ("profiler_config", lambda t: _hook(t, profiler_config=5), "profiler_config=5"),
    ("save_interval inf", lambda t: ts.SaveConfig(save_interval=_a(float("inf"))), "save_interval=inf"),
    ("save_interval 1e999", lambda t: ts.SaveConfig(save_interval=_a("1e999")), "save_interval='1e999'"),
    ("save_steps nan", lambda t: ts.SaveConfig(save_steps=[float("nan")]), "save_steps=nan"),
    ("save_steps dict", lambda t: ts.SaveConfig(save_steps={"a": 1}), "save_steps"),
    ("mode_save_configs", lambda t: ts.SaveConfig(mode_save_configs=_a([1])), "mode_save_configs"),
    ("mode config", lambda t: ts.SaveConfig(mode_save_configs={"train": 5}), "mode_save_configs.TRAIN=5"),
    ("reductions 5", lambda t: ts.ReductionConfig(reductions=_a(5)), "reductions=5"),
    ("save_shape", lambda t: ts.ReductionConfig(save_shape=_a("x")), "save_shape='x'"),
    ("profiler 5", lambda t: ProfilerConfig.from_dict(_a(5)), "ProfilerConfig=5"),
    ("profiler enabled", lambda t: ProfilerConfig(enabled=_a("maybe")), "enabled='maybe'"),
    ("profiler params", lambda t: ProfilerConfig(framework_profile_params=_a(5)), "framework_profile_params=5"),
    ("profile window nan", lambda t: FrameworkProfile.window(start_step=_a(float("nan"))), "start_step=nan"),
    ("profile duration inf", lambda t: FrameworkProfile.window(duration=_a("1e999")), "duration='1e999'"),
    ("rule threshold inf", lambda t: VanishingGradient(threshold=float("inf")), "threshold=inf"),
    ("rule str param", lambda t: ts.rules.LossNotDecreasing(mode=5), "mode=5"),
    ("json mlflow price", lambda t: _json(t, {"MLflow": {"price_per_hour": "cheap"}}), "MLflow.price_per_hour"),
    ("json include_workers", lambda t: _json(t, {"HookParameters": {"include_workers": "some"}}), "include_workers"),
    ("json save_interval", lambda t: _json(t, {"HookParameters": {"save_interval": "Infinity"}}), "save_interval"),
    (
        "json rule parameters",
        lambda t: _json(t, {"Rules": [{"name": "VanishingGradient", "parameters": 5}]}),
        "VanishingGradient.parameters=5",
    ),
    ("json profiler", lambda t: _json(t, {"ProfilerConfig": 5}), "ProfilerConfig=5"),
    ("json include_regex", lambda t: _json(t, {"HookParameters": {"include_regex": 5}}), "include_regex=5"),
    ("json reductions", lambda t: _json(t, {"HookParameters": {"reductions": 5}}), "reductions=5"),
    ("json tensorboard_dir", lambda t: _json(t, {"HookParameters": {"tensorboard_dir": 5}}), "tensorboard_dir=5"),
    ("json rules", lambda t: _json(t, {"Rules": "VanishingGradient"}), "Rules="),
    (
        "json collections",
        lambda t: _json(t, {"CollectionConfigurations": {"CollectionName": "w"}}),
        "CollectionConfigurations=",
    ),
    ("json local path", lambda t: hook_kwargs_from_dict({"LocalPath": 5}), "LocalPath=5"),
]


@pytest.mark.parametrize(("build", "key"), [(b, k) for _, b, k in BAD], ids=[n for n, _, _ in BAD])
def test_a_bad_value_fails_at_construction_naming_the_key(
    tmp_path: Path, build: Callable[[Path], Any], key: str
) -> None:
    with pytest.raises(ConfigError) as info:
        build(tmp_path)
    message = str(info.value)
    assert key in message and "\n" not in message, message


def test_a_bad_mlflow_option_in_a_json_config_fails_the_construction(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^MLflow\.price_per_hour='cheap': expected a finite number >= 0$"):
        _json(tmp_path, {"MLflow": {"price_per_hour": "cheap"}})
    assert not (tmp_path / "run").exists() or not any((tmp_path / "run").iterdir())


def test_good_values_are_still_accepted(tmp_path: Path) -> None:
    cfg = ts.SaveConfig(save_interval=_a("10"), save_steps="1,2", mode_save_configs={"eval": {"save_interval": 1}})
    assert cfg.should_save_step("eval", 3) and cfg.get_save_config("train").save_steps == (1, 2)
    assert ts.ReductionConfig.from_string(["min", "abs_max"]).names()[1].key == "abs_max"
    assert ProfilerConfig.from_dict({"ProfilerEnabled": "false"}).enabled is False
    assert VanishingGradient(threshold="1e-6").threshold == 1e-6
    run, opts = HookExtras(mlflow_run={"RunId": "a" * 32, "PricePerHour": "2", "interval_s": 0.5})._mlflow_options()
    assert run == "a" * 32 and opts == {"price_per_hour": 2.0, "interval_s": 0.5}
    assert HookExtras(mlflow_run="false")._mlflow_options() == (False, {})
    assert HookExtras(mlflow_run={"Enabled": "false"})._mlflow_options()[0] is False
    hook = _hook(
        tmp_path,
        include_workers="ALL",
        include_regex=(r for r in ["fc.*"]),
        dry_run=True,
        save_config=ts.SaveConfig(save_interval=5),
        mlflow_run=False,
    )
    assert hook.collector.include_workers == "all"
    hook.close()
    kwargs = hook_kwargs_from_dict(
        {
            "LocalPath": str(tmp_path / "j"),
            "HookParameters": {
                "save_interval": "5",
                "include_workers": "all",
                "reductions": ["mean"],
                "include_regex": ["a", "b"],
            },
            "Rules": [{"Name": "VanishingGradient", "Parameters": {"threshold": "0.001"}}],
            "MLflow": {"Enabled": False},
            "ProfilerConfig": {"SystemMonitorIntervalMillis": "100"},
        }
    )
    assert kwargs["rules"][0].threshold == 0.001 and kwargs["profiler_config"].system_monitor_interval_millis == 100


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("cfg") / "run"
    write_run(out)
    return out


@pytest.mark.parametrize("rule", [[], ["--rule", "VanishingGradient"]], ids=["all-rules", "one-rule"])
def test_an_infinite_rule_param_exits_2_in_one_line(
    run_dir: Path, capsys: pytest.CaptureFixture[str], rule: list[str]
) -> None:
    assert main(["rules", str(run_dir), *rule, "--param", "VanishingGradient.threshold=1e999"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["trainspect rules: --param VanishingGradient.threshold='1e999': expected a finite number >= 0"]
    assert main(["report", str(run_dir)]) == 0  # nothing bad was recorded: the report still works
    capsys.readouterr()


def test_mlflow_sync_to_a_dead_port_fails_fast_in_one_line(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens there once closed
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "trainspect.cli",
            "mlflow-sync",
            str(tmp_path),
            "--run-id",
            "0" * 32,
            "--tracking-uri",
            f"http://127.0.0.1:{port}",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=ROOT,
    )  # (it took 250 s once)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert f"127.0.0.1:{port} does not answer" in lines[0]


@pytest.mark.parametrize("reader", ["head -1", "true"])
def test_rules_into_a_closed_pipe_ends_quietly(run_dir: Path, reader: str) -> None:
    cmd = f'{sys.executable} -m trainspect.cli rules {run_dir} | {reader}; echo "status=${{PIPESTATUS[0]}}" >&2'
    proc = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert "Traceback" not in proc.stderr and "BrokenPipeError" not in proc.stderr, proc.stderr
    status = proc.stderr.strip().splitlines()[-1]
    assert status in ("status=0", "status=1", "status=141"), proc.stderr
