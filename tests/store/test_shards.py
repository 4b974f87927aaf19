"""Issue 27 (point 2, store side): sharded tensors written per rank through the real writer, read back by the Trial.

No framework: every rank's piece is cut from a NumPy array the way DTensor/FSDP cut it (``torch.chunk`` semantics:
a last piece smaller or empty), written by that rank's ``TensorFileWriter`` with its ``Shard`` and partial statistics,
and the Trial's full tensor, reductions and shapes are compared with the full array itself.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import trainspect as ts
from trainspect.exceptions import TensorUnavailableForStep
from trainspect.modes import ModeKeys
from trainspect.reductions import NAMES, Reduction, combine_partials, partials_of, reduce, reduce_from_partials
from trainspect.shard import PARTIAL_KEYS, Shard
from trainspect.step import StepRecord, TensorRecord
from trainspect.store import framing
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import mark_job_end
from trainspect.store.tensor_file import KIND_INDEX, TensorFileWriter

pytestmark = pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # NumPy's own, on NaN/Inf
RNG = np.random.default_rng(27)
ALL = [Reduction(n, a) for n in NAMES for a in (False, True)]
Piece = tuple[np.ndarray, Shard]  # a rank's local value and where it sits


def chunks(n: int, k: int) -> list[tuple[int, int]]:
    """(offset, length) of each of k ranks' pieces of n, as torch.chunk / DTensor Shard(d) cut (empty ones padded)."""
    size = -(-n // k) if n else 0
    return [(min(i * size, n), max(0, min(size, n - i * size))) for i in range(k)]


def close(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b or math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


# --- the partial statistics: brute force on random arrays cut into uneven pieces -------------------------------------


def _cuts(n: int, k: int) -> list[int]:
    return sorted(int(c) for c in RNG.integers(0, n + 1, size=k - 1))


@pytest.mark.parametrize("case", ["normal", "float32", "int", "nan", "inf", "mixed_inf", "constant", "tiny"])
def test_partials_combine_to_the_full_arrays_reductions(case: str) -> None:
    empty = 0
    for _ in range(40):
        n = int(RNG.integers(0, 40)) if case != "tiny" else int(RNG.integers(0, 3))
        full = RNG.standard_normal(n) * 3 + 1.5
        if case == "float32":
            full = full.astype(np.float32)
        elif case == "int":
            full = RNG.integers(-5, 6, size=n)
        elif case == "nan" and n:
            full[RNG.integers(0, n)] = np.nan
        elif case == "inf" and n:
            full[RNG.integers(0, n)] = np.inf
        elif case == "mixed_inf" and n > 1:
            full[0], full[-1] = np.inf, -np.inf
        elif case == "constant":
            full = np.full(n, 0.1)
        pieces = np.split(full, _cuts(n, int(RNG.integers(1, 6))))
        empty += sum(p.size == 0 for p in pieces)
        combined = combine_partials([partials_of(p) for p in pieces])
        assert combined["count"] == n
        for name, absolute in ALL:
            want, got = reduce(full, name, absolute), reduce_from_partials(combined, name, absolute)
            assert close(got, want), (case, n, name, absolute, got, want)
    assert empty  # empty pieces were among them (cuts at equal points, at the ends, n == 0)


def test_partials_of_defines_every_key_and_an_empty_piece_is_its_count() -> None:
    x = np.array([-2.0, 1.0, 4.0], np.float32)
    p = partials_of(x)
    assert set(p) == set(PARTIAL_KEYS)
    assert p == {
        "count": 3.0,
        "sum": 3.0,
        "sum_sq": 21.0,
        "m2": 18.0,
        "min": -2.0,
        "max": 4.0,
        "abs_sum": 7.0,
        "abs_m2": pytest.approx(4.6666666666),
        "abs_min": 1.0,
        "abs_max": 4.0,
        "prod": -8.0,
    }
    assert partials_of(np.zeros((0, 3))) == {"count": 0.0}
    assert combine_partials([{"count": 0.0}, {"count": 0.0}]) == {"count": 0.0}
    assert math.isnan(reduce_from_partials({"count": 0.0}, "mean"))
    with pytest.raises(KeyError):
        reduce_from_partials({"count": 2.0, "sum": 1.0}, "max")
    with pytest.raises(ValueError, match="allowed"):
        reduce_from_partials(p, "median")
    with pytest.raises(ValueError, match="complex"):
        partials_of(np.array([1j]))
    # a statistic missing from one non-empty piece is missing from the combination; the others still combine
    partial = combine_partials([{"count": 1.0, "sum": 2.0}, partials_of(np.array([1.0, 3.0]))])
    assert partial == {"count": 3.0, "sum": 6.0}


# --- writing runs -----------------------------------------------------------------------------------------------------


def write_run(
    root: Path,
    steps: dict[int, dict[str, list[Piece | None]]],
    partials: bool = True,
    reductions: bool = True,
    raw: bool = True,
    end: bool = True,
) -> Path:
    """Write ``{step: {name: [rank 0's piece, rank 1's ...]}}`` (None: that rank records nothing of it at that step)."""
    world = max(len(p) for per_name in steps.values() for p in per_name.values())
    writers = [TensorFileWriter(root / "tensors" / f"worker_{r}") for r in range(world)]
    for step, per_name in sorted(steps.items()):
        for rank, writer in enumerate(writers):
            tensors = {}
            for name, pieces in per_name.items():
                piece = pieces[rank] if rank < len(pieces) else None
                if piece is None:
                    continue
                local, shard = piece
                reds = {key: reduce(local, *key) for key in ALL if local.size} if reductions else {}
                tensors[name] = TensorRecord(
                    name,
                    local if raw else None,
                    reds,
                    shape=local.shape,
                    shard=shard,
                    partials=partials_of(local) if partials else None,
                )
            tensors["loss"] = TensorRecord("loss", np.array(0.5 + step, np.float32))
            writer.write(StepRecord(ModeKeys.TRAIN, step, step, 100.0 + step, f"worker_{rank}", tensors))
    for writer in writers:
        writer.close()
    if end:
        mark_job_end(RunLayout(root))
    return root


def shard_0(full: np.ndarray, world: int) -> list[Piece | None]:
    """A 1-d mesh, ``[Shard(0)]``: rank r holds chunk r of the rows."""
    out: list[Piece | None] = []
    for off, length in chunks(full.shape[0], world):
        shard = Shard(full.shape, (off,) + (0,) * (full.ndim - 1), placement=f"DTensor mesh ({world},) [Shard(dim=0)]")
        out.append((full[off : off + length], shard))
    return out


def shard_0_1(full: np.ndarray, mesh: tuple[int, int]) -> list[Piece | None]:
    """A 2-d mesh, ``[Shard(0), Shard(1)]``: rank (i, j) holds row chunk i, column chunk j."""
    out: list[Piece | None] = []
    for r0, n0 in chunks(full.shape[0], mesh[0]):
        for r1, n1 in chunks(full.shape[1], mesh[1]):
            out.append(
                (full[r0 : r0 + n0, r1 : r1 + n1], Shard(full.shape, (r0, r1), placement="[Shard(0), Shard(1)]"))
            )
    return out


def replicate_shard_0(full: np.ndarray, mesh: tuple[int, int]) -> list[Piece | None]:
    """A 2-d mesh, ``[Replicate(), Shard(0)]``: rank (i, j) holds row chunk j; ranks with i > 0 hold replicas."""
    out: list[Piece | None] = []
    for i in range(mesh[0]):
        for off, length in chunks(full.shape[0], mesh[1]):
            shard = Shard(
                full.shape, (off,) + (0,) * (full.ndim - 1), replica=i > 0, placement="[Replicate(), Shard(0)]"
            )
            out.append((full[off : off + length], shard))
    return out


def flat(full: np.ndarray, world: int) -> list[Piece | None]:
    """Classic FSDP / ZeRO-3: rank r holds chunk r of the flattened tensor (padding removed)."""
    values = full.reshape(-1)
    return [
        (values[o : o + n], Shard(full.shape, (o,), "flat", placement="FSDP FlatParameter"))
        for o, n in chunks(values.size, world)
    ]


def partial_sum(parts: list[np.ndarray]) -> list[Piece | None]:
    """DTensor ``Partial``: every rank holds a full-shaped addend."""
    return [(p, Shard(p.shape, (0,) * p.ndim, "partial_sum", placement="[Partial(sum)]")) for p in parts]


LAYOUTS: dict[str, Callable[[np.ndarray], list[Piece | None]]] = {
    "shard0_w2": lambda a: shard_0(a, 2),
    "shard0_w4_uneven_empty": lambda a: shard_0(a, 4),  # 5 rows over 4 ranks: 2, 2, 1, 0
    "shard0_shard1_2x2": lambda a: shard_0_1(a, (2, 2)),
    "replicate_shard0_2x2": lambda a: replicate_shard_0(a, (2, 2)),
    "flat_w4_uneven": lambda a: flat(a, 4),  # 35 elements: 9, 9, 9, 8
}


def _full(step: int) -> np.ndarray:
    return (RNG.standard_normal((5, 7)) * (step + 1)).astype(np.float32)


def _check_full_tensor(trial: ts.Trial, name: str, full: dict[int, np.ndarray], pieces: dict[int, list]) -> None:
    t = trial.tensor(name)
    for step, want in full.items():
        got = t.value(step)
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_array_equal(got, want)
        assert t.shape(step) == want.shape and t.is_sharded(step)
        for key in ALL:
            assert close(t.reduction_value(step, key.name, abs=key.absolute), reduce(want, *key)), key
        reds = t.reduction_values(step)
        assert set(reds) == set(ALL) and all(close(reds[k], reduce(want, *k)) for k in ALL)
        for rank, (local, shard) in enumerate(pieces[step]):
            worker = f"worker_{rank}"
            np.testing.assert_array_equal(t.value(step, worker=worker), local)
            assert t.shape(step, worker=worker) == local.shape and t.shard(step, worker) == shard
            if local.size:
                assert close(t.reduction_value(step, "l2", worker=worker), reduce(local, "l2"))
    assert sorted(t.values()) == sorted(full)
    for step, value in t.values().items():
        np.testing.assert_array_equal(value, full[step])


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_full_tensor_values_reductions_and_shapes_equal_the_full_array(tmp_path: Path, layout: str) -> None:
    full = {s: _full(s) for s in range(3)}
    pieces = {s: LAYOUTS[layout](full[s]) for s in full}
    trial = ts.create_trial(write_run(tmp_path, {s: {"w": pieces[s]} for s in full}))
    assert trial.workers() == [f"worker_{r}" for r in range(len(pieces[0]))]
    _check_full_tensor(trial, "w", full, pieces)
    assert not trial.tensor("loss").is_sharded(0) and trial.tensor("loss").shard(0) is None


def test_uneven_chunks_hold_an_empty_piece_that_reads_back(tmp_path: Path) -> None:
    assert chunks(5, 4) == [(0, 2), (2, 2), (4, 1), (5, 0)] and chunks(35, 4)[-1] == (27, 8)
    full = _full(0)
    trial = ts.create_trial(write_run(tmp_path, {0: {"w": shard_0(full, 4)}}))
    t = trial.tensor("w")
    assert t.value(0, worker="worker_3").shape == (0, 7) and t.shard(0, "worker_3") == Shard(
        (5, 7), (5, 0), placement=t.shard(0).placement
    )
    assert math.isnan(t.reduction_values(0, worker="worker_3")[Reduction("l2")])  # from its partials, as reduce([])
    np.testing.assert_array_equal(t.value(0), full)


def test_partial_sum_is_the_sum_of_every_ranks_piece(tmp_path: Path) -> None:
    parts = [RNG.standard_normal((3, 4)) for _ in range(4)]
    trial = ts.create_trial(write_run(tmp_path, {0: {"g": partial_sum(parts)}}))
    t = trial.tensor("g")
    want = parts[0] + parts[1] + parts[2] + parts[3]
    np.testing.assert_allclose(t.value(0), want, rtol=1e-12)
    assert t.shape(0) == (3, 4)
    for key in ALL:  # partials of addends do not combine: reduced from the assembled value
        assert close(t.reduction_value(0, key.name, abs=key.absolute), reduce(t.value(0), *key))
    np.testing.assert_array_equal(t.value(0, worker="worker_2"), parts[2])


def test_a_replica_stands_in_for_a_missing_holder(tmp_path: Path) -> None:
    full = _full(0)
    pieces = replicate_shard_0(full, (2, 2))  # workers 2 and 3 hold replicas of 0 and 1
    pieces[1] = None
    trial = ts.create_trial(write_run(tmp_path, {0: {"w": pieces}}))
    np.testing.assert_array_equal(trial.tensor("w").value(0), full)
    assert close(trial.tensor("w").reduction_value(0, "std"), reduce(full, "std"))


def test_a_missing_piece_raises_naming_the_workers_and_values_skip_the_step(tmp_path: Path) -> None:
    full = {s: _full(s) for s in range(3)}
    pieces = {s: shard_0(full[s], 4) for s in full}
    pieces[1][2] = None  # rank 2 recorded nothing of w at step 1 (a dead rank, or not asked to)
    trial = ts.create_trial(write_run(tmp_path, {s: {"w": pieces[s]} for s in full}))
    t = trial.tensor("w")
    with pytest.raises(TensorUnavailableForStep) as err:
        t.value(1)
    text = str(err.value)
    assert "the pieces of worker_0, worker_1, worker_3 hold 28 of its 35 elements" in text
    assert "no piece at this step from worker_2" in text
    assert 'worker="worker_N"' in text and 'include_workers="all"' in text
    for call in (lambda: t.reduction_value(1, "mean"), lambda: t.reduction_values(1)):
        with pytest.raises(TensorUnavailableForStep, match="no piece at this step from worker_2"):
            call()
    assert t.shape(1) == (5, 7)  # the global shape is known from any piece
    np.testing.assert_array_equal(t.value(1, worker="worker_1"), full[1][2:4])
    assert sorted(t.values()) == [0, 2]
    assert any("values() skipped steps of w" in p and "worker_2" in p for p in trial.problems)


def test_only_rank_0_recorded_says_the_other_pieces_are_missing(tmp_path: Path) -> None:
    full = _full(0)
    pieces = shard_0(full, 4)
    trial = ts.create_trial(write_run(tmp_path, {0: {"w": pieces[:1]}}))  # include_workers="one"
    with pytest.raises(TensorUnavailableForStep, match=r"worker_0 hold 14 of its 35 elements.*include_workers"):
        trial.tensor("w").value(0)
    np.testing.assert_array_equal(trial.tensor("w").value(0, worker="worker_0"), full[:2])


def test_partial_sum_with_a_rank_missing_raises(tmp_path: Path) -> None:
    parts = [RNG.standard_normal(3) for _ in range(3)]
    pieces = partial_sum(parts)
    run = {0: {"g": pieces}, 1: {"g": [pieces[0], None, pieces[2]]}}
    trial = ts.create_trial(write_run(tmp_path, run))
    with pytest.raises(
        TensorUnavailableForStep, match="sum of every rank's piece.*no piece at this step from worker_1"
    ):
        trial.tensor("g").value(1)
    np.testing.assert_allclose(trial.tensor("g").value(0), sum(parts), rtol=1e-12)


def test_reductions_from_partials_without_raw_values(tmp_path: Path) -> None:
    full = _full(0).astype(np.float64)
    full[1, 3] = np.inf
    trial = ts.create_trial(write_run(tmp_path, {0: {"w": shard_0(full, 4)}}, raw=False))
    t = trial.tensor("w")
    for key in ALL:
        assert close(t.reduction_value(0, key.name, abs=key.absolute), reduce(full, *key)), key
    assert t.shape(0) == (5, 7) and t.shape(0, worker="worker_2") == (1, 7)
    with pytest.raises(TensorUnavailableForStep, match="only reductions were saved.*no raw value"):
        t.value(0)
    assert t.values() == {}


def test_reductions_from_the_assembled_value_without_partials(tmp_path: Path) -> None:
    full = _full(0)
    trial = ts.create_trial(write_run(tmp_path, {0: {"w": flat(full, 3)}}, partials=False))
    t = trial.tensor("w")
    for key in ALL:
        assert close(t.reduction_value(0, key.name, abs=key.absolute), reduce(full, *key)), key
    assert set(t.reduction_values(0)) == set(ALL)  # the keys the pieces saved, of the full tensor
    local = t.value(0, worker="worker_1")
    assert close(t.reduction_value(0, "mean", worker="worker_1"), reduce(local, "mean"))


def test_neither_partials_nor_raw_values_says_what_the_full_reduction_needs(tmp_path: Path) -> None:
    trial = ts.create_trial(write_run(tmp_path, {0: {"w": shard_0(_full(0), 2)}}, partials=False, raw=False))
    t = trial.tensor("w")
    with pytest.raises(TensorUnavailableForStep, match="partial statistics or raw value"):
        t.reduction_value(0, "mean")
    assert t.reduction_values(0) == {}
    assert math.isfinite(t.reduction_value(0, "mean", worker="worker_1"))  # the pieces' own saved ones stay readable


def test_sharded_index_entries_carry_sh_and_pt_with_non_finite_strings(tmp_path: Path) -> None:
    full = np.array([[1.0, np.nan], [np.inf, 2.0]])
    write_run(tmp_path, {0: {"w": shard_0(full, 2)}}, reductions=False)
    docs = _index_docs(tmp_path / "tensors" / "worker_0")
    (entry,) = [e for e in docs[0]["e"] if e["n"] == "w"]
    assert entry["sh"] == {"g": [2, 2], "o": [0, 0], "k": "block", "p": "DTensor mesh (2,) [Shard(dim=0)]"}
    assert entry["pt"]["count"] == 2.0 and entry["pt"]["m2"] == "NaN" and entry["pt"]["max"] == "NaN"
    (entry,) = [e for e in _index_docs(tmp_path / "tensors" / "worker_1")[0]["e"] if e["n"] == "w"]
    assert entry["pt"]["max"] == "Infinity" and entry["pt"]["sum"] == "Infinity"
    t = ts.create_trial(tmp_path).tensor("w")
    assert t.shard(0, "worker_1") == Shard((2, 2), (1, 0), placement="DTensor mesh (2,) [Shard(dim=0)]")
    assert math.isnan(t.reduction_value(0, "max")) and t.reduction_value(0, "abs_max") != t.reduction_value(0, "min")


def _index_docs(folder: Path) -> list[dict[str, Any]]:
    data = b"".join(p.read_bytes() for p in sorted(folder.glob("index-*.idx")))
    return [json.loads(r.payload) for r in framing.scan_frames(data).records if r.kind == KIND_INDEX]


class _BadShard:
    """Stands in for a Shard whose description is malformed (the writer stores whatever to_dict returns)."""

    def __init__(self, doc: Any) -> None:
        self.doc = doc

    def to_dict(self) -> Any:
        return self.doc


@pytest.mark.parametrize(
    "bad", [{"g": [5, 7], "o": "zz"}, "not an object", {"g": [5, 7], "o": [9, 0]}, {"g": [5, 7], "o": [0, 0], "k": "x"}]
)
def test_a_malformed_sh_warns_once_and_the_piece_stays_readable(
    tmp_path: Path, bad: Any, caplog: pytest.LogCaptureFixture
) -> None:
    full = {s: _full(s) for s in range(3)}
    pieces = {s: shard_0(full[s], 2) for s in full}
    for s in full:
        local, _ = pieces[s][1]  # type: ignore[misc]
        pieces[s][1] = (local, _BadShard(bad))  # type: ignore[assignment]
    with caplog.at_level(logging.WARNING):
        trial = ts.create_trial(write_run(tmp_path, {s: {"w": pieces[s]} for s in full}))
        t = trial.tensor("w")
        assert t.steps() == [0, 1, 2]  # the records stay readable
        for s in full:
            np.testing.assert_array_equal(t.value(s, worker="worker_1"), full[s][3:])
            assert t.shard(s, "worker_1") is None and t.shard(s, "worker_0") is not None and t.is_sharded(s)
            with pytest.raises(TensorUnavailableForStep, match="entries of worker_1 do not describe a piece"):
                t.value(s)
            assert close(t.reduction_value(s, "mean", worker="worker_1"), reduce(full[s][3:], "mean"))
        assert trial.tensor("loss").value(2, worker="worker_1") == 2.5
    warned = [r for r in caplog.records if "malformed shard description" in r.getMessage()]
    assert len(warned) == 1 and "worker_1" in warned[0].getMessage() and "of w at step 0" in warned[0].getMessage()
    assert sum("malformed shard" in p for p in trial.problems) == 1


def test_a_malformed_pt_is_dropped_and_reductions_come_from_the_raw_pieces(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    full = _full(0)
    pieces = shard_0(full, 2)
    folder = tmp_path / "tensors"
    write_run(tmp_path, {0: {"w": pieces}})
    # rewrite worker_0's index with a "pt" whose count is not the piece's size, and one not an object
    for worker, bad in (("worker_0", {"count": 99.0, "sum": 1.0}), ("worker_1", ["x"])):
        docs = _index_docs(folder / worker)
        for e in docs[0]["e"]:
            if e["n"] == "w":
                e["pt"] = bad
        idx = next((folder / worker).glob("index-*.idx"))
        idx.write_bytes(b"".join(framing.frame(KIND_INDEX, p) + p for p in (json.dumps(d).encode() for d in docs)))
    with caplog.at_level(logging.WARNING):
        trial = ts.create_trial(tmp_path)
    t = trial.tensor("w")
    assert close(t.reduction_value(0, "variance"), reduce(full, "variance"))
    np.testing.assert_array_equal(t.value(0), full)
    warned = [r.getMessage() for r in caplog.records if "malformed partials description" in r.getMessage()]
    assert len(warned) == 1 and "skipped 2 malformed partials descriptions (first: " in warned[0]  # one per worker
    assert "worker_0" in warned[0]


def test_an_unsharded_multi_worker_run_reads_as_before(tmp_path: Path) -> None:
    values = {r: RNG.standard_normal((3, 2)).astype(np.float32) for r in range(2)}
    for rank, value in values.items():
        writer = TensorFileWriter(tmp_path / "tensors" / f"worker_{rank}")
        for step in range(2):
            recs = {"w": TensorRecord("w", value + step, {("mean", False): float((value + step).mean())})}
            writer.write(StepRecord(ModeKeys.TRAIN, step, step, 1.0, f"worker_{rank}", recs))
        writer.close()
    mark_job_end(RunLayout(tmp_path))
    (entry,) = _index_docs(tmp_path / "tensors" / "worker_0")[0]["e"]
    assert set(entry) == {"n", "o", "l", "d", "s", "r"}  # no "sh"/"pt" keys in an unsharded entry
    t = ts.create_trial(tmp_path).tensor("w")
    assert not t.is_sharded(1) and t.shard(1) is None
    np.testing.assert_array_equal(t.value(1), values[0] + 1)  # the first worker's, as before
    np.testing.assert_array_equal(t.value(1, worker="worker_1"), values[1] + 1)
    assert t.shape(0) == (3, 2) and t.reduction_values(0) == {Reduction("mean"): pytest.approx(values[0].mean())}
    assert close(t.reduction_value(0, "max", worker="worker_1"), reduce(values[1], "max"))
    assert sorted(t.values()) == [0, 1]
    np.testing.assert_array_equal(t.values(worker="worker_1")[0], values[1])


def test_one_element_pieces_stored_inline_assemble(tmp_path: Path) -> None:
    full = {s: np.array([1.5, -2.0, 4.0], np.float32) * (s + 1) for s in range(2)}
    pieces = {s: shard_0(full[s], 4) for s in full}  # 1, 1, 1, 0 elements: the first three live in the index entry
    trial = ts.create_trial(write_run(tmp_path, {s: {"b": pieces[s]} for s in full}))
    _check_full_tensor(trial, "b", full, pieces)
    assert trial.tensor("b").value(1, worker="worker_0").shape == (1,)
