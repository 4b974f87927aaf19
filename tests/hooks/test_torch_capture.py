"""Issue 2: what the PyTorch hook captures equals what the test records itself from a real training run."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hooktrain import BACKWARD, LOSS, PARAMS, Tiny, tname

import trainspect as ts
from trainspect.modes import ModeKeys


def _hook(out_dir, **kw):
    return ts.torch.Hook(out_dir, export_tensorboard=False, **kw)


def test_weights_before_update_gradients_after_backward_and_losses(out_dir):
    tiny = Tiny()
    hook = _hook(
        out_dir,
        save_config=ts.SaveConfig(save_interval=1),
        include_collections=["weights", "biases", "gradients", "losses"],
    )
    tiny.register(hook)
    tiny.train(5)
    hook.close()

    trial = ts.create_trial(out_dir)
    assert trial.steps() == [0, 1, 2, 3, 4]
    assert sorted(trial.tensor_names()) == sorted(
        [LOSS, BACKWARD] + [tname(p) for p in PARAMS] + [f"gradient/{tname(p)}" for p in PARAMS]
    )
    for step, rec in enumerate(tiny.log):
        for p in PARAMS:
            np.testing.assert_array_equal(trial.tensor(tname(p)).value(step), rec.weights[p])
            np.testing.assert_array_equal(trial.tensor(f"gradient/{tname(p)}").value(step), rec.grads[p])
        loss = trial.tensor(LOSS).value(step)
        assert loss.shape == () and loss.dtype == np.float32
        assert float(loss) == np.float32(rec.loss)
        assert float(trial.tensor(BACKWARD).value(step)) == np.float32(rec.loss)
    # the weights really change, so "before the update" is a real distinction
    assert not np.array_equal(tiny.log[0].weights["0.weight"], tiny.log[1].weights["0.weight"])


def test_default_config_saves_losses_every_step_and_nothing_else(out_dir):
    tiny = Tiny()
    hook = _hook(out_dir)
    tiny.register(hook)
    tiny.train(7)
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.tensor_names() == sorted([LOSS, BACKWARD])
    assert trial.steps() == list(range(7))
    np.testing.assert_array_equal(
        np.array([float(v) for v in trial.tensor(LOSS).values().values()], dtype=np.float32),
        np.array([r.loss for r in tiny.log], dtype=np.float32),
    )


def test_modes_have_their_own_steps(out_dir):
    tiny = Tiny()
    hook = _hook(out_dir, save_config=ts.SaveConfig(save_interval=1), include_collections=["weights", "losses"])
    tiny.register(hook)
    hook.set_mode(ts.modes.TRAIN)
    tiny.train(3)
    hook.set_mode(ts.modes.EVAL)
    tiny.evaluate(2)
    hook.set_mode(ts.modes.TRAIN)
    tiny.train(2)
    hook.close()

    trial = ts.create_trial(out_dir)
    assert trial.steps() == list(range(7))
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3, 4]
    assert trial.steps(mode=ModeKeys.EVAL) == [0, 1]
    assert trial.modes() == [ModeKeys.TRAIN, ModeKeys.EVAL]
    assert [trial.mode(g) for g in range(7)] == [ModeKeys.TRAIN] * 3 + [ModeKeys.EVAL] * 2 + [ModeKeys.TRAIN] * 2
    assert [trial.mode_step(g) for g in range(7)] == [0, 1, 2, 0, 1, 3, 4]
    assert trial.global_step(ModeKeys.EVAL, 1) == 4
    assert trial.global_step(ModeKeys.TRAIN, 3) == 5
    loss = trial.tensor(LOSS)
    assert loss.steps(mode=ModeKeys.EVAL) == [0, 1]
    for gs, rec in enumerate(tiny.log):
        assert float(loss.value(gs)) == np.float32(rec.loss)
        np.testing.assert_array_equal(trial.tensor(tname("0.weight")).value(gs), rec.weights["0.weight"])
    assert float(loss.value(1, mode=ModeKeys.EVAL)) == np.float32(tiny.log[4].loss)
    assert set(loss.values(mode=ModeKeys.EVAL)) == {0, 1}


def test_include_regex_adds_matching_tensors(out_dir):
    tiny = Tiny()
    hook = _hook(out_dir, include_regex=[r"2\.bias$"], save_config=ts.SaveConfig(save_interval=2))
    tiny.register(hook)
    tiny.train(5)
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.tensor_names() == sorted([LOSS, BACKWARD, tname("2.bias"), f"gradient/{tname('2.bias')}"])
    assert trial.tensor(tname("2.bias")).steps() == [0, 2, 4]
    np.testing.assert_array_equal(trial.tensor(f"gradient/{tname('2.bias')}").value(2), tiny.log[2].grads["2.bias"])
    assert trial.tensor_names(collection="default") == [tname("2.bias"), f"gradient/{tname('2.bias')}"]


def test_save_all_records_module_inputs_and_outputs(out_dir):
    tiny = Tiny()
    seen: list[np.ndarray] = []
    tiny.model[1].register_forward_hook(lambda m, i, o: seen.append(o.detach().clone().numpy()))
    hook = _hook(out_dir, save_all=True, save_config=ts.SaveConfig(save_interval=1))
    tiny.register(hook)
    tiny.train(2)
    hook.close()
    trial = ts.create_trial(out_dir)
    names = trial.tensor_names()
    for expected in ("1_input_0", "1_output_0", "0_input_0", "2_output_0", LOSS, "optimizer/lr_group_0"):
        assert expected in names
    assert {tname(p) for p in PARAMS} | {f"gradient/{tname(p)}" for p in PARAMS} <= set(names)
    for step in (0, 1):
        np.testing.assert_array_equal(trial.tensor("1_output_0").value(step), seen[step])
        np.testing.assert_array_equal(trial.tensor("0_input_0").value(step), tiny.x.numpy())


def test_custom_collection_by_regex_with_its_own_save_config(out_dir):
    tiny = Tiny()
    coll = ts.Collection("first_layer", include_regex=[r"Sequential_0\."], save_config=ts.SaveConfig(save_interval=3))
    hook = _hook(out_dir, include_collections=[coll, "losses"])
    tiny.register(hook)
    tiny.train(7)
    hook.close()
    trial = ts.create_trial(out_dir)
    names = trial.tensor_names(collection="first_layer")
    assert names == sorted(
        [tname("0.weight"), tname("0.bias"), f"gradient/{tname('0.weight')}", f"gradient/{tname('0.bias')}"]
    )
    assert trial.tensor(tname("0.bias")).steps() == [0, 3, 6]
    np.testing.assert_array_equal(trial.tensor(tname("0.weight")).value(6), tiny.log[6].weights["0.weight"])


@pytest.mark.parametrize("order", ["before_register", "after_register"])
def test_custom_collection_by_module(out_dir, order):
    tiny = Tiny()
    seen: list[np.ndarray] = []
    tiny.model[1].register_forward_hook(lambda m, i, o: seen.append(o.detach().clone().numpy()))
    hook = _hook(out_dir, save_config=ts.SaveConfig(save_interval=1))
    if order == "before_register":
        hook.get_collection("relu").add_module_tensors(tiny.model[1], inputs=True)
        tiny.register(hook)
    else:
        tiny.register(hook)
        hook.get_collection("relu").add_module_tensors(tiny.model[1], inputs=True)
    tiny.train(2)
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.tensor_names(collection="relu") == ["1_input_0", "1_output_0"]
    np.testing.assert_array_equal(trial.tensor("1_output_0").value(1), seen[1])


def test_optimizer_variables_lr_and_momentum(out_dir):
    tiny = Tiny(lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.StepLR(tiny.opt, step_size=1, gamma=0.5)
    hook = _hook(out_dir, include_collections=["optimizer_variables"], save_config=ts.SaveConfig(save_interval=1))
    tiny.register(hook)
    for _ in range(3):
        tiny.train(1)
        sched.step()
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.tensor_names(collection="optimizer_variables") == [
        "optimizer/lr_group_0",
        "optimizer/momentum_group_0",
    ]
    lrs = [float(trial.tensor("optimizer/lr_group_0").value(s)) for s in range(3)]
    assert lrs == [r.lr for r in tiny.log] == [0.1, 0.05, 0.025]
    assert float(trial.tensor("optimizer/momentum_group_0").value(2)) == 0.9


def test_frozen_parameters_have_no_gradient_and_do_not_crash(out_dir):
    tiny = Tiny()
    for p in tiny.model[0].parameters():
        p.requires_grad_(False)
    hook = _hook(out_dir, include_collections=["weights", "gradients"], save_config=ts.SaveConfig(save_interval=1))
    tiny.register(hook)
    tiny.train(3)
    hook.close()
    trial = ts.create_trial(out_dir)
    grads = trial.tensor_names(collection="gradients")
    assert grads == [f"gradient/{tname('2.bias')}", f"gradient/{tname('2.weight')}"]
    # frozen weights are still recorded, and stay what they were
    np.testing.assert_array_equal(trial.tensor(tname("0.weight")).value(2), tiny.log[0].weights["0.weight"])
    np.testing.assert_array_equal(trial.tensor(f"gradient/{tname('2.weight')}").value(2), tiny.log[2].grads["2.weight"])


def test_shared_parameters_are_one_tensor(out_dir):
    torch.manual_seed(0)
    shared = torch.nn.Linear(4, 4)
    model = torch.nn.Sequential(shared, torch.nn.Tanh(), shared)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = _hook(out_dir, include_collections=["weights", "gradients"], save_config=ts.SaveConfig(save_interval=1))
    hook.register_module(model)
    x = torch.randn(3, 4)
    recorded = []
    for _ in range(2):
        w = shared.weight.detach().clone().numpy()
        opt.zero_grad()
        model(x).square().sum().backward()
        recorded.append((w, shared.weight.grad.detach().clone().numpy()))
        opt.step()
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.tensor_names(collection="weights") == [tname("0.weight")]
    assert trial.tensor_names(collection="gradients") == [
        f"gradient/{tname('0.bias')}",
        f"gradient/{tname('0.weight')}",
    ]
    for step, (w, g) in enumerate(recorded):
        np.testing.assert_array_equal(trial.tensor(tname("0.weight")).value(step), w)
        # the gradient accumulated over both uses
        np.testing.assert_array_equal(trial.tensor(f"gradient/{tname('0.weight')}").value(step), g)


def test_save_tensor_non_float_and_save_scalar(out_dir):
    tiny = Tiny()
    hook = _hook(out_dir)
    tiny.register(hook)
    for i in range(2):

        def extra(i=i):
            hook.save_tensor("ints", torch.arange(5) * (i + 1))
            hook.save_tensor("mask", np.array([[True, False], [False, True]]), collections_to_write=["masks"])
            hook.save_tensor("small", np.int8(-3 - i))
            hook.save_scalar("accuracy", 0.25 * (i + 1))

        tiny.train(1, between=extra)
    hook.close()
    trial = ts.create_trial(out_dir)
    assert set(trial.tensor_names()) == {LOSS, BACKWARD, "ints", "mask", "small", "scalar/accuracy"}
    ints = trial.tensor("ints").value(1)
    assert ints.dtype == np.int64 and ints.tolist() == [0, 2, 4, 6, 8]
    mask = trial.tensor("mask").value(0)
    assert mask.dtype == np.bool_ and mask.tolist() == [[True, False], [False, True]]
    small = trial.tensor("small").value(1)
    assert small.dtype == np.int8 and small.shape == () and int(small) == -4
    assert float(trial.tensor("scalar/accuracy").value(1)) == 0.5
    assert trial.tensor_names(collection="masks") == ["mask"]
    assert trial.tensor_names(collection="default") == ["ints", "small"]


def test_context_manager_closes_and_marks_the_end(out_dir):
    tiny = Tiny()
    with _hook(out_dir) as hook:
        tiny.register(hook)
        tiny.train(2)
        assert not (out_dir / "training_job_end.ts").exists()
    assert (out_dir / "training_job_end.ts").exists()
    trial = ts.create_trial(out_dir)
    assert trial.loaded_all_steps
    assert trial.steps() == [0, 1]


def test_torch_compiled_model(out_dir):
    """A model registered, then compiled: losses, weights and gradients are still captured exactly.

    torch.compile (dynamo) keeps nn.Module forward hooks working by graph-breaking around them, so the step
    boundary, the parameters and the post-accumulate gradient hooks behave as in eager mode (~8 s on a 2-core CPU).
    """
    tiny = Tiny()
    hook = _hook(
        out_dir, include_collections=["weights", "gradients", "losses"], save_config=ts.SaveConfig(save_interval=1)
    )
    tiny.register(hook)
    tiny.model = torch.compile(tiny.model)
    tiny.train(3)
    hook.close()
    trial = ts.create_trial(out_dir)
    assert trial.steps() == [0, 1, 2]
    for step, rec in enumerate(tiny.log):
        assert float(trial.tensor(LOSS).value(step)) == np.float32(rec.loss)
        np.testing.assert_array_equal(trial.tensor(tname("0.weight")).value(step), rec.weights["_orig_mod.0.weight"])
        np.testing.assert_array_equal(
            trial.tensor(f"gradient/{tname('0.weight')}").value(step), rec.grads["_orig_mod.0.weight"]
        )


def test_include_regex_captures_module_outputs_by_name(out_dir):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    seen: list[np.ndarray] = []
    model[1].register_forward_hook(lambda m, i, o: seen.append(o.detach().clone().numpy()))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ts.torch.Hook(out_dir, include_regex=[r"^1_output"], save_config=ts.SaveConfig(save_interval=1)) as hook:
        hook.register_module(model)
        for _ in range(3):
            opt.zero_grad()
            model(torch.randn(5, 4)).sum().backward()
            opt.step()
    trial = ts.create_trial(out_dir)
    assert trial.tensor_names(collection="default") == ["1_output_0"]
    np.testing.assert_array_equal(trial.tensor("1_output_0").value(2), seen[2])


def test_gradient_and_module_hooks_exist_only_on_saving_steps_and_flush_makes_the_run_readable(out_dir):
    tiny = Tiny()
    hook = _hook(
        out_dir, save_config=ts.SaveConfig(save_interval=3), include_collections=["gradients", "outputs", "losses"]
    )
    tiny.register(hook)
    hooked: list[tuple[bool, bool]] = []

    from torch.optim.optimizer import _global_optimizer_pre_hooks as pre_step

    baseline = len(pre_step)

    def between() -> None:  # after backward, before optimizer.step(): inside the step
        # gradients are read at optimizer.step() (a global pre-step hook); before the first optimizer step, also
        # by post-accumulate-grad hooks
        grads = len(pre_step) > baseline or any(p._post_accumulate_grad_hooks for p in tiny.model.parameters())
        modules = any(m._forward_hooks for m in list(tiny.model.modules())[1:])
        hooked.append((grads, modules))

    tiny.train(7, between=between)
    assert hooked == [(s % 3 == 0, s % 3 == 0) for s in range(7)]  # nothing slows the steps that save nothing
    assert not any(p._post_accumulate_grad_hooks for p in tiny.model.parameters())  # removed when the step ended
    assert len(pre_step) == baseline
    assert hook.flush()
    trial = ts.create_trial(out_dir)  # readable before close
    name = f"gradient/{tname('0.weight')}"
    assert trial.tensor(name).steps() == [0, 3, 6]
    for step in (0, 3, 6):
        np.testing.assert_array_equal(trial.tensor(name).value(step), tiny.log[step].grads["0.weight"])
    assert trial.tensor("0_output_0").steps() == [0, 3, 6]
    assert trial.tensor(LOSS).steps() == list(range(7))
    hook.close()


@pytest.mark.parametrize("live_rule", [False, True])
def test_scalar_losses_keep_value_and_dtype_whichever_thread_builds_their_record(out_dir, live_rule):
    # Without live rules (or profiler, MLflow) a CPU scalar loss is recorded as a Python value and its record built
    # on the writer thread; with one, on the training thread. Both must store the value the loss had at the hook.
    losses = {
        "f32": torch.tensor(1.25, dtype=torch.float32),
        "f64": torch.tensor(1 / 3, dtype=torch.float64),
        "f16": torch.tensor(0.1, dtype=torch.float16),
        "bf16": torch.tensor(0.1, dtype=torch.bfloat16),
        "nan": torch.tensor(float("nan")),
        "inf": torch.tensor(float("-inf")),
        "i64": torch.tensor(7),
    }
    rules = [ts.rules.LossNotDecreasing()] if live_rule else None
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _hook(out_dir, rules=rules) as hook:
        hook.register_module(model)
        for _ in range(3):
            opt.zero_grad()
            loss = model(torch.ones(1, 2)).sum()
            for name, value in losses.items():
                hook.record_loss(name, value)
            hook.record_loss("inplace", loss)
            seen = float(loss.detach())
            loss.mul_(10)  # changed after the hook saw it
            loss.backward()
            opt.step()
    trial = ts.create_trial(out_dir)
    dtypes = {
        "f32": np.float32,
        "f64": np.float64,
        "f16": np.float16,
        "bf16": np.float32,
        "nan": np.float32,
        "inf": np.float32,
        "i64": np.int64,
    }
    for name, value in losses.items():
        got = trial.tensor(name).value(2)
        assert got.dtype == dtypes[name] and got.shape == ()
        np.testing.assert_array_equal(got, np.asarray(value.float() if name == "bf16" else value))
    assert float(trial.tensor("inplace").value(2)) == np.float32(seen)
    assert trial.tensor("inplace").steps() == [0, 1, 2]
    assert "inplace" in trial.tensor_names(collection="losses")
