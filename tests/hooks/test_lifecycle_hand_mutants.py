"""The step lifecycle as a user sees it, pinned where hand-made mutants of the hooks survived the other tests.

Each test trains a tiny real PyTorch model through a ``trainspect.torch.Hook`` (or drives a real collector) and
reads the run back with the Trial API: which steps are recorded in which mode, where a loss or a saved scalar lands,
what a mode switch, ``hook.end_step()``, an optimizer created late, an explicit ``set_mode`` or ``close()`` twice
does. The behaviour pinned is the documented one (docs/architecture.md, "The step driver and the public step API";
the docstrings of ``trainspect.hooks.step_driver``, ``step_state`` and ``torch_hook``), not the code's shape.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import trainspect as ts
from trainspect.hook_settings import check_settings
from trainspect.hooks.collector import Collector
from trainspect.modes import ModeKeys
from trainspect.rules import ExplodingTensor

torch.set_num_threads(1)


def _model() -> nn.Linear:
    torch.manual_seed(0)
    return nn.Linear(4, 2)


def _batch(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(3, 4, generator=gen), torch.randn(3, 2, generator=gen)


def _hook(out: Path, *collections: str, **settings: object) -> ts.torch.Hook:
    settings.setdefault("save_config", ts.SaveConfig(save_interval=1))
    return ts.torch.Hook(out, include_collections=["losses", *collections], **settings)


def _train_step(model: nn.Module, opt: torch.optim.Optimizer, seed: int, micro: int = 1) -> list[float]:
    """One optimizer step over ``micro`` micro-batches; return their losses."""
    losses = []
    for i in range(micro):
        x, y = _batch(seed * 10 + i)
        loss = F.mse_loss(model(x), y)
        losses.append(loss.item())
        loss.backward()
    opt.step()
    opt.zero_grad()
    return losses


def _trial(out: Path) -> ts.Trial:
    return ts.create_trial(out)


def _trained(out: Path, steps: int, *collections: str, **settings: object) -> ts.torch.Hook:
    """A hook (see ``_hook``) on a fresh model that trained ``steps`` steps; left open."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(out, *collections, **settings)
    hook.register_module(model)
    for seed in range(steps):
        _train_step(model, opt, seed)
    return hook


# --- modes: which call ends which mode's step ---------------------------------------------------------------------
def test_an_explicit_mode_holds_whatever_mode_the_model_is_in(tmp_path: Path) -> None:
    model = _model()
    model.train()  # the model trains, but the script said EVAL: the hook's mode no longer follows the model
    hook = _hook(tmp_path)
    hook.register_module(model)
    hook.set_mode("eval")
    for seed in range(3):
        x, y = _batch(seed)
        F.mse_loss(model(x), y)
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.EVAL) == [0, 1, 2]
    assert trial.steps(mode=ModeKeys.TRAIN) == []


