"""When writing falls behind training: losses and scalars are never dropped, raw tensors are, and every gap is listed.

The writer is held (its first write waits for the test) so a backlog builds whatever the machine's speed; the byte
budget is made small so the second queued step already exceeds it.
"""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

import trainspect as ts
from trainspect.cli import main
from trainspect.mlflow_plugin.keys import run_tags
from trainspect.report.context import ReportContext
from trainspect.store import run_writer, tensor_file
from trainspect.store.gaps import read_gaps

STEPS = 30


def _train(out: Path, on_backlog: str, hold: threading.Event, monkeypatch: pytest.MonkeyPatch) -> torch.nn.Module:
    monkeypatch.setattr(run_writer, "MAX_PENDING_BYTES", 1 << 16)  # 64 KiB: one step of raw values is 1 MB
    original = tensor_file.TensorFileWriter.write

    def held_write(self: object, record: object) -> None:
        hold.wait(60)  # the writer falls behind: every later step queues
        original(self, record)  # type: ignore[arg-type]

    monkeypatch.setattr(tensor_file.TensorFileWriter, "write", held_write)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = ts.torch.Hook(
        str(out),
        include_collections=["weights", "gradients", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
        reduction_config=ts.ReductionConfig(reductions=["mean"], save_raw_tensor=True),
        on_backlog=on_backlog,
    )
    hook.register_module(model)
    x, y = torch.randn(16, 256), torch.randint(0, 2, (16,))
    if on_backlog == "block":
        hold.set()  # training waits for each write to finish (its bytes count until then): the writer must not hang
    for step in range(STEPS):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        hook.save_scalar("lr", 0.01)
        if step == STEPS - 1:
            hold.set()
    hook.close()
    return model


def test_a_backlog_keeps_every_loss_and_scalar_and_lists_every_gap(tmp_path: Path, monkeypatch, capsys) -> None:
    out = tmp_path / "run"
    _train(out, "degrade", threading.Event(), monkeypatch)
    trial = ts.create_trial(out)
    assert trial.steps(ts.modes.TRAIN) == list(range(STEPS))  # no step lost whole
    assert trial.tensor("loss").steps() == list(range(STEPS))
    assert trial.tensor("scalar/lr").steps() == list(range(STEPS))
    gaps = read_gaps(out)
    assert gaps, "the held writer must have fallen behind"
    gapped = {g["step"] for g in gaps}
    weight = trial.tensor("Sequential_0.weight")
    for step in range(STEPS):
        has_raw = weight.value(step) is not None if step not in gapped else None
        if step in gapped:
            assert {d[0] for g in gaps if g["step"] == step for d in g["dropped"]} >= {"Sequential_0.weight"}
            assert weight.reduction_value(step, "mean") is not None  # the reductions were kept
        else:
            assert has_raw
    assert all(g["reason"] == "writer backlog" for g in gaps)
    assert any("not written" in p and "writer backlog" in p for p in trial.problems)
    # every reader says so: the report, `trainspect info`, the rules, MLflow's tag
    assert any("writer backlog" in p for p in ReportContext.load(out, evaluate_profiler_rules=False).problems)
    assert main(["info", str(out)]) == 0
    assert "problem: " in capsys.readouterr().out
    (partial,) = ts.rules.evaluate(trial, [ts.rules.VanishingGradient()], write=False)  # judged the steps it had
    assert any("writer backlog" in p for p in partial.details["damaged_files"])
    assert run_tags(out)["trainspect.gaps"].startswith("raw values of")


def test_block_makes_training_wait_and_keeps_everything(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "run"
    _train(out, "block", threading.Event(), monkeypatch)
    trial = ts.create_trial(out)
    assert read_gaps(out) == []
    assert [s for s in range(STEPS) if isinstance(trial.tensor("Sequential_0.weight").value(s), np.ndarray)] == list(
        range(STEPS)
    )


def test_an_unknown_backlog_policy_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ts.exceptions.ConfigError, match="on_backlog='drop'.*'degrade', 'block'"):
        ts.torch.Hook(str(tmp_path / "run"), on_backlog="drop")
