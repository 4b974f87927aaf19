"""Sharded and wrapped parameters, and the gradient the optimizer applies, under real engines (issue 27, 2-3).

Each test launches one script of ``tests/sharded_jobs`` with ``torchrun`` (2 ranks, CPU, gloo); the script saves
what the hook should have recorded, computed with the engine's own gather, and the test compares the run with it:
the full tensor the Trial assembles from the ranks' pieces, and each rank's piece.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from _support.package import PACKAGE_ROOT

import trainspect as ts

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
JOBS = ROOT / "tests" / "sharded_jobs"
SAVED = (0, 2)


def _run(job: str, out: Path, option: str = "", ranks: int = 2, timeout: int = 240) -> ts.Trial:
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
        "DS_ACCELERATOR": "cpu",
    }
    proc = subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            str(ranks),
            str(JOBS / f"{job}.py"),
            "--out",
            str(out),
            "--option",
            option,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return ts.create_trial(out)


def _expected(out: Path, ranks: int = 2) -> list[dict[str, np.ndarray]]:
    return [dict(np.load(out / f"expected_rank{r}.npz")) for r in range(ranks)]


def _name(prefix: str, kind: str, param: str) -> str:
    return f"{prefix}_{param}" if kind == "w" else f"gradient/{prefix}_{param}"


def _assert_full_tensors(trial: ts.Trial, expected: dict[str, np.ndarray], prefix: str) -> None:
    """Every saved weight and gradient, assembled from the pieces, equals the engine's full tensor."""
    assert expected
    for key, value in expected.items():
        kind, step, param = key.split("/", 2)
        if kind in ("w", "g"):
            got = trial.tensor(_name(prefix, kind, param)).value(int(step))
            np.testing.assert_allclose(got, value, rtol=1e-6, atol=1e-7, err_msg=key)


def _assert_pieces_cover(
    trial: ts.Trial, expected: dict[str, np.ndarray], prefix: str, flat: bool, split: bool = True
) -> None:
    """The ranks' pieces hold the full tensor exactly once (``split``: every one of them is split between ranks)."""
    for key, value in expected.items():
        kind, step, param = key.split("/", 2)
        tensor = trial.tensor(_name(prefix, kind, param))
        pieces = [tensor.value(int(step), worker=w) for w in tensor.workers(int(step))]
        assert sum(p.size for p in pieces) == value.size, key
        if split and value.size > 1:
            assert all(p.size < value.size for p in pieces), key
        for piece in pieces:
            assert piece.ndim == 1 if flat else piece.ndim == value.ndim


def test_fsdp2_shards_recorded_per_rank_and_assembled_to_full_tensor(tmp_path: Path) -> None:
    trial = _run("fsdp2_job", tmp_path)
    assert trial.workers() == ["worker_0", "worker_1"] and trial.steps() == [0, 1, 2, 3]
    exp = _expected(tmp_path)
    _assert_full_tensors(trial, exp[0], "Net")
    _assert_pieces_cover(trial, exp[0], "Net", flat=False)
    # torch.chunk's uneven split: 7 rows are 4 + 3, 3 rows 2 + 1; weight and gradient pieces alike
    weight = trial.tensor("Net_a.weight")
    assert [weight.value(0, worker=w).shape for w in ("worker_0", "worker_1")] == [(4, 5), (3, 5)]
    grad = trial.tensor("gradient/Net_c.weight")
    np.testing.assert_allclose(grad.value(2, worker="worker_1"), exp[0]["g/2/c.weight"][2:], rtol=1e-6)
    assert len(trial.tensor("loss").steps()) == 4


def test_fsdp2_reductions_of_the_full_tensor_from_partials(tmp_path: Path) -> None:
    trial = _run("fsdp2_job", tmp_path, "reductions")
    exp = _expected(tmp_path)[0]
    for key in ("w/0/a.weight", "g/2/b.weight", "w/2/c.bias"):
        kind, step, param = key.split("/", 2)
        tensor, full = trial.tensor(_name("Net", kind, param)), exp[key].astype(np.float64)
        want = {
            ("mean", False): full.mean(),
            ("max", False): full.max(),
            ("min", False): full.min(),
            ("variance", False): full.var(),
            ("l2", False): math.sqrt((full**2).sum()),
            ("mean", True): np.abs(full).mean(),
            ("max", True): np.abs(full).max(),
        }
        for (name, absolute), value in want.items():
            got = tensor.reduction_value(int(step), name, abs=absolute)
            assert got == pytest.approx(value, rel=1e-6, abs=1e-9), (key, name, absolute)


