"""Registered loss modules: PyTorch's own loss classes are recorded through a forward of their own, any other through a
hook."""

from __future__ import annotations

import copy

import numpy as np
import torch
from torch import nn

import trainspect as ts
from trainspect.hooks.torch_backward import LossOutputTap

torch.set_num_threads(1)


class ScaledMSE(nn.MSELoss):
    """A subclass with its own forward: its output is not the functional loss's."""

    def forward(self, input: torch.Tensor, target: torch.Tensor) -> torch.Tensor:  # noqa: A002
        return 2.0 * super().forward(input, target)


def _train(hook: ts.torch.Hook, loss_fn: nn.Module, steps: int, other: nn.Module | None = None) -> list[float]:
    torch.manual_seed(0)
    model = nn.Linear(3, 1)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    gen = torch.Generator().manual_seed(2)
    values = []
    for _ in range(steps):
        x, y = torch.randn(8, 3, generator=gen), torch.randn(8, 1, generator=gen)
        opt.zero_grad()
        out = model(x)
        if other is not None:
            other(out.detach(), torch.zeros_like(y))  # another loss module of the same class, not registered
        loss = loss_fn(out, y)
        loss.backward()
        opt.step()
        values.append(loss.item())
    return values


def test_a_torch_loss_module_is_recorded_every_step_without_a_module_hook(tmp_path) -> None:
    loss_fn = nn.MSELoss()
    with ts.torch.Hook(tmp_path) as hook:
        expected = _train(hook, loss_fn, 4, other=nn.MSELoss())
        assert not loss_fn._forward_hooks and not loss_fn._forward_pre_hooks  # PyTorch's faster call path
        assert isinstance(loss_fn.__dict__["forward"], LossOutputTap)
    assert "forward" not in loss_fn.__dict__  # taken off at close
    tensor = ts.create_trial(tmp_path).tensor("MSELoss_output_0")
    assert tensor.steps() == [0, 1, 2, 3]
    np.testing.assert_allclose([tensor.value(s) for s in range(4)], expected, rtol=1e-6)  # not the other module's


def test_a_loss_subclass_with_its_own_forward_is_recorded_through_a_hook(tmp_path) -> None:
    loss_fn = ScaledMSE()
    with ts.torch.Hook(tmp_path) as hook:
        expected = _train(hook, loss_fn, 3)
        assert len(loss_fn._forward_hooks) == 1 and "forward" not in loss_fn.__dict__
    tensor = ts.create_trial(tmp_path).tensor("ScaledMSE_output_0")
    np.testing.assert_allclose([tensor.value(s) for s in range(3)], expected, rtol=1e-6)


def test_a_copy_of_a_registered_loss_module_records_nothing_and_works(tmp_path) -> None:
    loss_fn = nn.CrossEntropyLoss()
    with ts.torch.Hook(tmp_path) as hook:
        hook.register_loss(loss_fn)
        twin = copy.deepcopy(loss_fn)
        logits, labels = torch.randn(4, 3), torch.tensor([0, 1, 2, 1])
        assert not isinstance(twin.__dict__.get("forward"), LossOutputTap)  # the copy has its class's forward
        assert torch.isclose(twin(logits, labels), loss_fn(logits, labels))
    assert "CrossEntropyLoss_output_0" in ts.create_trial(tmp_path).tensor_names()


def test_two_hooks_record_one_loss_module_and_its_functional_loss_is_not_recorded_again(tmp_path) -> None:
    loss_fn = nn.MSELoss()
    with ts.torch.Hook(tmp_path / "a") as first, ts.torch.Hook(tmp_path / "b") as second:
        torch.manual_seed(0)
        model = nn.Linear(3, 1)
        for hook in (first, second):
            hook.register_module(model)
            hook.register_loss(loss_fn)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        expected = []
        for _ in range(3):
            x, y = torch.randn(8, 3), torch.randn(8, 1)
            opt.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            opt.step()
            expected.append(loss.item())
    for name in ("a", "b"):
        trial = ts.create_trial(tmp_path / name)
        tensor = trial.tensor("MSELoss_output_0")
        assert tensor.steps() == [0, 1, 2]  # one value per step: F.mse_loss inside was not recorded a second time
        np.testing.assert_allclose([tensor.value(s) for s in range(3)], expected, rtol=1e-6)
    assert "forward" not in loss_fn.__dict__


