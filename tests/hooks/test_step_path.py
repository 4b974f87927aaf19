"""The per-step path of the PyTorch hook as a user sees it: where a forward pass ends without a hook on its end.

By default the hook puts only a forward pre-hook on a registered model (a forward hook would cost every step more
than the rest of a loss's recording); a registered model called inside a registered model's forward pass is found
on the call stack, and only when it would end the open step. Every callback of the path is guarded by the one guard,
compiled into the callback itself (``guarded(inline=True)``). Each test trains a tiny real model and reads the run
back with the Trial API.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import trainspect as ts
from trainspect.exceptions import TrainingStopped
from trainspect.hooks._guard import Guarded, guarded
from trainspect.hooks.torch_callbacks import ForwardTap
from trainspect.modes import ModeKeys

torch.set_num_threads(1)


def _x(seed: int) -> torch.Tensor:
    return torch.randn(3, 4, generator=torch.Generator().manual_seed(seed))


def _hook(out: Path, **settings: Any) -> ts.torch.Hook:
    return ts.torch.Hook(out, save_config=ts.SaveConfig(save_interval=1), **settings)


class _Flaky(nn.Module):
    """A model whose forward pass raises when asked to (a bad batch the script catches and skips)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, fail: bool = False) -> torch.Tensor:
        if fail:
            raise ValueError("bad batch")
        return self.lin(x)


