"""Every profiler rule on a triggering, a healthy and a too-little-data synthetic timeline."""

from __future__ import annotations

import numpy as np
import pytest
from profiler_synth import T0, data, gpus, steps, system

from trainspect.exceptions import ConfigError
from trainspect.rules.base import Rule
from trainspect.rules.profiler import (
    PROFILER_RULES,
    BatchSize,
    CPUBottleneck,
    Dataloader,
    GPUMemoryIncrease,
    IOBottleneck,
    LoadBalancing,
    LowGPUUtilization,
    MaxInitializationTime,
    OverallFrameworkMetrics,
    OverallSystemUsage,
    StepOutlier,
)
from trainspect.rules.registry import default_registry
from trainspect.rules.verdict import Status, Verdict

MIN15 = 15 * 60


def _check_trigger(v: Verdict) -> None:
    assert v.status is Status.ISSUES_FOUND, v.message
    assert v.triggers > 0 and v.first_trigger_time is not None and v.last_trigger_time is not None
    assert v.first_trigger_time <= v.last_trigger_time
    assert v.kind == "profiler" and v.recommendation
    assert v.series and all(s.x_unit == "s" for s in v.series)
    assert any(s.trigger_x for s in v.series)


def test_registry_and_contract() -> None:
    smdebug = {
        "BatchSize",
        "CPUBottleneck",
        "Dataloader",
        "GPUMemoryIncrease",
        "IOBottleneck",
        "LoadBalancing",
        "LowGPUUtilization",
        "MaxInitializationTime",
        "OverallFrameworkMetrics",
        "OverallSystemUsage",
        "StepOutlier",
    }
    assert {c.__name__ for c in PROFILER_RULES} == smdebug | {"WorkerStraggler", "InputBottleneck"}
    assert default_registry().classes("profiler") == list(PROFILER_RULES)  # every one registered, in order
    for cls in PROFILER_RULES:
        rule = cls()
        assert isinstance(rule, Rule) and rule.kind == "profiler"
        Verdict.from_dict(rule.evaluate(data()).to_dict())  # serialisable, even without data
        assert rule.evaluate(data()).status is Status.NO_DATA


def test_rulesconfig_defaults_and_validation() -> None:
    assert LoadBalancing().threshold == 0.5  # rulesconfig, not the code's 0.2
    assert IOBottleneck().gpu_threshold == 10.0
    assert GPUMemoryIncrease().window == 10 and GPUMemoryIncrease().increase == 5.0
    with pytest.raises(ConfigError):
        LowGPUUtilization(threshold_p95=120)
    with pytest.raises(ConfigError):
        StepOutlier(mode="sideways")
    assert CPUBottleneck(patience="5").patience == 5


@pytest.mark.parametrize(
    "rule",
    [LowGPUUtilization(), CPUBottleneck(), IOBottleneck(), BatchSize(), GPUMemoryIncrease(), LoadBalancing()],
)
def test_gpu_rules_on_cpu_only_run_are_no_data(rule: Rule) -> None:
    v = rule.evaluate(data([system(MIN15)]))
    assert v.status is Status.NO_DATA
    assert "GPU" in v.message


def test_low_gpu_utilization() -> None:
    low = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, 5.0))]))
    _check_trigger(low)
    assert "5.0%" in low.message and "70" in low.message
    flip = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(1, lambda t: 100.0 * (np.arange(len(t)) % 2)))]))
    _check_trigger(flip)
    assert flip.details["n0/gpu0"]["issue"] == "fluctuating"
    ok = LowGPUUtilization().evaluate(data([system(MIN15, **gpus(2, 90.0))]))
    assert ok.status is Status.NO_ISSUES_FOUND and ok.triggers == 0
    little = LowGPUUtilization().evaluate(data([system(60, **gpus(1, 5.0))]))
    assert little.status is Status.NO_DATA and "patience=1000" in little.message


def test_cpu_bottleneck() -> None:
    hot = {f"cpu{i}_utilization_percent": 95.0 for i in range(4)}
    v = CPUBottleneck().evaluate(data([system(MIN15, **hot, **gpus(1, 5.0))]))
    _check_trigger(v)
    assert v.details["bottleneck_percent"] == 100.0 and "50%" in v.message
    assert CPUBottleneck().evaluate(data([system(MIN15, **gpus(1, 5.0))])).status is Status.NO_ISSUES_FOUND
    assert CPUBottleneck().evaluate(data([system(MIN15, **hot, **gpus(1, 80.0))])).status is Status.NO_ISSUES_FOUND
    assert CPUBottleneck().evaluate(data([system(100, **hot, **gpus(1, 5.0))])).status is Status.NO_DATA