def test_a_no_grad_forward_before_any_step_is_an_eval_step_even_in_train_mode(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    with torch.no_grad():  # a sanity check before training: no step is open, so it is no micro-batch of one
        F.mse_loss(model(_batch(0)[0]), _batch(0)[1])
    _train_step(model, opt, 1)
    hook.close()
    trial = _trial(tmp_path)
    assert trial.mode(0) is ModeKeys.EVAL and trial.mode_step(0) == 0
    assert trial.mode(1) is ModeKeys.TRAIN and trial.mode_step(1) == 0


def test_a_backward_pass_outside_any_step_opens_a_training_step(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    seen = []
    for seed in range(2):
        x, y = _batch(seed)
        loss = F.mse_loss(model.forward(x), y)  # model.forward(x): no forward hook runs, the backward pass opens it
        seen.append(loss.item())
        loss.backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.steps(mode=ModeKeys.GLOBAL) == [0, 1] and trial.modes() == [ModeKeys.TRAIN]
    for step, value in enumerate(seen):
        assert float(trial.tensor("loss").value(step, mode=ModeKeys.TRAIN)) == pytest.approx(value)


def test_global_mode_steps_end_at_the_optimizer_step_and_accumulate_like_train(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    hook.set_mode("global")
    seen = [_train_step(model, opt, seed, micro=2) for seed in range(3)]
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps() == [0, 1, 2] and trial.modes() == [ModeKeys.GLOBAL]
    for step, values in enumerate(seen):
        np.testing.assert_allclose(trial.tensor("loss_micro_batches").value(step), values, rtol=1e-6)


# --- driven vs inferred -----------------------------------------------------------------------------------------------
def test_end_step_drives_only_the_current_mode_and_training_stays_inferred(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    _train_step(model, opt, 0)
    model.eval()
    with torch.no_grad():
        x, y = _batch(1)
        F.mse_loss(model(x), y)  # an inferred EVAL step ...
    hook.end_step()  # ... that the script ends: EVAL is driven from now on, TRAIN is not
    model.train()
    _train_step(model, opt, 2)
    _train_step(model, opt, 3)
    model.eval()
    with torch.no_grad():
        x, y = _batch(4)
        F.mse_loss(model(x), y)  # EVAL is driven: this forward pass begins no step of its own
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert trial.steps(mode=ModeKeys.EVAL) == [0]
    assert [trial.mode(s) for s in trial.steps()] == [ModeKeys.TRAIN, ModeKeys.EVAL, ModeKeys.TRAIN, ModeKeys.TRAIN]


# --- gradient accumulation --------------------------------------------------------------------------------------------
def test_accumulation_is_one_step_per_optimizer_step_even_when_the_optimizer_comes_late(tmp_path: Path) -> None:
    model = _model()
    hook = _hook(tmp_path)
    hook.register_module(model)
    for seed in range(2):  # no optimizer yet: every forward pass is a step
        x, y = _batch(seed)
        F.mse_loss(model(x), y).backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)  # created after the first steps
    seen = [_train_step(model, opt, seed, micro=2) for seed in (5, 6, 7)]  # its micro-batches accumulate at once
    hook.close()
    trial = _trial(tmp_path)
    steps = trial.steps(mode=ModeKeys.TRAIN)
    assert steps == [0, 1, 2, 3, 4]  # two steps without an optimizer, then one per optimizer step
    for step, values in zip(steps[-3:], seen, strict=True):  # each micro-batch in its optimizer step
        np.testing.assert_allclose(
            trial.tensor("loss_micro_batches").value(step, mode=ModeKeys.TRAIN), values, rtol=1e-6
        )


# --- losses: at which step they land ----------------------------------------------------------------------------------
def test_a_loss_computed_before_a_steps_forward_pass_joins_that_step(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    _train_step(model, opt, 0)
    reg = F.l1_loss(model.weight, torch.zeros_like(model.weight))  # between steps, before the next forward pass
    x, y = _batch(1)
    (F.mse_loss(model(x), y) + reg).backward()
    opt.step()
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.tensor("L1Loss_output_0").steps(mode=ModeKeys.TRAIN) == [1]
    assert float(trial.tensor("L1Loss_output_0").value(1, mode=ModeKeys.TRAIN)) == pytest.approx(reg.item())
    assert "L1Loss_output_0" in trial.tensor_names(collection="losses")  # a loss like any other: the rules see it


def test_a_loss_held_between_steps_is_dropped_when_an_optimizer_steps_first(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    _train_step(model, opt, 0)
    F.l1_loss(model.weight, torch.zeros_like(model.weight))  # held for the next step ...
    opt.step()  # ... but an optimizer steps before it begins: the loss belonged to no step of this model
    _train_step(model, opt, 1)
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert "L1Loss_output_0" not in trial.tensor_names()


def test_a_scalar_saved_before_the_first_step_is_recorded_at_that_step_only(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    hook.save_scalar("lr", 0.1)  # no step yet: it joins the first one
    for seed in range(3):
        _train_step(model, opt, seed)
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps() == [0, 1, 2]
    assert trial.tensor("scalar/lr").steps() == [0]


def test_the_last_steps_weights_are_on_disk_after_close(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path, "weights")
    hook.register_module(model)
    before = []
    for seed in range(3):
        before.append(model.weight.detach().clone().numpy())
        _train_step(model, opt, seed)
    hook.close()
    trial = _trial(tmp_path)
    name = next(n for n in trial.tensor_names(collection="weights") if n.endswith("weight"))
    assert trial.tensor(name).steps() == [0, 1, 2]
    for step, value in enumerate(before):  # the weight each step's forward pass used
        np.testing.assert_allclose(trial.tensor(name).value(step), value, rtol=1e-6)


# --- after close ------------------------------------------------------------------------------------------------------
def test_close_twice_and_saving_after_close_change_nothing(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    _train_step(model, opt, 0)
    _train_step(model, opt, 1)
    hook.close()
    hook.save_scalar("late", 1.0)  # CLOSED: no step opens again, what is saved now is dropped
    hook.record_loss("late_loss", torch.tensor(1.0))
    hook.begin_step("train")
    hook.end_step()
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps() == [0, 1] and trial.job_ended
    assert "scalar/late" not in trial.tensor_names() and "late_loss" not in trial.tensor_names()
    manifest = json.loads((tmp_path / "workers" / "worker_0.json").read_text())
    assert manifest["last_step"] == 1


def test_a_closed_collector_opens_no_step_and_drops_late_saves(tmp_path: Path) -> None:
    collector = Collector("pytorch", check_settings("pytorch", {"out_dir": str(tmp_path)}))
    collector.start()
    collector.begin_step()
    collector.end_step()
    collector.close()
    collector.close()  # a second close does nothing
    assert collector.reopen_last_step() is False
    assert collector.begin_step() is False and not collector.state.open
    assert collector.global_step == 0


# --- save_config boundaries, per mode step ----------------------------------------------------------------------------
def _driven_run(out: Path, modes: str, save_config: ts.SaveConfig) -> ts.Trial:
    model = _model()
    hook = ts.torch.Hook(out, include_collections=["losses", "weights"], save_config=save_config)
    hook.register_module(model)
    for mode in modes:
        hook.begin_step({"T": "train", "E": "eval"}[mode])
        x, y = _batch(0)
        hook.record_loss("loss", F.mse_loss(model(x), y))
        hook.end_step()
    hook.close()
    return _trial(out)


def _weight_steps(trial: ts.Trial, mode: ModeKeys) -> list[int]:
    return trial.tensor(_weight(trial)).steps(mode=mode)


def _weight(trial: ts.Trial) -> str:
    return next(n for n in trial.tensor_names(collection="weights") if n.endswith("weight"))


def test_save_interval_counts_mode_steps_not_global_steps(tmp_path: Path) -> None:
    trial = _driven_run(tmp_path, "TETETET", ts.SaveConfig(save_interval=2))
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3]  # losses: every step
    assert _weight_steps(trial, ModeKeys.TRAIN) == [0, 2]
    assert _weight_steps(trial, ModeKeys.EVAL) == [0, 2]
    assert trial.global_step(ModeKeys.TRAIN, 2) == 4 and trial.global_step(ModeKeys.EVAL, 2) == 5


def test_each_mode_keeps_its_own_schedule_when_modes_alternate(tmp_path: Path) -> None:
    config = ts.SaveConfig(save_interval=1, mode_save_configs={"EVAL": {"save_interval": 2, "start_step": 1}})
    trial = _driven_run(tmp_path, "TTEEEET", config)
    assert _weight_steps(trial, ModeKeys.TRAIN) == [0, 1, 2]
    assert _weight_steps(trial, ModeKeys.EVAL) == [2]


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"save_interval": 2, "start_step": 1}, [2, 4]),  # the interval counts from step 0, not from start_step
        ({"save_interval": 1, "start_step": 2, "end_step": 4}, [2, 3]),  # start inclusive, end exclusive
        ({"save_interval": 100, "save_steps": [3]}, [0, 3]),
        ({"save_interval": 1, "end_step": 3, "save_steps": [5]}, [0, 1, 2, 5]),
    ],
)
def test_save_config_boundaries_through_the_hook(
    tmp_path: Path, config: dict[str, object], expected: list[int]
) -> None:
    trial = _driven_run(tmp_path, "T" * 6, ts.SaveConfig(**config))  # type: ignore[arg-type]
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(6))
    assert _weight_steps(trial, ModeKeys.TRAIN) == expected


# --- a rule that stops training -------------------------------------------------------------------------------------
def _nan_loop(model: nn.Linear, steps: int, call_forward: bool) -> int:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    done = 0
    x, y = torch.full((3, 4), float("nan")), torch.zeros(3, 2)
    for _ in range(steps):
        out = model.forward(x) if call_forward else model(x)
        F.mse_loss(out, y).backward()
        opt.step()
        opt.zero_grad()
        done += 1
    return done


@pytest.mark.parametrize("call_forward", [False, True])
def test_a_stop_reaches_the_loop_and_no_step_is_recorded_after_it(tmp_path: Path, call_forward: bool) -> None:
    model = _model()
    hook = ts.torch.Hook(tmp_path, rules=[ExplodingTensor(actions=["StopTraining"])])
    hook.register_module(model)
    done = -1
    with pytest.raises(ts.TrainingStopped) as stopped:
        done = _nan_loop(model, 30, call_forward)
    hook.close()
    assert done == -1 and stopped.value.rule == "ExplodingTensor"
    trial = ts.create_trial(tmp_path)
    steps = trial.steps(mode=ModeKeys.TRAIN)
    assert steps == list(range(len(steps))) and 1 <= len(steps) <= 4


def test_autolog_stop_reaches_the_loop(tmp_path: Path) -> None:
    logger = ts.autolog(out_dir=tmp_path / "run", rules=[ExplodingTensor(actions=["StopTraining"])])
    assert logger is not None
    try:
        with pytest.raises(ts.TrainingStopped):
            _nan_loop(_model(), 30, False)
    finally:
        logger.close()
    steps = ts.create_trial(tmp_path / "run").steps(mode=ModeKeys.TRAIN)
    assert 1 <= len(steps) <= 4


def test_scalars_added_to_a_step_are_written_at_that_step_only(tmp_path: Path) -> None:
    collector = Collector("pytorch", check_settings("pytorch", {"out_dir": str(tmp_path)}))
    collector.start()
    f32 = np.dtype(np.float32)
    collector.begin_step()
    collector.add_scalars([("acc", 0.5, f32, frozenset({"losses"}))])
    collector.end_step()
    collector.add_scalars([("between", 1.0, f32, frozenset({"losses"}))])  # no step is open: nothing to join
    collector.begin_step()
    collector.end_step([("loss", 2.0, f32, frozenset({"losses"}))])
    collector.close()
    trial = _trial(tmp_path)
    assert trial.tensor("acc").steps() == [0]
    assert trial.tensor("loss").steps() == [1]
    assert "between" not in trial.tensor_names()
    assert trial.tensor_names(collection="losses") == ["acc", "loss"]  # a deferred scalar joins its collections too


def test_steps_that_alternate_optimizers_give_one_loss_series_per_optimizer(tmp_path: Path) -> None:
    torch.manual_seed(0)
    gen, disc = nn.Linear(4, 4), nn.Sequential(nn.Linear(4, 1))
    opt_g = torch.optim.SGD(gen.parameters(), lr=0.1)
    opt_d = torch.optim.SGD(disc.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(gen)
    hook.register_module(disc)
    for seed in range(2):
        z = _batch(seed)[0]
        disc(gen(z).detach()).pow(2).mean().backward()  # the discriminator's step ...
        opt_d.step()
        opt_d.zero_grad()
        (disc(gen(z)) - 1).pow(2).mean().backward()  # ... then the generator's
        opt_g.step()
        opt_g.zero_grad()
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3]
    assert sorted(trial.tensor_names(collection="losses")) == ["loss/Linear", "loss/Sequential"]
    assert trial.tensor("loss/Sequential").steps() == [0, 2] and trial.tensor("loss/Linear").steps() == [1, 3]


def test_a_backward_pass_on_a_non_scalar_output_records_no_loss(tmp_path: Path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path)
    hook.register_module(model)
    for seed in range(2):
        x, y = _batch(seed)
        out = model(x)
        F.mse_loss(out, y)  # the step's loss, as the script computed it
        out.backward(torch.ones_like(out))  # a vector-Jacobian product: no loss was backpropagated
        opt.step()
        opt.zero_grad()
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.tensor_names() == ["MSELoss_output_0"]


def test_a_registered_model_called_inside_another_is_part_of_its_step(tmp_path: Path) -> None:
    inner = _model()
    outer = nn.Sequential(inner, nn.Tanh())
    hook = _hook(tmp_path)
    hook.register_module(outer)
    hook.register_module(inner)  # also registered: its forward pass runs inside the outer one's
    outer.eval()
    with torch.no_grad():
        for seed in range(3):  # in EVAL every (outermost) forward pass is a step
            x, y = _batch(seed)
            F.mse_loss(outer(x), y)
    hook.close()
    assert _trial(tmp_path).steps(mode=ModeKeys.EVAL) == [0, 1, 2]


def test_a_loss_recorded_between_driven_steps_joins_the_next_step_and_opens_none(tmp_path: Path) -> None:
    model = _model()
    hook = _hook(tmp_path)
    hook.register_module(model)
    seen = []
    for seed in range(3):
        x, y = _batch(seed)
        early = torch.zeros(())
        if seed:  # after the first driven step: TRAIN is driven, this forward pass opens no step
            early = F.l1_loss(model(x), y)
            hook.record_loss("early", early)  # between the driven steps: held for the next one
        hook.begin_step("train")
        loss = F.mse_loss(model(x), y)
        hook.record_loss("loss", loss)
        hook.end_step()
        seen.append((early.item(), loss.item()))
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert trial.tensor("early").steps(mode=ModeKeys.TRAIN) == [1, 2]
    for step, (early_value, value) in enumerate(seen):
        if step:
            assert float(trial.tensor("early").value(step, mode=ModeKeys.TRAIN)) == pytest.approx(early_value)
        assert float(trial.tensor("loss").value(step, mode=ModeKeys.TRAIN)) == pytest.approx(value)


def test_a_backward_pass_between_driven_training_steps_opens_no_step(tmp_path: Path) -> None:
    model = _model()
    hook = _hook(tmp_path)
    hook.register_module(model)
    hook.begin_step("train")
    hook.record_loss("loss", F.mse_loss(model(_batch(0)[0]), _batch(0)[1]))
    hook.end_step()
    x, y = _batch(1)
    F.mse_loss(model.forward(x), y).backward()  # TRAIN is driven: only the loop's begin_step opens its steps
    hook.begin_step("train")
    hook.record_loss("in_step", F.l1_loss(model(x), y))
    hook.end_step()
    hook.close()
    trial = _trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1]
    assert trial.tensor("in_step").steps(mode=ModeKeys.TRAIN) == [1]  # the backward's loss and this: one step
    assert trial.tensor("loss").steps(mode=ModeKeys.TRAIN) == [0, 1]