def test_tensor_parallel_colwise_and_rowwise(tmp_path: Path) -> None:
    trial = _run("tp_job", tmp_path)
    exp = _expected(tmp_path)
    _assert_full_tensors(trial, exp[0], "Mlp")
    up, down = trial.tensor("Mlp_up.weight"), trial.tensor("Mlp_down.weight")
    assert up.value(0, worker="worker_1").shape == (4, 5)  # ColwiseParallel: Shard(0)
    np.testing.assert_allclose(
        down.value(2, worker="worker_1"), exp[0]["w/2/down.weight"][:, 4:], rtol=1e-6
    )  # Shard(1)
    bias = trial.tensor("gradient/Mlp_down.bias")  # RowwiseParallel's bias: Replicate (rank 1 holds a replica)
    for w in ("worker_0", "worker_1"):
        np.testing.assert_allclose(bias.value(2, worker=w), exp[0]["g/2/down.bias"], rtol=1e-6)


@pytest.mark.parametrize("option", ["flat", "orig"])
def test_classic_fsdp_mapped_back_to_the_original_parameters(tmp_path: Path, option: str) -> None:
    trial = _run("fsdp1_job", tmp_path, option)
    names = {f"Net_{layer}.{p}" for layer in "abc" for p in ("weight", "bias")}
    assert names <= set(trial.tensor_names()) and not any("flat_param" in n for n in trial.tensor_names())
    exp = _expected(tmp_path)
    _assert_full_tensors(trial, exp[0], "Net")
    # b.weight (42 elements) starts the root's flat parameter and is split between the ranks
    pieces = trial.tensor("Net_b.weight")
    assert pieces.workers(0) == ["worker_0", "worker_1"]
    assert all(pieces.value(0, worker=w).ndim == 1 for w in ("worker_0", "worker_1"))


@pytest.mark.parametrize("stage", ["2", "3"])
def test_deepspeed_zero_on_cpu(tmp_path: Path, stage: str) -> None:
    trial = _run("deepspeed_job", tmp_path, stage, timeout=300)
    exp = _expected(tmp_path)
    _assert_full_tensors(trial, exp[0], "Net")
    for step in SAVED:  # never an empty (0,) array: every piece holds elements
        for name in trial.tensor_names():
            tensor = trial.tensor(name)
            if step in tensor.steps():
                assert all(tensor.value(step, worker=w).size > 0 for w in tensor.workers(step)), name
    if stage == "3":  # the weights themselves are partitions
        weights = {k: v for k, v in exp[0].items() if k.startswith("w/")}
        _assert_pieces_cover(trial, weights, "Net", flat=True)
    else:  # ZeRO-2: whole weights on every rank; gradients from each rank's reduced partition
        assert trial.tensor("Net_a.weight").value(0, worker="worker_1").shape == (7, 5)
        grads = {k: v for k, v in exp[0].items() if k.startswith("g/")}
        _assert_pieces_cover(trial, grads, "Net", flat=True, split=False)  # a.weight lies in rank 0's partition
        assert trial.tensor("gradient/Net_b.weight").workers(0) == ["worker_0", "worker_1"]


def _ddp_gradients(trial: ts.Trial, step: int, name: str) -> list[np.ndarray]:
    return [trial.tensor(f"gradient/Net_{name}").value(step, worker=w) for w in ("worker_0", "worker_1")]


@pytest.mark.parametrize("option", ["default", "nosync"])
def test_ddp_records_the_all_reduced_gradient_on_every_rank(tmp_path: Path, option: str) -> None:
    trial = _run("ddp_job", tmp_path, option)
    exp = _expected(tmp_path)
    for step in SAVED:
        for name in ("a.weight", "b.bias", "c.weight"):
            recorded = _ddp_gradients(trial, step, name)
            np.testing.assert_array_equal(recorded[0], recorded[1])  # identical on every rank
            np.testing.assert_allclose(recorded[0], exp[0][f"g/{step}/{name}"], rtol=1e-6)
            mean_local = (exp[0][f"l/{step}/{name}"] + exp[1][f"l/{step}/{name}"]) / 2
            np.testing.assert_allclose(recorded[0], mean_local, rtol=1e-5, atol=1e-7)


def test_ddp_local_gradients_option_keeps_each_ranks_own(tmp_path: Path) -> None:
    trial = _run("ddp_job", tmp_path, "local")
    exp = _expected(tmp_path)
    for step in SAVED:
        recorded = _ddp_gradients(trial, step, "a.weight")
        assert not np.allclose(recorded[0], recorded[1])  # each rank its own batch's gradient
        for r in (0, 1):
            np.testing.assert_allclose(recorded[r], exp[r][f"l/{step}/a.weight"], rtol=1e-5, atol=1e-7)