def test_io_bottleneck() -> None:
    v = IOBottleneck().evaluate(data([system(MIN15, cpu_iowait_percent=70.0, **gpus(1, 5.0))]))
    _check_trigger(v)
    assert IOBottleneck().evaluate(data([system(MIN15, **gpus(1, 5.0))])).status is Status.NO_ISSUES_FOUND
    assert IOBottleneck().evaluate(data([system(30, cpu_iowait_percent=70.0, **gpus(1, 5.0))])).status is Status.NO_DATA


def test_batch_size() -> None:
    v = BatchSize().evaluate(data([system(MIN15, **gpus(2, 20.0, 10.0))]))
    _check_trigger(v)
    assert set(v.details["n0"]) >= {"cpu", "gpu0", "gpu1_memory"}
    assert BatchSize().evaluate(data([system(MIN15, **gpus(2, 20.0, 90.0))])).status is Status.NO_ISSUES_FOUND
    assert BatchSize().evaluate(data([system(100, **gpus(2, 20.0, 10.0))])).status is Status.NO_DATA


def test_gpu_memory_increase() -> None:
    jump = GPUMemoryIncrease().evaluate(data([system(MIN15, **gpus(1, 90.0, lambda t: np.where(t > 700, 90.0, 10.0)))]))
    _check_trigger(jump)
    assert jump.triggers == 10  # each of the 10 samples after the jump moves the 10-sample mean by 8 points
    assert abs(jump.first_trigger_time - (T0 + 700.5)) < 1e-6
    flat = GPUMemoryIncrease().evaluate(data([system(MIN15, **gpus(1, 90.0, lambda t: 10 + t / 20))]))
    assert flat.status is Status.NO_ISSUES_FOUND  # slow growth is not a jump
    assert GPUMemoryIncrease().evaluate(data([system(100, **gpus(1, 90.0))])).status is Status.NO_DATA


def test_load_balancing_across_nodes() -> None:
    busy = system(MIN15, node="a", **gpus(1, 90.0))
    idle = system(MIN15, node="b", **gpus(1, 10.0))
    v = LoadBalancing().evaluate(data([busy, idle]))
    assert v.status is Status.ISSUES_FOUND
    assert v.details["across_nodes"]["a:gpu0 vs b:gpu0"] > 0.5
    # one GPU per node: only the nodes are compared, over the whole run, so it triggers at the run's end
    assert v.triggers == 1 and v.first_trigger_time == float(busy.timestamps[-1])
    twin = system(MIN15, node="b", **gpus(1, 90.0))
    assert LoadBalancing().evaluate(data([busy, twin])).status is Status.NO_ISSUES_FOUND


def test_load_balancing_pairwise() -> None:
    cols = {**gpus(2, 90.0), "gpu1_utilization_percent": 10.0}
    v = LoadBalancing().evaluate(data([system(MIN15, **cols)]))
    _check_trigger(v)
    assert v.details["n0"]["distances"]["gpu0"]["gpu1"] > 0.5
    same = LoadBalancing().evaluate(data([system(MIN15, **gpus(2, lambda t: 50 + 40 * np.sin(t)))]))
    assert same.status is Status.NO_ISSUES_FOUND
    one = LoadBalancing().evaluate(data([system(MIN15, **gpus(1, 90.0))]))
    assert one.status is Status.NO_ISSUES_FOUND and "one GPU" in one.message
    assert LoadBalancing().evaluate(data([system(60, **cols)])).status is Status.NO_DATA


def test_max_initialization_time() -> None:
    late = steps(np.full(50, 0.1), start=T0 + 25 * 60)
    v = MaxInitializationTime().evaluate(data([system(30 * 60)], [late]))
    _check_trigger(v)
    assert "25.00 min" in v.message and "20 min" in v.message
    none_yet = steps(np.zeros(0), start=T0)
    running = MaxInitializationTime().evaluate(data([system(30 * 60)], [none_yet], ended=False))
    _check_trigger(running)
    assert "no step yet" in running.message
    fast = MaxInitializationTime().evaluate(data([system(30 * 60)], [steps(np.full(50, 0.1), start=T0 + 60)]))
    assert fast.status is Status.NO_ISSUES_FOUND and fast.details["initialization_s"] == pytest.approx(60)
    assert MaxInitializationTime().evaluate(data([system(30 * 60)])).status is Status.NO_DATA