def test_a_functional_loss_in_an_unregistered_loss_module_is_not_recorded_as_its_own(tmp_path) -> None:
    loss_fn = nn.MSELoss()  # not registered: its output is no loss of the hook's
    with ts.torch.Hook(tmp_path) as hook:
        model = nn.Linear(3, 1)
        hook.register_module(model)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            loss = loss_fn(model(torch.randn(4, 3)), torch.randn(4, 1))
            loss.backward()
            opt.step()
    names = ts.create_trial(tmp_path).tensor_names()
    assert "MSELoss_output_0" not in names and "loss" in names


def test_a_data_parallel_replica_of_a_registered_loss_module_records_through_a_tap_of_its_own(tmp_path) -> None:
    loss_fn = nn.MSELoss()
    with ts.torch.Hook(tmp_path) as hook:
        model = nn.Linear(3, 1)
        hook.register_module(model)
        hook.register_loss(loss_fn)
        replica = loss_fn._replicate_for_data_parallel()  # what DataParallel calls for another device
        tap = replica.__dict__["forward"]
        assert isinstance(tap, LossOutputTap) and tap.module is replica  # not a model's tap: no callback before
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        values = []
        for _ in range(2):
            opt.zero_grad()
            loss = replica(model(torch.randn(4, 3)), torch.randn(4, 1))
            loss.backward()
            opt.step()
            values.append(loss.item())
    tensor = ts.create_trial(tmp_path).tensor("MSELoss_output_0")
    np.testing.assert_allclose([tensor.value(s) for s in tensor.steps()], values, rtol=1e-6)


def test_a_loss_output_tap_without_a_listening_tap_or_after_removal_passes_the_output_through(tmp_path) -> None:
    from trainspect.hooks.torch_backward import LossTap

    assert LossTap.current() is None  # no hook listens: the tap has no loss tap to tell (a spawned process's copy)
    loss_fn, seen = nn.L1Loss(), []
    tap = LossOutputTap(loss_fn, seen.append)
    a, b = torch.ones(3), torch.zeros(3)
    out = tap(a, b)
    assert float(out) == 1.0 and len(seen) == 1 and seen[0] is out  # recorded, without the functional shortcut
    with ts.torch.Hook(tmp_path) as hook:  # a hook starts (in a spawned process: at the first callback)
        hook.register_module(nn.Linear(3, 1))
        tap(a, b)
        assert tap.tap is LossTap.current() is not None  # found now: its functional loss passes straight through
    assert len(seen) == 2
    tap.remove()  # taken off (a stale reference may still call it)
    assert float(tap(a, b)) == 1.0 and len(seen) == 2


def test_a_cpu_scalar_loss_is_taken_as_the_python_scalar_item_gives_whatever_its_dtype() -> None:
    from trainspect.hooks.torch_tensors import _SCALAR_DTYPES, snapshot

    for dtype, np_dtype in _SCALAR_DTYPES.items():
        base = torch.tensor(3.0 if dtype.is_floating_point else 3).to(dtype)
        loss = base.clone() if dtype is torch.bool else base / 3 if dtype.is_floating_point else base + 1
        taken = snapshot(loss)
        assert isinstance(taken, tuple) and taken[1] == np_dtype, dtype
        assert type(taken[0]) is type(loss.item()) and taken[0] == loss.item(), dtype
        if dtype is not torch.bool:
            loss += 1  # the script changes the tensor in place later: the taken value stays
            assert taken[0] != loss.item(), dtype
    grad_loss = (torch.ones(2, requires_grad=True) * 0.5).sum()
    assert snapshot(grad_loss)[0] == 1.0  # a loss that requires grad
    vector = torch.ones(2)
    copy_ = snapshot(vector)
    vector.add_(1)
    assert isinstance(copy_, torch.Tensor) and copy_.tolist() == [1.0, 1.0]  # not a scalar: a detached copy