# --- the hook core around the driver (seed-43 sample of hooks/torch_hook.py, hook_api.py, hook_extras.py) ----------
class _Recursive(nn.Module):
    """A model whose forward pass calls itself twice at each level (a recursive network, weight-shared refinement)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = _model()

    def forward(self, x: torch.Tensor, depth: int = 2) -> torch.Tensor:
        if depth == 0:
            return self.lin(x)
        return self(x, depth - 1) + self(x, depth - 1)


def test_a_model_that_calls_itself_is_one_step_per_outermost_call(tmp_path: Path) -> None:
    """Its nested calls join the outermost call's step: three evaluation calls, three EVAL steps."""
    model = _Recursive().eval()
    hook = _hook(tmp_path)
    hook.register_module(model)
    with torch.no_grad():
        for seed in range(3):
            model(_batch(seed)[0])
            hook.save_scalar("call", float(seed))
    hook.close()
    call = _trial(tmp_path).tensor("scalar/call")
    assert call.steps(mode=ModeKeys.EVAL) == [0, 1, 2]
    assert [float(call.value(s, mode=ModeKeys.EVAL)) for s in range(3)] == [0.0, 1.0, 2.0]


def test_a_one_process_group_destroyed_mid_run_does_not_end_the_run(tmp_path: Path) -> None:
    """Only a job of several ranks ends its run with its process group: one process goes on training and recording.

    (A script written for several GPUs, run on one: it sets up a group of one and tears it down before its
    evaluation.)
    """
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=(tmp_path / "store").as_uri(), rank=0, world_size=1)
    try:
        model = _model()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        hook = _hook(tmp_path / "run")
        hook.register_module(model)
        for seed in range(2):
            _train_step(model, opt, seed)
        dist.destroy_process_group()
        for seed in range(2, 4):
            _train_step(model, opt, seed)
        hook.close()
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    assert _trial(tmp_path / "run").tensor("loss").steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3]


