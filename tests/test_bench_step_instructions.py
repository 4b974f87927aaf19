"""The instruction-count benchmark's own parts: its floor does the default capture's steady-step work, its reader
takes the marker windows of the training thread in order (the counting itself needs valgrind: not run here)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_step_instructions as bsi  # noqa: E402


def _train(model: nn.Module, loss_fn: nn.Module, steps: int) -> list[float]:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = loss_fn(model(torch.ones(4, 3)), torch.zeros(4, 2))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_minimal_recorder_queues_each_step_its_loss_under_both_names_and_detaches():
    model, loss_fn = nn.Linear(3, 2), nn.MSELoss()
    queue: collections.deque = collections.deque()
    detach = bsi._minimal_recorder(model, loss_fn, queue)
    losses = _train(model, loss_fn, 3)
    assert [item[0] for item in queue] == [1, 2, 3]
    for (_, _, values), loss in zip(queue, losses, strict=True):
        assert values == {"MSELoss_output_0": loss, "loss": loss}
    detach()
    _train(model, loss_fn, 2)
    assert len(queue) == 3
    assert torch.autograd.backward.__module__ == "torch.autograd"


def test_minimal_recorder_keeps_an_eval_pass_out_of_the_open_training_step():
    model, loss_fn = nn.Linear(3, 2), nn.MSELoss()
    queue: collections.deque = collections.deque()
    detach = bsi._minimal_recorder(model, loss_fn, queue)
    try:
        with torch.no_grad():
            model.eval()
            model(torch.ones(1, 3))  # an evaluation pass opens a step of its own (never queued: no optimizer)
        model.train()
        _train(model, loss_fn, 1)
    finally:
        detach()
    assert [item[0] for item in queue] == [2]


def test_read_dumps_takes_the_training_threads_marker_windows_in_order(tmp_path: Path):
    def dump(name: str, trigger: str, total: int) -> None:
        (tmp_path / name).write_text(f"version: 1\ndesc: Trigger: {trigger}\nevents: Ir\nsummary: {total}\n")

    dump("cg.10-01", "Client Request / dump-before getpgrp", 300)
    dump("cg.2-01", "Client Request / dump-before getpgrp", 100)
    dump("cg.2-02", "Client Request / dump-before getpgrp", 999)  # another thread
    dump("cg.3-01", "Program termination", 777)  # not a window
    dump("cg.5-01", "Client Request / dump-before getpgrp", 200)
    assert bsi._read_dumps(tmp_path) == [100, 200, 300]
