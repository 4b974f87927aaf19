"""``RunSummary`` figures are exact: per-unit rates, cost, percentiles, noise, the verdict's counts, MLflow round trip.

The runs are built in memory (profiler tables, verdicts), so every figure is worked out by hand here.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from _support.fakes import LossTrial
from _support.jobs import record_two_rank_job

from trainspect.profiler.arrays import FrameworkTables, SystemArrays
from trainspect.profiler.data import ProfilerData
from trainspect.report.context import ReportContext
from trainspect.report.summary import RunSummary, cost_of, relative_se, step_cycles, summarize
from trainspect.rules.verdict import Status, Verdict

T0 = 1_700_000_000.0


def _steps(durations: np.ndarray, worker: str, start: float, gap: float, mode: int = 1) -> FrameworkTables:
    starts = start + np.concatenate([[0.0], np.cumsum(durations[:-1] + gap)])
    tab = FrameworkTables(worker, "n0", process_start=T0, recorder_start=T0)
    n = len(durations)
    tab.steps = {
        "mode": np.full(n, mode, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": starts,
        "end": starts + durations,
    }
    return tab


def _system(columns: dict[str, np.ndarray]) -> SystemArrays:
    n = len(next(iter(columns.values())))
    values = np.stack([np.broadcast_to(v, n) for v in columns.values()], axis=1).astype(np.float32)
    return SystemArrays("n0", T0 + 0.5 * np.arange(n), tuple(columns), values, 500)


def test_per_unit_figures_come_from_the_loop() -> None:
    s = RunSummary("a", duration_s=500.0, loop_s=400.0, steps=2000, price_per_hour=3.6, batch_size=32, workers=2)
    s.steps_per_epoch = 100
    assert s.steps_per_s == 5.0 and s.samples_per_s == 320.0  # 5 steps/s x 32 x 2 workers
    assert s.time_per_1k_steps_s == 200.0 and s.cost_per_1k_steps == pytest.approx(0.2)
    assert s.time_per_epoch_s == 20.0 and s.cost_per_epoch == pytest.approx(0.02)
    assert s.cost == pytest.approx(0.5)  # the whole job: 500 s at 3.6/h
    assert cost_of(3.6, 3, 1000.0) == pytest.approx(3.0) and cost_of(None, 1, 1.0) is None
    assert cost_of(1.0, 1, None) is None


def test_without_a_loop_the_job_duration_is_the_time_and_missing_factors_give_none() -> None:
    s = RunSummary("a", duration_s=100.0, steps=50)
    assert s.steps_per_s == 0.5 and s.samples_per_s is None and s.time_per_epoch_s is None
    assert s.cost is None and s.cost_per_1k_steps is None and s.cost_per_epoch is None
    assert RunSummary("b", duration_s=100.0).steps_per_s is None  # no steps: no rate
    assert RunSummary("c", steps=5).steps_per_s is None and RunSummary("c", steps=5).time_per_1k_steps_s is None
    assert RunSummary("d", loop_s=10.0, steps=5, batch_size=4).samples_per_s == 2.0  # no worker known: one


def test_the_verdict_counts_the_rules_with_issues() -> None:
    assert RunSummary("a").verdict() == "healthy (no rule found issues)" and RunSummary("a").healthy
    one = RunSummary("a", issues=("ExplodingTensor",))
    assert one.verdict() == "1 rule found issues (ExplodingTensor)" and not one.healthy and not one.broken
    two = RunSummary("a", issues=("A", "B"), stops=("stopped by StopTraining at step 3 (rule A)",))
    assert two.verdict() == "stopped by StopTraining at step 3 (rule A); 2 rules found issues" and two.broken
    bad = RunSummary("a", diverged="loss NaN from step 52")
    assert bad.verdict() == "diverged (loss NaN from step 52)" and bad.broken


def test_triggered_rules_and_final_loss() -> None:
    s = RunSummary("a", triggers={"B": 2, "A": 1, "C": 0}, train_loss={0: 2.0, 7: 0.5, 3: 1.0})
    assert s.rules_triggered == ["A", "B"] and s.final_loss == (7, 0.5)
    assert RunSummary("a").final_loss is None


def test_metrics_round_trip() -> None:
    s = RunSummary("a", duration_s=10.0, loop_s=8.0, steps=40, workers=2, batch_size=16, triggers={"X": 3, "Y": 0})
    metrics = s.to_metrics()
    assert metrics["trainspect/steps_per_s"] == 5.0 and metrics["trainspect/samples_per_s"] == 160.0
    assert metrics["trainspect/job_s"] == 10.0 and "trainspect/duration_s" not in metrics
    assert metrics["trainspect/triggers/X"] == 3.0 and metrics["trainspect/rules_triggered"] == 1.0
    assert "trainspect/cost" not in metrics  # unknown figures are not logged
    back = RunSummary.from_metrics("a", {**metrics, "trainspect/first_nonfinite_step/loss": 12.0, "other": 1.0})
    assert (back.duration_s, back.loop_s, back.steps, back.workers, back.batch_size) == (10.0, 8.0, 40, 2, 16)
    assert isinstance(back.steps, int) and back.triggers == {"X": 3, "Y": 0} and back.issues == ("X",)
    assert back.diverged == "a logged value NaN/Inf from step 12"
    # a rank that diverged alone logs its own first non-finite step (the MLflow plugin prefixes the worker)
    ranks = RunSummary.from_metrics("r", {**metrics, "worker_1/trainspect/first_nonfinite_step": 9.0})
    assert ranks.diverged == "a logged value NaN/Inf from step 9"
    both = {"trainspect/first_nonfinite_step": 15.0, "worker_2/trainspect/first_nonfinite_step": 11.0}
    assert RunSummary.from_metrics("r", both).diverged == "a logged value NaN/Inf from step 11"  # the earliest
    assert RunSummary.from_metrics("r", {"worker_1/trainspect/steps": 4.0}).diverged == ""
    old = RunSummary.from_metrics("o", {"trainspect/duration_s": 7.0})
    assert old.duration_s == 7.0 and old.diverged == ""


def test_step_cycles_and_batch_means_noise() -> None:
    assert step_cycles(np.array([0.0, 1.0, 3.0]), np.array([0.5, 2.0, 3.5])).tolist() == [1.0, 2.0, 0.5]
    assert step_cycles(np.zeros(0), np.zeros(0)).tolist() == []
    assert relative_se(np.array([1.0])) is None and relative_se(np.zeros(4)) is None
    # 40 cycles: 20 blocks of 2; block means alternate 1 and 3 -> std 1.026, mean 2
    cycles = np.repeat(np.tile([1.0, 3.0], 10), 2)
    block_means = np.tile([1.0, 3.0], 10)
    expected = block_means.std(ddof=1) / math.sqrt(20) / 2.0
    assert relative_se(cycles) == pytest.approx(expected)
    # 2 cycles: 2 blocks of one
    assert relative_se(np.array([1.0, 3.0])) == pytest.approx(math.sqrt(2) / math.sqrt(2) / 2.0)


def _ctx(tmp_path: Path, **kw: object) -> ReportContext:
    return ReportContext(run_dir=tmp_path, **kw)  # type: ignore[arg-type]


def test_summarize_a_profiled_run(tmp_path: Path) -> None:
    durations = np.arange(1, 101) * 0.01  # 0.01..1.00 s, and the eval worker's 5.0 and 5.0: 102 steps
    tab = _steps(durations, "worker_0", start=T0 + 10, gap=0.0)
    tab.spans["kind"] = np.array([4, 4], np.uint8)
    tab.spans["start"] = np.array([T0 + 10.0, T0 + 11.0])
    tab.spans["end"] = tab.spans["start"] + np.array([0.5, 0.5])
    for key in ("global_step", "workers", "pid"):
        tab.spans[key] = np.full(2, -1, np.int64)
    eval_tab = _steps(np.array([5.0, 5.0]), "worker_1", start=T0 + 10, gap=0.01, mode=2)  # no TRAIN: all its steps
    ramp = np.arange(101.0)
    arrays = _system(
        {
            "cpu0_utilization_percent": ramp,
            "cpu_memory_used_percent": ramp / 2,
            "cpu_iowait_percent": np.ones(101),
            "gpu0_utilization_percent": np.full(101, 10.0),
        }
    )
    verdicts = [Verdict("A", Status.ISSUES_FOUND, triggers=3), Verdict("B", Status.NO_ISSUES_FOUND)]
    s = summarize(
        _ctx(
            tmp_path,
            profiler=ProfilerData(tmp_path, system={"n0": arrays}, framework={"worker_0": tab, "worker_1": eval_tab}),
            verdicts=verdicts,
            price_per_hour=3.6,
        )
    )
    assert s.name == tmp_path.name and s.instances == 1 and s.workers == 2 and s.steps == 100
    assert s.startup_s == 10.0 and s.loop_s == pytest.approx(50.5)  # 0.01 + ... + 1.00 s back to back
    assert [s.step_p50_s, s.step_p95_s, s.step_p99_s] == pytest.approx([0.515, 0.9695, 4.96], rel=1e-6)
    assert [s.cycle_p50_s, s.cycle_p95_s] == pytest.approx([0.515, 0.9695], rel=1e-6)  # eval: 5.01 and 5.0
    assert s.dataloader_wait_percent == pytest.approx(100.0 * 1.0 / (50.5 + 10.01), rel=1e-6)
    assert (s.cpu_p95, s.cpu_mean, s.gpu_p95, s.gpu_mean) == pytest.approx((95.0, 50.0, 10.0, 10.0))
    assert s.memory_p95 == pytest.approx(47.5) and s.io_wait_p95 == pytest.approx(1.0)
    assert s.issues == ("A",) and s.triggers == {"A": 3, "B": 0} and s.rules_line.startswith("2 rules: 2 judged")
    assert s.cycle_rel_se is not None and s.cycle_rel_se > 0


def test_a_loop_that_recorded_no_loader_waits_has_no_wait_share(tmp_path: Path) -> None:
    """No data-loader span at all (a loop without a DataLoader): the share is unknown (None, shown as a dash), not
    0 %; one instant step (a loop of 0 s) with a wait gives no share either, instead of a division by zero."""
    tab = _steps(np.full(10, 0.1), "worker_0", start=T0 + 1, gap=0.0)
    s = summarize(_ctx(tmp_path, profiler=ProfilerData(tmp_path, system={}, framework={"worker_0": tab})))
    assert s.steps == 10 and s.loop_s == pytest.approx(1.0) and s.dataloader_wait_percent is None
    instant = _steps(np.zeros(1), "worker_0", start=T0 + 1, gap=0.0)
    instant.spans["kind"] = np.array([4], np.uint8)
    instant.spans["start"], instant.spans["end"] = np.array([T0]), np.array([T0 + 0.5])
    for key in ("global_step", "workers", "pid"):
        instant.spans[key] = np.full(1, -1, np.int64)
    s = summarize(_ctx(tmp_path, profiler=ProfilerData(tmp_path, system={}, framework={"worker_0": instant})))
    assert s.loop_s == 0.0 and s.dataloader_wait_percent is None


def test_summarize_without_profiler_data_reads_the_manifest(tmp_path: Path) -> None:
    s = summarize(
        _ctx(tmp_path, profiler=ProfilerData(tmp_path), manifest={"created": 100.0, "end_time": 160.5}), name="x"
    )
    assert s.name == "x" and s.duration_s == 60.5 and s.steps == 0 and s.instances == 1
    assert s.cpu_p95 is None and s.rules_line == "" and s.step_p50_s is None


def _trial(name: str = "loss") -> LossTrial:
    """A loss: TRAIN steps 0-3 (NaN at 3), EVAL runs at global steps 10-11 and 20-22."""
    train = {0: 2.0, 1: 1.5, 2: 1.0, 3: float("nan")}
    evals = {0: 9.0, 1: 7.0, 2: 1.0, 3: 2.0, 4: 6.0}
    return LossTrial(train, evals, {0: 10, 1: 11, 2: 20, 3: 21, 4: 22}, name)


def test_the_loss_the_summary_reads(tmp_path: Path) -> None:
    s = summarize(_ctx(tmp_path, profiler=ProfilerData(tmp_path), trial=_trial()))
    assert s.loss_name == "loss" and s.train_loss == {
        0: 2.0,
        1: 1.5,
        2: 1.0,
        3: pytest.approx(float("nan"), nan_ok=True),
    }
    assert s.eval_loss == 3.0  # the last evaluation (global steps 20-22): mean of 1, 2 and 6
    assert s.diverged == "loss NaN from step 103" and s.broken and s.final_loss[0] == 3
    assert s.steps == 4 and s.workers == 1  # no profiler data: the last saved TRAIN step + 1, the trial's workers
    named = summarize(_ctx(tmp_path, profiler=ProfilerData(tmp_path), trial=_trial("mse")))
    assert named.loss_name == "mse" and named.eval_loss == 3.0


def test_a_job_whose_rank_0_alone_records_tensors_counts_every_rank_and_node(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainspect as ts

    record_two_rank_job(tmp_path / "run", monkeypatch)
    assert ts.create_trial(tmp_path / "run").workers() == ["worker_0"]  # rank 0 alone wrote tensors
    s = summarize(ReportContext.load(tmp_path / "run"))
    assert s.workers == 2 and s.instances == 1  # the job's ranks, from their manifests: not 1 (its throughput x2)


def test_an_unreadable_loss_is_named_among_the_reports_problems(tmp_path: Path) -> None:
    """A loss tensor that cannot be read loses the loss rows only, and the report says why."""

    class _Broken(LossTrial):
        def tensor(self, name: str) -> object:
            raise OSError("damaged index file")

    ctx = _ctx(tmp_path, profiler=ProfilerData(tmp_path), trial=_Broken({0: 1.0}))
    s = summarize(ctx)
    assert s.loss_name == "" and s.train_loss == {}
    assert ctx.problems == ["Could not read the training loss: OSError: damaged index file"]