class _Outer(nn.Module):
    """A registered model whose forward pass calls another registered model (a critic inside a generator's pass)."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner
        self.head = nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.inner(x))


def test_by_default_only_the_start_of_a_forward_pass_is_hooked_and_the_profiler_hooks_its_end(
    tmp_path: Path,
) -> None:
    plain, timed = nn.Linear(4, 2), nn.Linear(4, 2)
    hook = _hook(tmp_path / "plain")
    hook.register_module(plain)
    profiled = _hook(tmp_path / "timed", profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=500))
    profiled.register_module(timed)
    # the start is the model's own forward (a ForwardTap): no module hook, PyTorch's fast call path kept
    assert len(plain._forward_pre_hooks) == 0 and len(plain._forward_hooks) == 0
    assert len(timed._forward_pre_hooks) == 0 and len(timed._forward_hooks) == 1
    assert all(isinstance(vars(model)["forward"], ForwardTap) for model in (plain, timed))
    for model in (plain, timed):
        model(_x(0))
    assert hook.collector.global_step == 0 and profiled.collector.global_step == 0  # each pass began a step
    hook.close()
    profiled.close()
    assert len(timed._forward_hooks) == 0  # removed at close, and the class's forward is the models' again
    assert all("forward" not in vars(model) and model.forward.__func__ is nn.Linear.forward for model in (plain, timed))


def test_a_forward_pass_that_raised_leaves_the_next_calls_their_own_steps(tmp_path: Path) -> None:
    """No hook sees a forward pass end, so one that raised leaves nothing behind: each later call is a step."""
    model = _Flaky().eval()
    hook = _hook(tmp_path)
    hook.register_module(model)
    with torch.no_grad():
        model(_x(0))
        hook.save_scalar("call", 0.0)
        with pytest.raises(ValueError, match="bad batch"):
            model(_x(1), fail=True)
        for seed in (2, 3):
            model(_x(seed))
            hook.save_scalar("call", float(seed))
    hook.close()
    call = ts.create_trial(tmp_path).tensor("scalar/call")
    assert call.steps(mode=ModeKeys.EVAL) == [0, 2, 3]  # the failed call was step 1, with nothing saved
    assert [float(call.value(s, mode=ModeKeys.EVAL)) for s in (0, 2, 3)] == [0.0, 2.0, 3.0]


def test_a_registered_model_called_inside_another_ones_forward_pass_is_part_of_its_step(tmp_path: Path) -> None:
    inner = nn.Linear(4, 2)
    outer = _Outer(inner).eval()
    hook = _hook(tmp_path)
    hook.register_module(outer)
    hook.register_module(inner)
    with torch.no_grad():
        for seed in range(3):
            outer(_x(seed))
            hook.save_scalar("call", float(seed))
        inner(_x(9))  # called on its own: a step of its own
        hook.save_scalar("call", 9.0)
    hook.close()
    call = ts.create_trial(tmp_path).tensor("scalar/call")
    assert call.steps(mode=ModeKeys.EVAL) == [0, 1, 2, 3]
    assert float(call.value(3, mode=ModeKeys.EVAL)) == 9.0


def test_training_with_a_nested_model_is_one_step_per_optimizer_step(tmp_path: Path) -> None:
    torch.manual_seed(0)
    inner = nn.Linear(4, 2)
    outer = _Outer(inner)
    opt = torch.optim.SGD(outer.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(outer)
    hook.register_module(inner)
    seen = []
    for seed in range(4):
        loss = F.mse_loss(outer(_x(seed)), torch.zeros(3, 2))
        seen.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    loss_tensor = ts.create_trial(tmp_path).tensor("loss")
    assert loss_tensor.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3]
    assert [float(loss_tensor.value(s, mode=ModeKeys.TRAIN)) for s in range(4)] == pytest.approx(seen)


# --- the one guard, compiled into a callback ------------------------------------------------------------------------
class _Entry(Guarded):
    def __init__(self) -> None:
        self.calls = 0

    @guarded("fallback", inline=True)
    def event(self, value: int, scale: int = 2) -> Any:
        """An event callback."""
        self.calls += 1
        if value < 0:
            raise RuntimeError("internal")  # the line a traceback names
        if value == 0:
            raise TrainingStopped("StalledLoss", 3)
        return value * scale


def test_a_guard_compiled_into_a_callback_keeps_its_behaviour_name_and_lines(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    entry = _Entry()
    assert entry.event(3) == 6 and entry.event(3, scale=3) == 9
    assert _Entry.event.__name__ == "event" and _Entry.event.__doc__ == "An event callback."
    assert _Entry.event.__code__.co_filename == __file__ and _Entry.event.__wrapped__ is not None
    with pytest.raises(TrainingStopped):  # asked for by the user: passes through, the hook stays enabled
        entry.event(0)
    assert not entry.disabled
    with pytest.raises(RuntimeError) as raised:  # TRAINSPECT_TESTING (the suite's): re-raised
        entry.event(-1)
    frame = traceback.extract_tb(raised.value.__traceback__)[-1]
    assert frame.filename == __file__ and frame.line == 'raise RuntimeError("internal")  # the line a traceback names'
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        assert entry.event(-1) == "fallback"
        assert entry.disabled and entry.event(5) == "fallback"  # disabled: not called again
    assert entry.calls == 5
    assert [r.getMessage().count("internal error in _Entry.event") for r in caplog.records] == [1]


def test_a_callback_without_source_at_hand_is_wrapped_by_the_same_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    scope: dict[str, Any] = {}
    exec("def event(self, value):\n    raise RuntimeError('internal')\n", scope)  # noqa: S102  # no source file
    guarded_event = guarded(-1, inline=True)(scope["event"])
    assert guarded_event.__code__.co_filename != "<string>" or guarded_event.__wrapped__ is scope["event"]
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    entry = _Entry()
    assert guarded_event(entry, 1) == -1 and entry.disabled


def helper(value: int) -> int:
    """A module function of the same name as a guarded method below."""
    return value + 100


class _Base(Guarded):
    def event(self, value: int) -> int:
        return value + 1


class _Refusing(_Base):
    """Callbacks whose guard cannot be compiled into them: the wrapper guards them, with the same behaviour."""

    @guarded(-1, inline=True)
    def event(self, value: int) -> int:
        return super().event(value) * 2  # super() needs the class's cell

    @guarded(-1, inline=True)
    def twice(self, value: int) -> int:
        return super().event(value) * 2  # another method of the base, through super()

    @guarded(-1, inline=True)
    def helper(self, value: int) -> int:
        return helper(value)  # the module's function, not this method

    @guarded(-1, inline=True)
    def many(self, *values: int) -> int:
        return sum(values)

    @guarded(-1, inline=True)
    def steps(self, n: int) -> Any:
        yield from range(n)


def test_callbacks_the_guard_cannot_be_compiled_into_keep_their_meaning(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = _Refusing()
    assert entry.event(1) == 4 and entry.twice(1) == 4
    assert entry.helper(1) == 101
    assert entry.many(1, 2, 3) == 6
    assert list(entry.steps(3)) == [0, 1, 2]
    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    assert entry.many(1, "x") == -1 and entry.disabled  # type: ignore[arg-type]


def test_a_containers_later_child_joins_the_step_its_first_child_began_in_evaluation(tmp_path: Path) -> None:
    """A registered ``ModuleDict`` has no forward pass: its children drive its steps, one step per encoder call."""
    parts = nn.ModuleDict({"encoder": nn.Linear(4, 3), "decoder": nn.Linear(3, 2)}).eval()
    hook = _hook(tmp_path)
    hook.register_module(parts)
    with torch.no_grad():
        for seed in range(3):
            parts["decoder"](parts["encoder"](_x(seed)))
            hook.save_scalar("call", float(seed))
    opt = torch.optim.SGD(parts.parameters(), lr=0.1)
    parts.train()
    parts["decoder"](parts["encoder"](_x(5))).sum().backward()
    opt.step()  # ends the training step: none is open now
    parts.eval()
    with torch.no_grad():
        parts["decoder"](torch.zeros(2, 3))  # a later child called with no step open: it begins one
        hook.save_scalar("call", 9.0)
    hook.close()
    call = ts.create_trial(tmp_path).tensor("scalar/call")
    assert call.steps(mode=ModeKeys.EVAL) == [0, 1, 2, 3]
    assert float(call.value(3, mode=ModeKeys.EVAL)) == 9.0


def test_a_later_child_run_without_gradients_inside_a_training_step_stays_in_it(tmp_path: Path) -> None:
    """A frozen child called under ``no_grad`` in an open training step (a teacher, a target network) is no EVAL."""
    torch.manual_seed(0)
    parts = nn.ModuleDict({"student": nn.Linear(4, 2), "teacher": nn.Linear(4, 2)})
    opt = torch.optim.SGD(parts["student"].parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(parts)
    for seed in range(3):
        x = _x(seed)
        out = parts["student"](x)
        with torch.no_grad():
            target = parts["teacher"](x)
        F.mse_loss(out, target).backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2] and trial.steps(mode=ModeKeys.EVAL) == []


class _Recursive(nn.Module):
    """A model that calls itself on half its input (a tree-shaped net): when its outer pass began and ended."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.outer: list[tuple[float, float]] = []

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        began = time.time()
        out = self.lin(x)
        if depth:
            out = out + self(x, depth - 1)  # the inner passes end before the outer one goes on
            out = out * torch.sigmoid(self.lin(out))
        if depth == 2:
            self.outer.append((began, time.time()))
        return out


