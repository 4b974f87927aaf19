"""Sharded parameters on the hook side (issue 27, 2): DTensor placements, classic FSDP, ZeRO-3, staging pieces.

The offsets trainspect computes are checked against torch's own (``torch.chunk`` semantics and DTensor's local shape
and offset computation) for 1-d and 2-d meshes, and against ``full_tensor()`` on a real 4-rank gloo job; classic
FSDP's flat parameters are split on each of 2 ranks of a fake process group (no communication).
"""

from __future__ import annotations

import itertools
import json
import logging
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from _support.package import PACKAGE_ROOT
from torch import nn
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor._utils import _compute_local_shape_and_global_offset
from torch.distributed.tensor.placement_types import _StridedShard

import trainspect as ts
from trainspect import shard as shard_mod
from trainspect.hooks import torch_params, torch_tensors
from trainspect.hooks.save_plan import TensorPlan
from trainspect.hooks.torch_params import clean_path, model_name
from trainspect.hooks.torch_placements import Unrecordable, block_layout, placements_of
from trainspect.reductions import partials_of

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
JOBS = ROOT / "tests" / "sharded_jobs"
ENV = {
    "PATH": f"{BIN}:/usr/bin:/bin",
    "OMP_NUM_THREADS": "1",
    "TRAINSPECT_TESTING": "1",
    "PYTHONPATH": str(PACKAGE_ROOT),
}


def _chunked(full: torch.Tensor, mesh: tuple[int, ...], coord: tuple[int, ...], placements: list) -> torch.Tensor:
    """The piece of the rank at ``coord``: torch.chunk along each Shard dimension, in mesh order."""
    piece = full
    for size, c, p in zip(mesh, coord, placements, strict=True):
        if isinstance(p, Shard):
            parts = torch.chunk(piece, size, dim=p.dim)
            piece = parts[c] if c < len(parts) else piece.narrow(p.dim, 0, 0)
    return piece


@pytest.mark.parametrize("mesh", [(2,), (3,), (4,), (2, 2), (2, 3), (3, 2)])
def test_block_offsets_match_torch_chunk_and_dtensor(mesh: tuple[int, ...]) -> None:
    checked = 0
    for shape in [(7, 5), (3,), (1, 4), (5, 2), (8, 6), (2, 9), (0, 3)]:
        options = [Shard(0), Replicate(), Partial()] + ([Shard(1)] if len(shape) > 1 else [])
        full = torch.arange(float(np.prod(shape))).reshape(shape)
        for placements in itertools.product(options, repeat=len(mesh)):
            kinds = placements_of(placements)
            if ("partial", 0) in kinds and any(k == "shard" for k, _ in kinds):
                with pytest.raises(Unrecordable):
                    block_layout(shape, mesh, (0,) * len(mesh), kinds)
                continue
            for coord in itertools.product(*(range(m) for m in mesh)):
                offsets, local, replica, partial = block_layout(shape, mesh, coord, kinds)
                torch_local, torch_offsets = _compute_local_shape_and_global_offset(
                    shape, mesh, list(coord), placements
                )
                assert local == tuple(torch_local), (shape, mesh, placements, coord)
                expected = _chunked(full, mesh, coord, list(placements))
                assert tuple(expected.shape) == local
                if expected.numel():  # an empty piece's offsets are never recorded
                    assert offsets == tuple(torch_offsets)
                    window = full[tuple(slice(o, o + s) for o, s in zip(offsets, local, strict=True))]
                    assert torch.equal(window, expected)
                assert replica == any(
                    isinstance(p, Replicate) and c != 0 for p, c in zip(placements, coord, strict=True)
                )
                assert partial == any(isinstance(p, Partial) for p in placements)
                checked += 1
    assert checked >= 50


def test_placements_without_a_description_are_unrecordable() -> None:
    assert placements_of([Shard(1), Replicate(), Partial()]) == (("shard", 1), ("replicate", 0), ("partial", 0))
    with pytest.raises(Unrecordable, match="_StridedShard|not supported"):
        placements_of([_StridedShard(0, split_factor=2)])
    with pytest.raises(Unrecordable, match="not supported"):
        placements_of([Partial("avg")])
    with pytest.raises(Unrecordable, match="Partial placement beside Shard"):
        block_layout((4, 4), (2, 2), (0, 1), [("shard", 0), ("partial", 0)])


