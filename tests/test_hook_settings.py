"""The hook's settings are declared once (trainspect/hook_settings.py): hooks, JSON configs and docs follow (issue 33)."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

import trainspect as ts
from trainspect.exceptions import ConfigError
from trainspect.hook_config import hook_kwargs_from_dict
from trainspect.hook_settings import SETTINGS, check_settings, defaults, markdown_table

ROOT = Path(__file__).resolve().parents[1]


def test_each_hooks_signature_is_its_rows_of_the_table() -> None:
    torch_names = list(inspect.signature(ts.torch.Hook).parameters)
    keras_names = list(inspect.signature(ts.keras.Hook).parameters)
    assert torch_names == [s.name for s in SETTINGS]
    assert keras_names == [s.name for s in SETTINGS if "tensorflow" in s.frameworks]
    assert "local_gradients" in torch_names and "local_gradients" not in keras_names
    assert inspect.signature(ts.torch.Hook).parameters["on_backlog"].default == "degrade"


def test_the_docs_table_is_made_from_the_declaration() -> None:
    doc = (ROOT / "docs" / "configuration.md").read_text()
    assert markdown_table() in doc
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in doc


def test_an_unknown_setting_names_the_allowed_ones(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"save_confg: not a setting of this hook; allowed: out_dir, export_tensorboard"
    ):
        ts.torch.Hook(tmp_path, save_confg=ts.SaveConfig(save_interval=1))
    with pytest.raises(ConfigError, match="local_gradients: not a setting"):
        ts.keras.Hook(str(tmp_path), local_gradients=True)
    with pytest.raises(ConfigError, match="out_dir: required"):
        check_settings("pytorch", {})


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("on_backlog", "drop", "on_backlog='drop': allowed: 'degrade', 'block'"),
        ("include_workers", 2, "include_workers=2: allowed: 'one', 'all'"),
        ("dry_run", "maybe", "dry_run='maybe': expected a boolean"),
        ("save_config", 5, "save_config=5: expected a SaveConfig or None"),
        ("include_collections", [1], "expected a list of collection names"),
        ("profiler_config", 5, "expected a ProfilerConfig"),
    ],
)
def test_each_kind_of_bad_value_fails_at_construction(tmp_path: Path, key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError) as err:
        ts.torch.Hook(tmp_path, **{key: value})
    assert message in str(err.value)


def test_json_hook_parameters_are_the_tables_rows() -> None:
    kwargs = hook_kwargs_from_dict(
        {
            "LocalPath": "/tmp/x",
            "HookParameters": {"on_backlog": "BLOCK", "dry_run": "true", "include_regex": "a.*,b.*"},
        }
    )
    assert kwargs["on_backlog"] == "block" and kwargs["dry_run"] is True and kwargs["include_regex"] == ["a.*", "b.*"]
    with pytest.raises(ConfigError, match="HookParameters: unknown key 'save_confg'"):
        hook_kwargs_from_dict({"LocalPath": "/tmp/x", "HookParameters": {"save_confg": "1"}})


def test_defaults_are_the_tables() -> None:
    assert defaults("pytorch")["include_workers"] == "one"
    assert "out_dir" not in defaults("pytorch") and "local_gradients" not in defaults("tensorflow")
