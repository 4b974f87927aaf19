"""What a backlog of loss-only steps leaves to Python's garbage collector: steps the writer has not reached yet are
tuples of atoms, which the collector stops tracking at its first collection (see ``RunWriter.submit_scalars``).

Tracked, they would be moved to older generations collection after collection, and the full collections that follow
walk the whole heap on the training thread (docs/architecture.md, "What the garbage collector sees")."""

from __future__ import annotations

import gc

import numpy as np
import torch
from torch import nn

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.step import collection_atoms
from trainspect.store import run_writer
from trainspect.store.layout import RunLayout
from trainspect.store.run_writer import RunWriter

torch.set_num_threads(1)


def _tracked() -> int:
    gc.collect()
    return len(gc.get_objects())


def test_queued_loss_only_steps_are_not_tracked_by_the_garbage_collector(tmp_path) -> None:
    writer = RunWriter(RunLayout(tmp_path), "worker_0")  # not started: every step stays queued
    losses = collection_atoms(frozenset({"losses"}))
    float32 = np.dtype(np.float32)
    before = _tracked()
    for step in range(1000):
        scalars = [("loss", 0.5 + step, float32, losses), ("MSELoss_output_0", 0.5 + step, float32, losses)]
        writer.submit_scalars((ModeKeys.TRAIN, step, step, 1.0 + step), scalars)
    assert _tracked() - before < 20  # six per step (a list, its tuples, the key with its enum member) before


def test_a_hook_s_backlog_of_loss_steps_is_not_tracked_and_every_loss_is_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(run_writer, "FLUSH_INTERVAL", 3600.0)  # the writer waits: the steps stay queued until close
    torch.manual_seed(0)
    model, loss_fn = nn.Linear(4, 1), nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    hook = ts.torch.Hook(str(tmp_path))
    hook.register_module(model)
    hook.register_loss(loss_fn)

    def train(steps: int) -> list[float]:
        values = []
        for _ in range(steps):
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            values.append(loss.item())
        return values

    values = train(20)  # the run is open, its first steps' collections and names are noted
    before = _tracked()
    values += train(500)
    grown = _tracked() - before
    hook.close()
    assert grown < 100  # ~3,000 (six per step) when the steps were queued as lists of tuples and enum members
    trial = ts.create_trial(str(tmp_path))
    for name in ("loss", "MSELoss_output_0"):
        steps = trial.tensor(name).steps()
        assert steps == list(range(520))
        assert [trial.tensor(name).value(s).item() for s in steps] == np.float32(values).tolist()
