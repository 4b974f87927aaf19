"""A saving step's CPU weights and gradients are copied in one batch: the same values as one copy per tensor."""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from trainspect.hooks.save_plan import TensorPlan
from trainspect.hooks.torch_tensors import batchable, stage, stage_batch

RAW = TensorPlan(True, (), False, frozenset({"weights"}))


def _tensors() -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [
        nn.Parameter(torch.randn(4, 3)),
        torch.randn(3, 4).t(),  # not contiguous
        torch.tensor(2.5, dtype=torch.float64),
        torch.arange(6, dtype=torch.int32).reshape(2, 3),
        torch.zeros(0, 3),
        torch.tensor([True, False]),
        torch.randn(5).half(),
        torch.randn(2, 2, requires_grad=True),
    ]


def test_batch_equals_one_by_one() -> None:
    tensors = _tensors()
    assert all(batchable(t, RAW, None) for t in tensors)
    batched = stage_batch([(f"t{i}", t, RAW) for i, t in enumerate(tensors)])
    for i, (t, b) in enumerate(zip(tensors, batched, strict=True)):
        one = stage(f"t{i}", t, RAW)
        assert one is not None and b.name == one.name and b.shape == one.shape and b.stream is None
        assert isinstance(b.raw, np.ndarray) and isinstance(one.raw, np.ndarray)
        assert b.raw.dtype == one.raw.dtype and b.raw.shape == one.raw.shape and b.raw.flags.c_contiguous
        assert b.raw.tobytes() == one.raw.tobytes()


def test_batch_is_a_copy() -> None:
    weight = nn.Parameter(torch.ones(3))
    (staged,) = stage_batch([("w", weight, RAW)])
    with torch.no_grad():
        weight.add_(1)
    assert staged.raw.tolist() == [1.0, 1.0, 1.0]


def test_not_batchable() -> None:
    reduced = TensorPlan(True, (("mean", False),), False, frozenset({"weights"}))
    assert not batchable(torch.ones(2).bfloat16(), RAW, None)
    assert not batchable(torch.ones(2, dtype=torch.complex64), RAW, None)
    assert not batchable(torch.ones(2), reduced, None)
    assert not batchable(torch.ones(2).to_sparse(), RAW, None)