def test_a_report_that_fails_at_close_warns_once_and_the_run_stays_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A part that fails while the hook closes costs that part only, with one warning naming it."""
    from trainspect.hooks.hook_extras import HookExtras
    from trainspect.rules import LossNotDecreasing

    def broken(self: HookExtras, collector: Collector) -> None:
        raise RuntimeError("no fonts")  # a bug of its own (a disk error has its own message: test_disk_full)

    monkeypatch.delenv("TRAINSPECT_TESTING")  # as for a user: internal errors are warnings, not exceptions
    monkeypatch.setattr(HookExtras, "_write_report", broken)
    hook = _trained(tmp_path, 3, rules=[LossNotDecreasing()])
    with caplog.at_level("WARNING", logger="trainspect"):
        hook.close()
    failed = [r.getMessage() for r in caplog.records if "failed at close" in r.getMessage()]
    assert failed == ["trainspect: the report failed at close (RuntimeError: no fonts); the run directory is complete"]
    assert _trial(tmp_path).tensor("loss").steps(mode=ModeKeys.TRAIN) == [0, 1, 2]


def test_the_system_monitor_stops_when_the_hook_closes(tmp_path: Path) -> None:
    """Profiling samples the system on a thread of its own: closing the hook ends it (it would sample on, unseen)."""
    import threading

    def monitors() -> set[threading.Thread]:
        return {t for t in threading.enumerate() if t.name == "trainspect-system-monitor" and t.is_alive()}

    before = monitors()
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path, profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100))
    hook.register_module(model)
    _train_step(model, opt, 0)
    assert monitors() - before  # it runs
    hook.close()
    assert not monitors() - before


def test_accumulation_is_one_step_when_the_weights_were_reloaded_as_new_parameters(tmp_path: Path) -> None:
    """``load_state_dict(assign=True)`` after an evaluation replaces the parameters the hook listed: it decides
    whether an optimizer holds the model from the parameters the model has now (two micro-batches, one step)."""
    model = _model()
    hook = _hook(tmp_path)
    hook.register_module(model)
    with torch.no_grad():
        model.eval()(_batch(99)[0])  # a sanity-check evaluation opens the run
    model.load_state_dict({k: v.clone() for k, v in model.state_dict().items()}, assign=True)
    opt = torch.optim.SGD(model.train().parameters(), lr=0.1)
    for seed in range(3):
        _train_step(model, opt, seed, micro=2)
    hook.close()
    assert _trial(tmp_path).tensor("loss").steps(mode=ModeKeys.TRAIN) == [0, 1, 2]


def test_a_collection_asked_for_by_name_is_recorded(tmp_path: Path) -> None:
    """``hook.get_collection("weights")`` (smdebug's way of configuring one) records it beside the default losses."""
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(tmp_path, save_config=ts.SaveConfig(save_interval=1))
    hook.get_collection("weights")
    hook.register_module(model)
    for seed in range(2):
        _train_step(model, opt, seed)
    hook.close()
    trial = _trial(tmp_path)
    assert trial.tensor_names(collection="weights") == ["Linear_weight"]
    assert trial.tensor("Linear_weight").steps(mode=ModeKeys.TRAIN) == [0, 1]


def test_mlflow_may_log_every_step_and_no_less_often_than_that() -> None:
    """``log_every_n_steps`` 1 (every step) is the smallest: 0 is refused, naming the option and its bound."""
    from trainspect.exceptions import ConfigError
    from trainspect.hooks.hook_extras import mlflow_options

    assert mlflow_options({"LogEveryNSteps": "1", "run": False}) == (False, {"log_every_n_steps": 1})
    with pytest.raises(ConfigError, match=r"^MLflow.log_every_n_steps=0: must be an integer >= 1$"):
        mlflow_options({"log_every_n_steps": 0})


def test_the_hooks_detailed_profiling_window_traces_the_steps_it_names(tmp_path: Path) -> None:
    """A detailed-profiling window of steps 2 and 3, set on the hook: its PyTorch trace is in the run directory."""
    from trainspect.profiler.config import FrameworkProfile

    window = FrameworkProfile.window(start_step=2, num_steps=2)
    hook = _trained(tmp_path, 5, profiler_config=ts.ProfilerConfig(framework_profile_params=window))
    hook.close()
    detailed = tmp_path / "profiler" / "detailed" / "worker_0"
    assert sorted(p.name for p in detailed.glob("trace_*.json")) == ["trace_2-4.json"]
    assert json.loads((detailed / "trace_2-4.json").read_text())["traceEvents"]


def test_the_hook_times_each_steps_forward_backward_and_optimizer(tmp_path: Path) -> None:
    """With the profiler on, every training step gets its forward, backward and optimizer spans, in that order."""
    from trainspect.hooks.framework_metrics import SPAN_KINDS
    from trainspect.profiler.data import load_profiler_data

    hook = _trained(tmp_path, 3, profiler_config=ts.ProfilerConfig())
    hook.close()
    spans = load_profiler_data(tmp_path).framework["worker_0"].spans
    starts = {}
    for kind in ("forward", "backward", "optimizer"):
        mine = spans["kind"] == SPAN_KINDS[kind]
        assert mine.sum() == 3, kind
        assert np.all(spans["end"][mine] >= spans["start"][mine])
        starts[kind] = np.sort(spans["start"][mine])
    assert np.all(starts["forward"] <= starts["backward"]) and np.all(starts["backward"] <= starts["optimizer"])


def test_a_hook_with_rules_says_at_close_what_they_found_and_where_the_run_is(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from trainspect.rules import LossNotDecreasing

    hook = _trained(tmp_path, 3, rules=[LossNotDecreasing()])
    hook.close()
    err = capsys.readouterr().err.splitlines()
    assert any(re.match(r"trainspect: \d+ rules: \d+ judged, 0 found issues", line) for line in err)
    assert f"trainspect: report {tmp_path / 'report.html'}" in err
    assert f"trainspect: run directory {tmp_path}" in err


def test_a_spawn_ticket_carries_only_the_settings_a_spawned_process_can_receive(tmp_path: Path) -> None:
    """A rule class defined inside a function cannot be pickled: the child gets the other settings, not a failure."""
    import pickle

    from trainspect.rules import LossNotDecreasing

    class Local(LossNotDecreasing):  # not importable by name: not picklable
        pass

    hook = _hook(tmp_path, rules=[Local()])
    ticket = hook.spawn_ticket()
    assert ticket is not None
    settings = ticket[2]
    assert "rules" not in settings and settings["include_collections"] == ["losses"]
    assert pickle.loads(pickle.dumps(ticket))[2]["out_dir"] == str(tmp_path.resolve())
    hook.close()


def test_rank_0_keeps_a_copy_of_horovods_timeline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With ``HOROVOD_TIMELINE`` set, the run directory gets a copy of the timeline as it is at close."""
    from trainspect.store.layout import RunLayout

    timeline = tmp_path / "timeline.json"
    timeline.write_text('[{"name": "allreduce"}]')
    monkeypatch.setenv("HOROVOD_TIMELINE", str(timeline))
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path / "run")
    hook.register_module(model)
    _train_step(model, opt, 0)
    hook.close()
    assert RunLayout(tmp_path / "run").horovod_timeline.read_text() == '[{"name": "allreduce"}]'


class _SharedLayer(nn.Module):
    """One layer applied twice in each forward pass (weight sharing)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.fc = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.relu(self.fc(x)))


def test_a_layer_called_twice_in_a_step_records_each_steps_outputs(tmp_path: Path) -> None:
    """The second call of a shared layer reuses the collections decided at the first (one decision per step)."""
    model = _SharedLayer()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = _hook(tmp_path, "outputs", include_regex=["fc_output_0"])
    hook.register_module(model)
    outputs = []
    for seed in range(2):
        x, _ = _batch(seed)
        out = model(x)
        outputs.append(out.detach().numpy().copy())
        out.pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    saved = _trial(tmp_path).tensor("fc_output_0")
    assert saved.steps() == [0, 1]
    for step, out in enumerate(outputs):  # the later call's output: the model's
        np.testing.assert_allclose(saved.value(step), out, rtol=1e-6)