def test_step_outlier() -> None:
    d = np.full(300, 0.1)
    d[::20] = 1.0  # 15 steps of 10x the median
    v = StepOutlier().evaluate(data(framework=[steps(d)]))
    _check_trigger(v)
    assert v.details["worker_0/TRAIN"]["number_of_outliers"] == 15
    assert v.details["worker_0/TRAIN"]["step_numbers"][:2] == [0, 20]
    one = np.full(300, 0.1)
    one[150] = 1.0
    assert StepOutlier().evaluate(data(framework=[steps(one)])).status is Status.NO_ISSUES_FOUND
    assert StepOutlier(literal=True, n_outliers=0).evaluate(data(framework=[steps(one)])).status is Status.ISSUES_FOUND
    assert StepOutlier(n_outliers=0).evaluate(data(framework=[steps(one)])).status is Status.NO_ISSUES_FOUND  # 2.7%
    assert StepOutlier(min_lost_percent=1).evaluate(data(framework=[steps(one)])).status is Status.ISSUES_FOUND
    assert StepOutlier(mode="EVAL").evaluate(data(framework=[steps(d)])).status is Status.NO_DATA
    assert StepOutlier().evaluate(data(framework=[steps(d[:50])])).status is Status.NO_DATA


def _loader(workers: int, seconds: int = 60, wait: float = 0.05) -> object:
    tab = steps(np.full(seconds * 5, 0.1), gap=0.1)
    n = len(tab.steps["start"])
    tab.spans = {
        "kind": np.full(n, 4, np.uint8),
        "start": tab.steps["start"] - wait,
        "end": tab.steps["start"],
        "global_step": np.full(n, -1, np.int64),
        "workers": np.full(n, workers, np.int16),
        "pid": np.zeros(n, np.int64),
    }
    tab.dataloader_workers = workers
    return tab


def test_dataloader() -> None:
    sys8 = system(MIN15, cores=8)
    few = Dataloader().evaluate(data([sys8], [_loader(0)]))  # type: ignore[list-item]
    _check_trigger(few)
    assert few.details["n0"]["dataloaders"] == 1 and "8 cores" in few.message
    many = Dataloader().evaluate(data([sys8], [_loader(32)]))  # type: ignore[list-item]
    assert many.status is Status.ISSUES_FOUND
    ok = Dataloader().evaluate(data([sys8], [_loader(8)]))  # type: ignore[list-item]
    assert ok.status is Status.NO_ISSUES_FOUND
    assert Dataloader().evaluate(data([sys8], [_loader(0, seconds=5)])).status is Status.NO_DATA  # type: ignore[list-item]
    assert Dataloader().evaluate(data([sys8], [steps(np.full(10, 0.1))])).status is Status.NO_DATA


def test_too_few_loaders_matter_only_while_training_waits_for_input() -> None:
    sys8 = system(MIN15, cores=8)
    keeps_up = _loader(0, wait=0.005)  # 2.5 % of each 0.2 s step cycle waits for the next batch
    quiet = Dataloader().evaluate(data([sys8], [keeps_up]))  # type: ignore[list-item]
    assert quiet.status is Status.NO_ISSUES_FOUND, quiet.message
    assert "input wait 2.5% of the step cycle" in quiet.message
    literal = Dataloader(literal=True).evaluate(data([sys8], [keeps_up]))  # type: ignore[list-item]
    assert literal.status is Status.ISSUES_FOUND  # smdebug's rule: the count alone
    waits = Dataloader().evaluate(data([sys8], [_loader(0, wait=0.05)]))  # type: ignore[list-item]
    assert waits.status is Status.ISSUES_FOUND and waits.details["input_wait_percent"] == pytest.approx(25, abs=1)


def test_overall_rules_never_trigger() -> None:
    d = data([system(MIN15, **gpus(1, 5.0))], [steps(np.full(200, 0.1))])
    usage = OverallSystemUsage().evaluate(d)
    assert usage.status is Status.NO_ISSUES_FOUND and usage.triggers == 0
    assert usage.details["GPU"]["n0"]["p95"] == pytest.approx(5.0)
    assert usage.details["CPU"]["n0"]["p50"] == pytest.approx(20.0)
    assert "underutilised" in usage.message
    fw = OverallFrameworkMetrics().evaluate(d)
    assert fw.status is Status.NO_ISSUES_FOUND and fw.triggers == 0
    assert fw.details["phase"]["train"] == pytest.approx(100 * 0.1 / 0.11, rel=1e-2)
    assert OverallFrameworkMetrics().evaluate(data([system(60)])).status is Status.NO_DATA
