"""ProfilerConfig: defaults, JSON forms, validation."""

from __future__ import annotations

import json

import pytest

from trainspect.exceptions import ConfigError
from trainspect.profiler.config import FrameworkProfile, ProfileRange, ProfilerConfig


def test_defaults() -> None:
    cfg = ProfilerConfig()
    assert cfg.system_monitor_interval_millis == 500 and cfg.framework_profile_params is None
    fp = FrameworkProfile()
    assert (fp.detailed.start_step, fp.detailed.num_steps) == (5, 1)  # type: ignore[union-attr]
    assert (fp.dataloader.start_step, fp.dataloader.num_steps) == (7, 1)  # type: ignore[union-attr]
    assert (fp.python.start_step, fp.python.num_steps) == (9, 3)  # type: ignore[union-attr]


@pytest.mark.parametrize("bad", [0, 300, "fast", 500.5, True])
def test_bad_interval_names_key_value_and_choices(bad: object) -> None:
    with pytest.raises(ConfigError) as err:
        ProfilerConfig(system_monitor_interval_millis=bad)  # type: ignore[arg-type]
    text = str(err.value)
    assert "system_monitor_interval_millis" in text and repr(bad) in text and "100, 200, 500, 1000, 5000, 60000" in text


def test_mixed_windows_rejected() -> None:
    with pytest.raises(ConfigError, match="start_step.*start_unix_time"):
        ProfileRange(start_step=3, duration=10)
    with pytest.raises(ConfigError, match="not both"):
        ProfilerConfig.from_dict({"framework_profile_params": {"start_step": 1, "start_unix_time": 1e9}})


def test_smdebug_json_form_case_insensitive_strings() -> None:
    doc = {
        "ProfilingParameters": {
            "ProfilerEnabled": "true",
            "ProfilingIntervalInMilliseconds": "1000",
            "DetailedProfilingConfig": json.dumps({"StartStep": "4", "NumSteps": 2}),
            "PythonProfilingConfig": json.dumps({"StartStep": 9, "NumSteps": 1, "cProfileTimer": "cpu_time"}),
            "LocalPath": "/opt/ml/output/profiler",
        }
    }
    cfg = ProfilerConfig.from_dict(doc)
    assert cfg.system_monitor_interval_millis == 1000 and cfg.enabled
    fp = cfg.framework_profile_params
    assert fp is not None and fp.detailed == ProfileRange(start_step=4, num_steps=2)
    assert fp.cprofile_timer == "cpu_time" and fp.dataloader is None
    assert ProfilerConfig.from_dict({"disable_profiler": "True"}).enabled is False
    snake = ProfilerConfig.from_dict(
        {"SYSTEM_MONITOR_INTERVAL_MILLIS": 100, "framework_profile_params": {"StartStep": 2}}
    )
    assert snake.framework_profile_params == FrameworkProfile.window(start_step=2)
    assert ProfilerConfig.from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ConfigError, match="unknown key"):
        ProfilerConfig.from_dict({"interval": 100})


def test_windows() -> None:
    rng = ProfileRange(start_step=5, num_steps=2)
    assert [s for s in range(10) if rng.contains_step(s)] == [5, 6]
    assert ProfileRange().contains_step(3, first_step=3) and not ProfileRange().contains_step(4, first_step=3)
    timed = ProfileRange(start_unix_time=100.0, duration=10.0)
    assert timed.contains_time(105.0, 0.0) and not timed.contains_time(111.0, 0.0)
    assert not timed.contains_step(5)
