"""Issue 19 items 1-2 without a GPU: the device boundary is faked at ``device_kind`` and ``torch.cuda``'s API.

Tensors stay on the CPU; capture is told they live on a CUDA (or MPS) device, and ``torch.cuda.Event`` /
``current_stream`` are replaced by fakes that record when each event is recorded and waited for. A global
``torch.cuda.synchronize`` fails the test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import trainspect as ts
from trainspect.hooks import torch_tensors
from trainspect.hooks.save_plan import TensorPlan

torch.set_num_threads(1)


def _forbidden(*args: Any, **kwargs: Any) -> None:
    raise AssertionError("torch.cuda was called")


class _FakeCuda:
    """Records (step recorded at, step waited at) for every event; the hook's step is read when each happens."""

    def __init__(self) -> None:
        self.hook: Any = None
        self.recorded: list[int] = []
        self.waits: list[tuple[int, int]] = []
        fake = self

        class Event:
            def record(self, stream: Any) -> None:
                assert stream == "stream"
                self.step = fake.hook.collector.global_step
                fake.recorded.append(self.step)

            def synchronize(self) -> None:
                fake.waits.append((self.step, fake.hook.collector.global_step))

        self.Event = Event


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> _FakeCuda:
    fake = _FakeCuda()
    monkeypatch.setattr(torch_tensors, "device_kind", lambda t: "cuda")
    monkeypatch.setattr(torch_tensors, "snapshot", lambda t: t.detach().clone())  # a device loss is no host scalar
    monkeypatch.setattr(torch_tensors, "_pinned_empty", lambda shape, dtype: torch.empty(shape, dtype=dtype))
    monkeypatch.setattr(torch.cuda, "Event", fake.Event)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: "stream")
    monkeypatch.setattr(torch.cuda, "synchronize", _forbidden)
    return fake


def _setup() -> tuple[nn.Module, torch.optim.Optimizer, list[tuple[torch.Tensor, torch.Tensor]]]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    gen = torch.Generator().manual_seed(1)
    batches = [(torch.randn(6, 4, generator=gen), torch.randn(6, 1, generator=gen)) for _ in range(4)]
    return model, torch.optim.SGD(model.parameters(), lr=0.05), batches


def _train(hook: Any, steps_seen: list[list[tuple[int, int]]], fake: _FakeCuda | None = None) -> list[float]:
    model, opt, batches = _setup()
    hook.register_module(model)
    losses = []
    for x, y in batches:
        opt.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
        if fake is not None:
            steps_seen.append(list(fake.waits))
    hook.close()
    return losses


def test_a_cuda_loss_is_read_one_step_later_with_no_device_sync(tmp_path, fake_cuda: _FakeCuda) -> None:
    hook = ts.torch.Hook(tmp_path)
    fake_cuda.hook = hook
    seen: list[list[tuple[int, int]]] = []
    losses = _train(hook, seen, fake_cuda)
    # one event per step; step N's is waited for when step N+1 ends, the last one at close
    assert fake_cuda.recorded == [0, 1, 2, 3]
    assert seen == [[], [(0, 1)], [(0, 1), (1, 2)], [(0, 1), (1, 2), (2, 3)]]
    assert fake_cuda.waits == [(0, 1), (1, 2), (2, 3), (3, 3)]
    trial = ts.create_trial(tmp_path)
    for name in ("loss", "MSELoss_output_0"):  # each value at its own step, bit for bit
        assert trial.tensor(name).steps() == [0, 1, 2, 3]
        assert [trial.tensor(name).value(s).item() for s in range(4)] == losses


