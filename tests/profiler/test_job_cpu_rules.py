"""Profiler rules judge the training job's own CPU where it was recorded, not the whole host's (issue 13, point 4)."""

from __future__ import annotations

from profiler_synth import data, gpus, system

from trainspect.rules.profiler import BatchSize, CPUBottleneck, OverallSystemUsage
from trainspect.rules.verdict import Status

MIN15 = 15 * 60
HOT = {f"cpu{i}_utilization_percent": 95.0 for i in range(4)}


def test_cpu_bottleneck_blames_the_job_only_for_its_own_cpu() -> None:
    # another job saturates the cores while ours uses a tenth of one core: not our CPU bottleneck
    other = system(MIN15, **HOT, **gpus(1, 5.0), process_cpu_utilization_percent=2.5)
    assert CPUBottleneck().evaluate(data([other])).status is Status.NO_ISSUES_FOUND
    # our job keeps a whole core (25% of 4 cores) busy while the GPU idles: it is
    ours = system(MIN15, **HOT, **gpus(1, 5.0), process_cpu_utilization_percent=25.0)
    assert CPUBottleneck().evaluate(data([ours])).status is Status.ISSUES_FOUND
    # runs recorded without the job's figure keep smdebug's host-wide judgement
    assert CPUBottleneck().evaluate(data([system(MIN15, **HOT, **gpus(1, 5.0))])).status is Status.ISSUES_FOUND


def test_batch_size_and_system_usage_use_the_jobs_cpu() -> None:
    # GPU and its memory low; the host busy with someone else's work, the job's own CPU low: the batch is too small
    busy_host = system(MIN15, **HOT, **gpus(1, 5.0, mem=5.0), process_cpu_utilization_percent=10.0)
    assert BatchSize().evaluate(data([busy_host])).status is Status.ISSUES_FOUND
    assert BatchSize().evaluate(data([system(MIN15, **HOT, **gpus(1, 5.0, mem=5.0))])).status is Status.NO_ISSUES_FOUND
    v = OverallSystemUsage().evaluate(data([busy_host]))
    assert v.details["CPU"]["n0"]["p95"] == 10.0 and v.details["Host CPU"]["n0"]["p95"] == 95.0
    assert "CPU p95 10.0%" in v.message and "the whole host: p95 95.0%" in v.message
