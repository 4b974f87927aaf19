"""WorkerStraggler on synthetic timelines: synchronous ranks (equal step times), and the step-time measure."""

from __future__ import annotations

import re

import numpy as np
import pytest
from profiler_synth import T0, data, steps

from trainspect.exceptions import ConfigError
from trainspect.profiler.arrays import FrameworkTables
from trainspect.profiler.ranks import RANK_COLUMNS, rank_times, step_cycles
from trainspect.rules.profiler import PROFILER_RULES, WorkerStraggler
from trainspect.rules.verdict import Status

ALLREDUCE = 0.002


def _sync_ranks(
    compute: list[float],
    loader: list[float] | None = None,
    between: list[float] | None = None,
    n: int = 40,
    forward_wait: bool = False,
    sync_spans: bool = True,
) -> list[FrameworkTables]:
    """Ranks of one synchronous job: every cycle lasts as long as the slowest rank's own work plus an all-reduce.

    Each rank's cycle: time between steps, its data-loader wait, then its step: forward and backward (80 % of its
    compute), the wait for the others at the end of ``backward()`` (a ``backward_sync`` span), the optimizer (20 %).
    ``forward_wait``: the ranks wait for each other at the start of the forward pass instead (a collective there).
    """
    k = len(compute)
    loader = loader or [0.0005] * k
    between = between or [0.0003] * k
    rng = np.random.default_rng(0)
    own = np.array([[c, lo, b] for c, lo, b in zip(compute, loader, between, strict=True)])
    noisy = own[None, :, :] * (1 + 0.03 * rng.standard_normal((n, k, 3)))
    ranks: list[dict[str, list[float]]] = [
        {"s": [], "e": [], "kind": [], "ss": [], "se": [], "g": []} for _ in range(k)
    ]
    t = T0 + 5
    for i in range(n):
        cycle = float(noisy[i].sum(axis=1).max()) + ALLREDUCE
        for r in range(k):
            c, lo, b = noisy[i, r]
            rec = ranks[r]
            begin = t + b + lo
            wait = cycle - (b + lo + c)  # this rank's wait for the slowest
            rec["s"].append(begin)
            rec["e"].append(t + cycle)
            spans = [(4, t + b, begin, -1)]
            if forward_wait:  # the wait is inside the forward pass: no backward_sync span shows it
                spans.append((5, begin + wait + 0.8 * c, begin + wait + 0.8 * c + ALLREDUCE / 2, i))
            else:
                spans.append((5, begin + 0.8 * c, begin + 0.8 * c + wait, i))
            for kind, s, e, g in spans if sync_spans else spans[:1]:
                for key, value in (("kind", kind), ("ss", s), ("se", e), ("g", g)):
                    rec[key].append(value)
        t += cycle
    return [_table(f"worker_{r}", rec) for r, rec in enumerate(ranks)]


def _table(worker: str, rec: dict[str, list[float]]) -> FrameworkTables:
    tab = steps(np.asarray(rec["e"]) - np.asarray(rec["s"]), worker=worker)
    tab.steps["start"], tab.steps["end"] = np.asarray(rec["s"]), np.asarray(rec["e"])
    m = len(rec["kind"])
    tab.spans = {
        "kind": np.asarray(rec["kind"], np.uint8),
        "start": np.asarray(rec["ss"]),
        "end": np.asarray(rec["se"]),
        "global_step": np.asarray(rec["g"], np.int64),
        "workers": np.zeros(m, np.int16),
        "pid": np.zeros(m, np.int64),
    }
    return tab


def test_synchronous_ranks_have_equal_step_times_but_the_slow_rank_computes_longer() -> None:
    ranks = _sync_ranks([0.030, 0.030, 0.042, 0.030])
    assert WorkerStraggler(measure="step").evaluate(data(framework=ranks)).status is Status.NO_ISSUES_FOUND
    verdict = WorkerStraggler().evaluate(data(framework=ranks))
    assert verdict.status is Status.ISSUES_FOUND
    assert verdict.workers == ("worker_2",)
    pattern = r"worker_2 computes (3[5-9]|4[0-5]) % longer per step than the median of the other ranks \((4[12]\.\d) ms vs (29\.\d|30\.\d) ms; threshold 20 %\)"
    assert re.fullmatch(pattern, verdict.message), verdict.message
    assert verdict.details["parts"] == {"worker_2": "compute"}
    assert verdict.details["sync_waits_recorded"] is True


def test_a_slow_data_loader_names_its_rank_not_the_ranks_that_wait_for_it() -> None:
    ranks = _sync_ranks([0.030, 0.030], loader=[0.002, 0.120])
    assert WorkerStraggler(measure="step").evaluate(data(framework=ranks)).workers == ("worker_0",)  # the old bug
    verdict = WorkerStraggler().evaluate(data(framework=ranks))
    assert verdict.workers == ("worker_1",)
    pattern = r"worker_1 waits 1[12]\d ms per step for its data loader, the other rank 2\.\d+ ms: every step waits 11\d ms for it, \d+ % of the others' own time per step \(threshold 20 %\)"
    assert re.fullmatch(pattern, verdict.message), verdict.message
    assert verdict.details["parts"] == {"worker_1": "loader"}


