"""WorkerStraggler on synthetic timelines and on a real two-rank run."""

from __future__ import annotations

import numpy as np
from profiler_synth import data, steps

from trainspect.rules.profiler import PROFILER_RULES, WorkerStraggler
from trainspect.rules.verdict import Status


def _workers(*medians: float, n: int = 50) -> list:
    rng = np.random.default_rng(0)
    return [steps(m * (1 + 0.02 * rng.standard_normal(n)), worker=f"worker_{i}") for i, m in enumerate(medians)]


def test_a_slow_worker_is_flagged_and_named() -> None:
    verdict = WorkerStraggler().evaluate(data(framework=_workers(0.10, 0.10, 0.10, 0.16)))
    assert verdict.status is Status.ISSUES_FOUND
    assert verdict.workers == ("worker_3",)
    assert "worker_3" in verdict.message and "threshold 20 %" in verdict.message
    assert verdict.details["stragglers"] == ["worker_3"]


def test_balanced_workers_pass() -> None:
    verdict = WorkerStraggler().evaluate(data(framework=_workers(0.10, 0.105, 0.098, 0.11)))
    assert verdict.status is Status.NO_ISSUES_FOUND
    assert verdict.datapoints == 4


def test_threshold_parameter_and_too_little_data() -> None:
    assert (
        WorkerStraggler(threshold="70").evaluate(data(framework=_workers(0.1, 0.16))).status is Status.NO_ISSUES_FOUND
    )
    assert WorkerStraggler().evaluate(data(framework=_workers(0.1))).status is Status.NO_DATA
    assert WorkerStraggler().evaluate(data(framework=_workers(0.1, 0.3, n=5))).status is Status.NO_DATA
    assert WorkerStraggler in PROFILER_RULES
