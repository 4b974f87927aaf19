"""The backward pass's synchronisation wait (``backward_sync`` spans): the timer, the hook, the readers."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

import trainspect as ts  # noqa: E402
from trainspect.hooks.framework_metrics import FrameworkRecorder  # noqa: E402
from trainspect.hooks.torch_backward import LossTap  # noqa: E402
from trainspect.hooks.torch_sync_timer import SyncTimer, graph_leaves  # noqa: E402
from trainspect.modes import ModeKeys  # noqa: E402
from trainspect.profiler import FrameworkMetricsReader, load_profiler_data  # noqa: E402

SYNC = 5


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))


def _hooked(model: nn.Module) -> list[nn.Parameter]:
    return [p for p in model.parameters() if p._post_accumulate_grad_hooks]


def test_the_hook_records_one_sync_wait_per_backward_inside_its_step(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(tmp_path, include_collections=["losses"], profiler_config=ts.ProfilerConfig())
    hook.register_module(model)
    assert len(LossTap.current().timers) == 1
    for _ in range(6):
        opt.zero_grad()
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
    assert len(_hooked(model)) == 2  # after learning, only the last two leaves keep a hook
    hook.close()
    assert LossTap.current() is None and _hooked(model) == []
    tab = load_profiler_data(tmp_path).framework["worker_0"]
    sync = tab.spans["kind"] == SYNC
    assert tab.spans["global_step"][sync].tolist() == list(range(6))
    backward = tab.spans["kind"] == 2
    for s, e in zip(tab.spans["start"][sync], tab.spans["end"][sync], strict=True):  # inside a backward span
        assert ((tab.spans["start"][backward] <= s) & (e <= tab.spans["end"][backward])).any()


def test_no_timer_without_the_profiler(tmp_path: Path) -> None:
    model = _model()
    hook = ts.torch.Hook(tmp_path, include_collections=["losses"])
    hook.register_module(model)
    model(torch.randn(4, 8)).sum().backward()
    assert LossTap.current().timers == () and _hooked(model) == []
    hook.close()


def test_the_watched_leaves_are_the_last_gradients_and_the_wait_follows_them(tmp_path: Path) -> None:
    model = _model()
    first = model[0]
    rec = FrameworkRecorder(tmp_path, "worker_0")
    rec.start()
    timer = SyncTimer(rec)
    timer.start()

    def slow_end(_leaf: torch.Tensor) -> None:  # registered after the timer's: a wait after the last gradient
        time.sleep(0.05)

    for step in range(4):
        rec.on_step_start(ModeKeys.TRAIN, step, step)
        model(torch.randn(4, 8)).sum().backward()
        if step == 0:
            assert {id(p) for p in _hooked(model)} == {id(first.weight), id(first.bias)}  # the first layer's
            first.weight.register_post_accumulate_grad_hook(slow_end)
            first.bias.register_post_accumulate_grad_hook(slow_end)
        rec.on_step_end(ModeKeys.TRAIN, step, step)
    timer.close()
    rec.close()
    tab = load_profiler_data(tmp_path).framework["worker_0"]
    waits = (tab.spans["end"] - tab.spans["start"])[tab.spans["kind"] == SYNC]
    assert len(waits) == 4
    assert np.all(waits[1:] >= 0.05)  # the sleeps come after the last gradients, inside backward()


def test_another_graph_is_learned_at_its_next_backward_pass(tmp_path: Path) -> None:
    a, b = _model(), _model()
    rec = FrameworkRecorder(tmp_path, "worker_0")
    rec.start()
    timer = SyncTimer(rec, max_learns=2)
    timer.start()
    a(torch.randn(2, 8)).sum().backward()  # learns a
    b(torch.randn(2, 8)).sum().backward()  # none of a's leaves: nothing recorded, b is learned next time
    b(torch.randn(2, 8)).sum().backward()  # learns b (the second and last learn)
    a(torch.randn(2, 8)).sum().backward()
    b(torch.randn(2, 8)).sum().backward()
    c = _model()
    c(torch.randn(2, 8)).sum().backward()  # no more learning
    c(torch.randn(2, 8)).sum().backward()
    assert len(_hooked(a)) == len(_hooked(b)) == 2 and _hooked(c) == []
    timer.close()
    rec.close()
    assert (load_profiler_data(tmp_path).framework["worker_0"].spans["kind"] == SYNC).sum() == 4


def test_gradient_accumulation_records_each_backward_pass(tmp_path: Path) -> None:
    model = _model()
    rec = FrameworkRecorder(tmp_path, "worker_0")
    rec.start()
    timer = SyncTimer(rec)
    timer.start()
    for step in range(3):
        rec.on_step_start(ModeKeys.TRAIN, step, step)
        for _ in range(2):
            model(torch.randn(2, 8)).sum().backward()
        rec.on_step_end(ModeKeys.TRAIN, step, step)
    timer.close()
    rec.close()
    tab = load_profiler_data(tmp_path).framework["worker_0"]
    assert tab.spans["global_step"][tab.spans["kind"] == SYNC].tolist() == [0, 0, 1, 1, 2, 2]


def test_graph_leaves_are_the_accumulated_tensors() -> None:
    model = _model()
    x = torch.randn(2, 8, requires_grad=True)
    leaves = graph_leaves(model(x).sum())
    assert {id(t) for t in leaves} == {id(p) for p in model.parameters()} | {id(x)}
    assert graph_leaves(torch.ones(2)) == [] and graph_leaves([]) == []


def test_a_failing_timer_stops_with_one_warning_and_training_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    model = _model()
    rec = FrameworkRecorder(tmp_path, "worker_0")
    monkeypatch.setattr(rec, "record_span", lambda *a, **k: 1 / 0)
    timer = SyncTimer(rec)
    timer.start()
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            model(torch.randn(2, 8)).sum().backward()
    assert [r.getMessage() for r in caplog.records if "synchronisation" in r.getMessage()] == [
        "trainspect: timing the backward pass's synchronisation failed (ZeroDivisionError: division by zero); it is "
        "no longer recorded, training goes on"
    ]
    assert (LossTap.current() is None or LossTap.current().timers == ()) and _hooked(model) == []
    assert model[0].weight.grad is not None


def test_readers_show_sync_waits_and_skip_span_kinds_they_do_not_know(tmp_path: Path) -> None:
    rec = FrameworkRecorder(tmp_path, "worker_0")
    rec.start()
    rec.on_step_start(ModeKeys.TRAIN, 0, 0)
    now = time.time()
    rec.record_span("backward", now, now + 0.01)
    rec.record_span("backward_sync", now + 0.005, now + 0.01, 0)
    rec.on_step_end(ModeKeys.TRAIN, 0, 0)
    with rec._lock:
        rec._spans.append((9, now, now + 0.001, 0, -1))  # a kind of a newer trainspect
    rec.close()
    reader = FrameworkMetricsReader(tmp_path)
    names = [e.event_name for e in reader.get_events(0, now + 10)]
    assert sorted(names) == [
        "Backward",
        "BackwardSync",
        "Finalization",
        "Initialization",
        "Step:ModeKeys.TRAIN",
        "TrainingLoop",
    ]
    kinds = reader.read_tables()["worker_0"].spans_df()["kind"].tolist()
    assert kinds == ["backward", "9", "backward_sync"]  # by start time