def test_dtensor_pieces_on_1d_and_2d_meshes_of_4_ranks_equal_full_tensor(tmp_path: Path) -> None:
    proc = subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            "4",
            str(JOBS / "dtensor_mesh_job.py"),
            str(tmp_path),
        ],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    ranks = [
        (json.loads((tmp_path / f"rank{r}.json").read_text()), np.load(tmp_path / f"rank{r}.npz")) for r in range(4)
    ]
    for case in range(len(ranks[0][0])):
        full = ranks[0][1][f"{case}/full"]
        metas = [meta[case] for meta, _ in ranks]
        if "unrecordable" in metas[0]:  # Shard beside Partial: every rank says so, naming the placement
            assert all("P(sum)" in m["unrecordable"] or "Partial" in m["unrecordable"] for m in metas)
            continue
        covered = np.zeros(full.shape, dtype=int)
        total = np.zeros(full.shape)
        for (_, arrays), m in zip(ranks, metas, strict=True):
            shard = shard_mod.Shard.from_dict(m["shard"])
            local = arrays[f"{case}/local"]
            assert shard.global_shape == full.shape
            if shard.layout == "partial_sum":
                if not shard.replica:
                    total += local
                continue
            window = tuple(slice(o, o + s) for o, s in zip(shard.offsets, local.shape, strict=True))
            np.testing.assert_array_equal(full[window], local)  # the piece is where its Shard says
            if not shard.replica:
                covered[window] += 1
        if metas[0]["shard"]["k"] == "partial_sum":
            np.testing.assert_allclose(total, full)
        else:
            assert (covered == 1).all(), case  # the non-replica pieces hold every element exactly once


def test_classic_fsdp_flat_parameters_map_back_to_original_names_on_each_rank() -> None:
    proc = subprocess.run(
        [sys.executable, str(JOBS / "fsdp1_fake_ranks.py")],
        cwd=ROOT,
        env=ENV,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert not [line for line in lines if "warning" in line]
    sizes = {
        "Net_a.weight": 35,
        "Net_a.bias": 7,
        "Net_b.weight": 42,
        "Net_b.bias": 6,
        "Net_c.weight": 18,
        "Net_c.bias": 3,
    }
    for orig in (False, True):
        views = [line for line in lines if line["orig"] is orig]
        assert all(v["equal"] and v["layout"] == "flat" for v in views)  # each piece is its parameter's slice
        for name, size in sizes.items():
            pieces = sorted((v["start"], v["size"]) for v in views if v["name"] == name)
            assert pieces[0][0] == 0 and sum(s for _, s in pieces) == size, (orig, name, pieces)
            assert all(a + s == b for (a, s), (b, _) in zip(pieces, pieces[1:], strict=False)), (orig, name, pieces)
        assert {v["rank"] for v in views if v["name"] == "Net_b.weight"} == {0, 1}  # split across the ranks


def test_names_look_through_wrappers() -> None:
    from torch.distributed.fsdp import FSDPModule

    class Net(nn.Module):
        pass

    generated = type("FSDPNet", (FSDPModule, Net), {})  # what fully_shard makes of a Net
    assert model_name(generated.__new__(generated)) == "Net"
    assert clean_path("_fsdp_wrapped_module.a._checkpoint_wrapped_module.weight") == "a.weight"
    assert clean_path("_orig_mod.layer.bias") == "layer.bias"
    assert clean_path("module.weight") == "module.weight"  # a user's own submodule named "module" stays


def _zero3_param() -> nn.Parameter:
    """A ZeRO-3 partitioned 3x3 parameter: partitions of 5, rank 0 holds elements 0-4, rank 1 5-8 and one padding."""
    param = nn.Parameter(torch.empty(0))
    param.ds_shape, param.ds_numel, param.ds_process_group = (3, 3), 9, None
    param.ds_tensor = torch.arange(5.0)
    param.ds_tensor.ds_numel = 5
    return param


def test_zero3_partition_without_padding(monkeypatch: pytest.MonkeyPatch) -> None:
    param = _zero3_param()
    for rank, start, valid in ((0, 0, 5), (1, 5, 4)):
        monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None, rank=rank: rank)
        view = torch_params._zero3_view("Net_w", param)
        piece, shard = view.weight()
        assert piece.numel() == valid and shard.offsets == (start,) and shard.global_shape == (3, 3)
        assert shard.layout == "flat" and not view.hookable
    param.ds_numel = 5  # a rank whose partition is padding only has no view
    assert torch_params._zero3_view("Net_w", param) is None


