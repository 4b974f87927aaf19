"""Issue 2: Hook.create_from_json_file (spec 5.2) and configuration errors raised at construction."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import torch
from hooktrain import LOSS, Tiny, tname

import trainspect as ts
from trainspect.modes import ModeKeys

W0, G0 = tname("0.weight"), f"gradient/{tname('0.weight')}"


def _write(tmp_path, doc):
    path = tmp_path / "cfg.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return path


def _run(hook, train=5, evaluate=3):
    tiny = Tiny()
    tiny.register(hook)
    hook.set_mode(ModeKeys.TRAIN)
    tiny.train(train)
    hook.set_mode(ModeKeys.EVAL)
    tiny.evaluate(evaluate)
    hook.close()
    return tiny


CONFIG = {
    "localpath": None,  # filled in
    "HOOKPARAMETERS": {
        "Save_Interval": "2",
        "eval.save_interval": "1",
        "export_tensorboard": "false",
        "include_regex": r"2\.bias$",
    },
    "CollectionConfigurations": [
        {"CollectionName": "weights", "CollectionParameters": {"train.save_steps": "1,3", "save_interval": "4"}},
        {
            "collectionname": "gradients",
            "collectionparameters": {"reductions": "mean,abs_max,l2", "SAVE_INTERVAL": "3"},
        },
    ],
}


def _check(out_dir, tiny):
    trial = ts.create_trial(out_dir)
    w = trial.tensor(W0)
    assert w.steps(mode=ModeKeys.TRAIN) == [0, 1, 3, 4]
    assert w.steps(mode=ModeKeys.EVAL) == [0]
    g = trial.tensor(G0)
    assert g.steps(mode=ModeKeys.TRAIN) == [0, 3]
    assert g.has_reductions_only(3)
    np.testing.assert_allclose(
        g.reduction_value(3, "max", abs=True), np.abs(tiny.log[3].grads["0.weight"]).max(), rtol=1e-6
    )
    bias = trial.tensor(tname("2.bias"))  # include_regex, hook save config: train every 2, eval every 1
    assert bias.steps(mode=ModeKeys.TRAIN) == [0, 2, 4]
    assert bias.steps(mode=ModeKeys.EVAL) == [0, 1, 2]
    assert trial.tensor(LOSS).steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3, 4]
    assert not list(out_dir.glob("events.out.tfevents*"))  # export_tensorboard "false"


def test_create_from_json_file_path(tmp_path):
    out = tmp_path / "run"
    path = _write(tmp_path, {**CONFIG, "localpath": str(out)})
    tiny = _run(ts.torch.Hook.create_from_json_file(path))
    _check(out, tiny)


def test_create_from_json_file_env(tmp_path, monkeypatch):
    out = tmp_path / "run"
    path = _write(tmp_path, {**CONFIG, "localpath": str(out)})
    monkeypatch.setenv("TRAINSPECT_CONFIG", str(path))
    tiny = _run(ts.torch.Hook.create_from_json_file())
    _check(out, tiny)


@pytest.mark.parametrize(
    ("hook_params", "collections", "words"),
    [
        ({"save_intervall": "2"}, [], ["save_intervall", "save_interval"]),
        ({"save_interval": "-1"}, [], ["save_interval", "-1", ">= 1"]),
        ({"save_interval": "often"}, [], ["save_interval", "often", "integer"]),
        ({"reductions": "mean,median"}, [], ["median", "allowed", "l2"]),
        ({"train.save_all": "true"}, [], ["train.save_all"]),
        ({}, [{"CollectionName": "weights", "CollectionParameters": {"colour": "red"}}], ["colour", "include_regex"]),
        ({"save_all": "maybe"}, [], ["save_all", "maybe", "true"]),
    ],
)
def test_invalid_json_config_raises_config_error_naming_key_and_value(tmp_path, hook_params, collections, words):
    path = _write(
        tmp_path,
        {"LocalPath": str(tmp_path / "run"), "HookParameters": hook_params, "CollectionConfigurations": collections},
    )
    with pytest.raises(ts.ConfigError) as err:
        ts.torch.Hook.create_from_json_file(path)
    for word in words:
        assert word in str(err.value)
    assert not (tmp_path / "run" / "trainspect.json").exists()


def test_malformed_json_names_the_position(tmp_path):
    path = _write(tmp_path, '{"LocalPath": "x",\n "HookParameters": {"save_interval": 2,}}')
    with pytest.raises(ts.ConfigError, match=r"not valid JSON.*line 2"):
        ts.torch.Hook.create_from_json_file(path)


def test_missing_json_file(tmp_path):
    with pytest.raises(ts.ConfigError, match="cannot be read"):
        ts.torch.Hook.create_from_json_file(tmp_path / "nope.json")


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"include_collections": ["weigths"]}, ["weigths", "weights", "gradients"]),
        ({"save_config": ts.SaveConfig}, ["save_config"]),
        ({"include_workers": "some"}, ["include_workers", "some", "'all'"]),
    ],
)
def test_invalid_hook_arguments_raise_at_construction(out_dir, kwargs, words):
    with pytest.raises(ts.ConfigError) as err:
        ts.torch.Hook(out_dir, **kwargs)
    for word in words:
        assert word in str(err.value)


@pytest.mark.parametrize(
    ("make", "words"),
    [
        (lambda: ts.SaveConfig(save_interval=-5), ["save_interval", "-5", ">= 1"]),
        (lambda: ts.SaveConfig(save_interval=0), ["save_interval", "0"]),
        (lambda: ts.SaveConfig(start_step=-1), ["start_step", "-1"]),
        (lambda: ts.SaveConfig(mode_save_configs={"TRAINING": {"save_interval": 1}}), ["TRAINING"]),
        (lambda: ts.SaveConfig(mode_save_configs={"TRAIN": {"interval": 1}}), ["interval", "save_interval"]),
        (lambda: ts.ReductionConfig(reductions=["median"]), ["reductions", "median", "prod"]),
        (lambda: ts.ReductionConfig(norms=["l3"]), ["norms", "l3", "l2"]),
        (lambda: ts.Collection("bad", include_regex=["(unclosed"]), ["bad", "(unclosed"]),
    ],
)
def test_invalid_config_objects(make, words):
    with pytest.raises(ts.ConfigError) as err:
        make()
    for word in words:
        assert word in str(err.value)


def test_out_dir_that_cannot_be_created_warns_once_and_training_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        hook = ts.torch.Hook(blocker / "run", include_collections=["weights", "losses"])
        hook.register_module(model)
        for _ in range(3):
            opt.zero_grad()
            model(torch.ones(1, 2)).sum().backward()
            opt.step()
        hook.close()
    said = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(said) == 1 and "out_dir=" in said[0] and "Not a directory" in said[0], said
    assert blocker.read_text() == "x"