def test_a_wait_inside_the_forward_pass_is_explained_by_the_slow_loader() -> None:
    # DDP's buffer broadcast (BatchNorm) makes the fast ranks wait in their forward pass: counted as their compute
    ranks = _sync_ranks([0.030, 0.030, 0.030, 0.030], loader=[0.002, 0.002, 0.002, 0.100], forward_wait=True)
    by_rank = rank_times(data(framework=ranks)).set_index("worker")
    assert by_rank.at["worker_0", "compute_s"] > 0.12  # the wait for worker_3 inside the forward pass
    verdict = WorkerStraggler().evaluate(data(framework=ranks))
    assert verdict.workers == ("worker_3",)
    assert verdict.details["parts"] == {"worker_3": "loader"}


def test_work_between_steps_on_one_rank_is_named() -> None:
    ranks = _sync_ranks([0.030, 0.030, 0.030], between=[0.0003, 0.040, 0.0003])
    verdict = WorkerStraggler().evaluate(data(framework=ranks))
    assert verdict.workers == ("worker_1",)
    assert re.match(
        r"worker_1 spends (39|40)\.\d ms per step between steps outside the data loader, the median of "
        r"the other ranks 3\d\d µs",
        verdict.message,
    ), verdict.message


@pytest.mark.parametrize("k", [2, 4])
def test_balanced_synchronous_ranks_pass(k: int) -> None:
    verdict = WorkerStraggler().evaluate(data(framework=_sync_ranks([0.030, 0.031, 0.029, 0.032][:k])))
    assert verdict.status is Status.NO_ISSUES_FOUND, verdict.message
    assert verdict.datapoints == k
    assert "no straggler among" in verdict.message


def test_a_run_without_synchronisation_waits_is_judged_on_its_steps_and_says_so() -> None:
    ranks = _sync_ranks([0.030, 0.045], sync_spans=False)
    verdict = WorkerStraggler().evaluate(data(framework=ranks))
    assert verdict.status is Status.NO_ISSUES_FOUND  # equal step times: nothing can be told apart
    assert verdict.details["sync_waits_recorded"] is False
    assert "no synchronisation waits were recorded, so compute is the whole step" in verdict.message


def test_step_cycles_split_a_rank_s_cycle() -> None:
    fast, slow = _sync_ranks([0.030, 0.050], loader=[0.010, 0.010])
    cyc = step_cycles(fast)
    assert len(cyc) == 39  # the wait before the first step is left out
    assert np.allclose(np.median(cyc.compute_s), 0.030, rtol=0.05)
    assert np.allclose(np.median(cyc.loader_s), 0.010, rtol=0.05)
    assert np.allclose(np.median(cyc.sync_s), 0.022, rtol=0.15)
    assert np.allclose(cyc.busy_s + cyc.sync_s, cyc.cycle_s)
    assert np.allclose(np.median(step_cycles(slow).sync_s), ALLREDUCE, rtol=0.05)
    assert list(rank_times(data(framework=[fast, slow])).columns) == RANK_COLUMNS


def test_too_little_data_and_parameters() -> None:
    assert WorkerStraggler().evaluate(data(framework=_sync_ranks([0.03]))).status is Status.NO_DATA
    few = WorkerStraggler().evaluate(data(framework=_sync_ranks([0.03, 0.09], n=5)))
    assert few.status is Status.NO_DATA and "with at least 10 step cycles" in few.message
    assert WorkerStraggler().evaluate(data()).status is Status.NO_DATA
    assert WorkerStraggler(threshold="900").evaluate(data(framework=_sync_ranks([0.03, 0.09]))).status is (
        Status.NO_ISSUES_FOUND
    )
    with pytest.raises(ConfigError, match="measure"):
        WorkerStraggler(measure="steps")
    assert WorkerStraggler in PROFILER_RULES


# --- measure="step": the rule as it was (median step time against the median over all workers) --------------------
def _workers(*medians: float, n: int = 50) -> list[FrameworkTables]:
    rng = np.random.default_rng(0)
    return [steps(m * (1 + 0.02 * rng.standard_normal(n)), worker=f"worker_{i}") for i, m in enumerate(medians)]


def test_step_measure_flags_and_names_a_slow_worker() -> None:
    verdict = WorkerStraggler(measure="step").evaluate(data(framework=_workers(0.10, 0.10, 0.10, 0.16)))
    assert verdict.status is Status.ISSUES_FOUND
    assert verdict.workers == ("worker_3",)
    assert "worker_3" in verdict.message and "threshold 20 %" in verdict.message
    assert verdict.details["stragglers"] == ["worker_3"]


def test_step_measure_balanced_workers_and_too_little_data() -> None:
    rule = WorkerStraggler(measure="step")
    assert rule.evaluate(data(framework=_workers(0.10, 0.105, 0.098, 0.11))).status is Status.NO_ISSUES_FOUND
    assert WorkerStraggler(measure="step", threshold="70").evaluate(data(framework=_workers(0.1, 0.16))).status is (
        Status.NO_ISSUES_FOUND
    )
    assert rule.evaluate(data(framework=_workers(0.1))).status is Status.NO_DATA
    assert rule.evaluate(data(framework=_workers(0.1, 0.3, n=5))).status is Status.NO_DATA


def test_independent_workers_without_spans_are_judged_on_their_steps() -> None:
    # workers that do not synchronise (no spans at all): compute is the step, and a slow one is named
    verdict = WorkerStraggler().evaluate(data(framework=_workers(0.10, 0.10, 0.10, 0.16)))
    assert verdict.workers == ("worker_3",)
    assert "compute is the whole step" in verdict.message