def test_a_staged_piece_carries_partials_instead_of_reductions() -> None:
    plan = TensorPlan(True, (("mean", False), ("l2", False)), False, frozenset({"weights"}))
    piece = torch.tensor([[1.5, -2.0], [0.25, 4.0]])
    shard = shard_mod.Shard((4, 2), (2, 0), placement="test")
    staged = torch_tensors.stage("w", piece, plan, shard)
    assert staged is not None and staged.reductions is None and staged.shard == shard
    partials = torch_tensors.partials_dict(staged)
    assert partials == pytest.approx(partials_of(piece.numpy()))
    np.testing.assert_array_equal(staged.raw, piece.numpy())
    ints = torch_tensors.stage("i", torch.tensor([3, -1, 2]), plan, shard_mod.Shard((6,), (3,), "flat"))
    assert torch_tensors.partials_dict(ints) == pytest.approx(partials_of(np.array([3, -1, 2])))
    assert torch_tensors.stage("e", torch.empty(0, 2), plan, shard) is None  # another rank holds every element


def test_a_tensor_subclass_that_cannot_be_copied_loses_neither_the_step_nor_its_loss(tmp_path: Path, caplog) -> None:
    from torch.testing._internal.two_tensor import TwoTensor

    with pytest.raises(Unrecordable, match="TwoTensor"):
        torch_tensors.stage("odd", TwoTensor(torch.ones(2), torch.ones(2)), TensorPlan(True, (), False, frozenset()))
    model = nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with caplog.at_level(logging.WARNING), ts.torch.Hook(tmp_path / "run") as hook:
        hook.register_module(model)
        for _ in range(2):
            loss = model(torch.ones(3, 2)).pow(2).mean()
            hook.save_tensor("odd", TwoTensor(torch.ones(2), torch.zeros(2)))
            loss.backward()
            opt.step()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.tensor("loss").steps() == [0, 1] and "odd" not in trial.tensor_names()
    assert [r for r in caplog.records if "odd is not recorded" in r.getMessage()].__len__() == 1


class _Collector:
    """What ``ModelRegistry.refresh`` reads of a collector."""

    def __init__(self, opened: bool, records_tensors: bool) -> None:
        self.opened, self.records_tensors, self.sharded = opened, records_tensors, False


@pytest.mark.parametrize(
    ("opened", "records_tensors", "sharded", "warnings"),
    [
        (False, False, True, 0),  # sharded before the run opened: every rank records (no warning needed)
        (True, False, False, 1),  # after: only rank 0's pieces are kept, said once
        (True, True, False, 0),  # this worker records tensors anyway (include_workers="all"): nothing to say
    ],
)
def test_a_model_sharded_after_the_run_opened_is_warned_about_once_where_its_pieces_are_lost(
    monkeypatch: pytest.MonkeyPatch, caplog, opened: bool, records_tensors: bool, sharded: bool, warnings: int
) -> None:
    from trainspect.hooks.torch_models import ModelRegistry

    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 1)
    registry = ModelRegistry(None, lambda name, why: None)
    model = nn.Linear(3, 3, bias=False)
    registry.add(model)
    collector = _Collector(opened, records_tensors)
    with caplog.at_level(logging.WARNING):
        assert registry.refresh(collector)
        assert not any(view.sharded for view in registry.params) and collector.sharded is False
        model.weight = _zero3_param()  # sharded after registration (an engine replaces the parameter)
        assert registry.refresh(collector)
        assert any(view.sharded for view in registry.params)
        model.weight = _zero3_param()  # sharded again: still one warning
        assert registry.refresh(collector)
    said = [r for r in caplog.records if "sharded after recording began" in r.getMessage()]
    assert len(said) == warnings and collector.sharded is sharded


@pytest.mark.parametrize("sharded", [False, True])
def test_a_model_sharded_between_registration_and_its_first_step_is_recorded_by_every_rank(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sharded: bool
) -> None:
    """The run opens at the first step: parameters an engine sharded after ``register_module`` are looked at again
    then, so every rank records its pieces (a piece alone is no tensor), not only rank 0."""
    monkeypatch.setattr(torch.distributed, "get_rank", lambda group=None: 0)
    model = nn.Linear(3, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ts.torch.Hook(tmp_path / "run", export_tensorboard=False) as hook:
        hook.register_module(model)
        if sharded:  # an engine's partition of a further parameter (ZeRO-3), unused by this forward pass
            model.extra = _zero3_param()
        model(torch.ones(2, 3)).pow(2).mean().backward()
        opt.step()
        assert hook.collector.sharded is sharded