@pytest.mark.parametrize("follower", [False, True])
def test_a_model_that_calls_itself_is_timed_as_one_forward_pass_per_step(tmp_path: Path, follower: bool) -> None:
    """Under the profiler, the inner calls of a recursive model neither restart nor end its forward span: one span
    per call from outside, from before its outer pass began to after it ended; also as the later child of a
    registered ``ModuleDict`` (its children drive its steps: one span each)."""
    from trainspect.hooks.framework_metrics import SPAN_KINDS
    from trainspect.profiler.data import load_profiler_data

    net = _Recursive()
    parts = nn.ModuleDict({"stem": nn.Linear(4, 4), "net": net})
    model: nn.Module = parts if follower else net
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = _hook(tmp_path, profiler_config=ts.ProfilerConfig())
    hook.register_module(model)
    for seed in range(3):
        opt.zero_grad()
        out = net(parts["stem"](_x(seed))) if follower else net(_x(seed))
        out.pow(2).mean().backward()
        opt.step()
    hook.close()
    spans = load_profiler_data(tmp_path).framework["worker_0"].spans
    mine = spans["kind"] == SPAN_KINDS["forward"]
    starts, ends = spans["start"][mine], spans["end"][mine]
    assert len(starts) == 3 * (2 if follower else 1) and len(net.outer) == 3
    for began, ended in net.outer:  # seconds since the epoch, as time.time()
        assert ((starts <= began) & (ends >= ended)).sum() == 1


def test_under_the_profiler_a_forward_pass_reads_the_call_stack_once_at_its_start_and_once_at_its_end(
    tmp_path: Path,
) -> None:
    """Evaluation steps end at the next forward pass, which asks whether it runs inside the open one: the profiler's
    own question at that start is the same one, so the stack is read once there (it is read again at the end)."""
    model = nn.Linear(4, 2).eval()
    hook = _hook(tmp_path, profiler_config=ts.ProfilerConfig())
    hook.register_module(model)
    registry = hook._registry
    reads = []
    inside_forward = registry.inside_forward
    registry.inside_forward = lambda frame: reads.append(frame.f_code.co_name) or inside_forward(frame)
    with torch.no_grad():
        for seed in range(3):
            model(_x(seed))
    assert hook.collector.mode_steps[ModeKeys.EVAL] == 2  # three EVAL steps: 0, 1, 2
    hook.close()
    assert reads == ["_on_top_forward_pre", "_on_top_forward"] * 3


def test_a_loss_only_training_step_skips_the_parts_boundaries_once_its_captures_are_decided(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The steady step: after the first steps, a step that saves only its loss begins with the collector alone (the
    framework parts' step_beginning and step_began are not called), and every step is still recorded."""
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = _hook(tmp_path)
    hook.register_module(model)
    calls: list[str] = []
    for name in ("step_beginning", "step_began"):
        method = getattr(hook, name)
        monkeypatch.setattr(hook, name, lambda *a, _m=method, _n=name: calls.append(_n) or _m(*a))
    for seed in range(6):
        opt.zero_grad()
        model(_x(seed)).pow(2).mean().backward()
        opt.step()
        if seed == 1:
            calls.clear()  # the first steps open the run and decide the captures
    hook.close()
    assert calls == []
    assert ts.create_trial(tmp_path).tensor("loss").steps() == [0, 1, 2, 3, 4, 5]


@pytest.mark.parametrize("steps", [0, 1])
def test_nothing_recorded_is_said_only_of_a_run_without_a_step(tmp_path: Path, caplog, steps: int) -> None:
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with caplog.at_level(logging.WARNING):
        hook = _hook(tmp_path)
        hook.register_module(model)
        for seed in range(steps):
            model(_x(seed)).pow(2).mean().backward()
            opt.step()
        hook.close()
    said = [r for r in caplog.records if "nothing was recorded" in r.getMessage()]
    assert len(said) == (1 if steps == 0 else 0)