def test_saved_weights_and_losses_share_one_wait_per_step(tmp_path, fake_cuda: _FakeCuda) -> None:
    hook = ts.torch.Hook(
        tmp_path, include_collections=["weights", "gradients", "losses"], save_config=ts.SaveConfig(save_interval=2)
    )
    fake_cuda.hook = hook
    model, opt, batches = _setup()
    hook.register_module(model)
    expected = {}
    for step, (x, y) in enumerate(batches):
        if step % 2 == 0:
            expected[step] = model[0].weight.detach().clone().numpy()
        opt.zero_grad()
        F.mse_loss(model(x), y).backward()
        opt.step()
    hook.close()
    assert fake_cuda.recorded == [0, 1, 2, 3]  # one event per step, whatever it saves
    assert len(fake_cuda.waits) == 4
    trial = ts.create_trial(tmp_path)
    weight = trial.tensor("Sequential_0.weight")
    assert weight.steps() == [0, 2]
    for step, value in expected.items():
        np.testing.assert_array_equal(weight.value(step), value)
    assert trial.tensor("gradient/Sequential_0.weight").steps() == [0, 2]


def test_flush_reads_the_last_step_in_flight(tmp_path, fake_cuda: _FakeCuda) -> None:
    hook = ts.torch.Hook(tmp_path)
    fake_cuda.hook = hook
    model, opt, batches = _setup()
    hook.register_module(model)
    x, y = batches[0]
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    assert fake_cuda.waits == []
    assert hook.flush()
    assert fake_cuda.waits == [(0, 0)]
    assert ts.create_trial(tmp_path).tensor("loss").value(0).item() == loss.item()
    hook.close()


def test_an_mps_like_device_never_touches_torch_cuda(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch_tensors, "device_kind", lambda t: "mps")
    monkeypatch.setattr(torch_tensors, "snapshot", lambda t: t.detach().clone())
    for name in ("Event", "current_stream", "synchronize", "is_available", "Stream"):
        monkeypatch.setattr(torch.cuda, name, _forbidden)
    dtypes: list[torch.dtype] = []
    reduce = torch_tensors._reduce
    monkeypatch.setattr(
        torch_tensors, "_reduce", lambda t, n, a, dtype=torch.float64: (dtypes.append(dtype), reduce(t, n, a, dtype))[1]
    )
    hook = ts.torch.Hook(
        tmp_path,
        include_collections=["weights", "losses"],
        reduction_config=ts.ReductionConfig(reductions=["mean", "max"], save_raw_tensor=True),
        save_config=ts.SaveConfig(save_interval=1),
    )
    model, opt, batches = _setup()
    first = model[0].weight.detach().clone()
    losses = _train(hook, [])
    assert dtypes and set(dtypes) == {torch.float32}  # no float64 on MPS
    trial = ts.create_trial(tmp_path)
    assert [trial.tensor("loss").value(s).item() for s in range(4)] == losses
    np.testing.assert_array_equal(trial.tensor("Sequential_0.weight").value(0), first.numpy())
    assert trial.tensor("Sequential_0.weight").reduction_value(0, "mean") == pytest.approx(first.mean().item())


def test_reduction_dtype_per_device_kind() -> None:
    assert torch_tensors.reduction_dtype("cpu") is torch.float64
    assert torch_tensors.reduction_dtype("cuda") is torch.float64
    assert torch_tensors.reduction_dtype("mps") is torch.float32
    assert torch_tensors.device_kind(torch.ones(1)) == "cpu"


def test_one_event_per_stream_in_flight(monkeypatch: pytest.MonkeyPatch) -> None:
    recorded: list[str] = []

    class Event:
        def record(self, stream: str) -> None:
            recorded.append(stream)

    monkeypatch.setattr(torch.cuda, "Event", Event)
    plan = TensorPlan(True, (), False, frozenset())
    staged = [
        torch_tensors.Staged(n, plan, None, None, (), stream)
        for n, stream in (("a", "cuda:0"), ("b", "cuda:1"), ("c", "cuda:0"), ("d", None))
    ]
    assert len(torch_tensors.record_fence(staged)) == 2
    assert recorded == ["cuda:0", "cuda:1"]
    assert torch_tensors.record_fence([staged[3]]) == []
