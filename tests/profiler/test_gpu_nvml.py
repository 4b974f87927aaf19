"""The GPU sampler against a fake NVML: CUDA's device numbering, UUIDs, MIG, errors, shutdown, job memory."""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from fake_nvml import (
    GIB,
    LIBRARY_NOT_FOUND,
    UNKNOWN,
    FakeGpu,
    FakeMig,
    FakeNvml,
    FakeNVMLError,
    a100,
    t4,
)

from trainspect.hooks.samplers.gpu import FAILURE_LIMIT, GPUSampler, GPUUnavailable
from trainspect.hooks.system_monitor import SystemMonitor
from trainspect.profiler import ProfilerConfig, SystemMetricsReader, load_profiler_data
from trainspect.rules.profiler import LowGPUUtilization
from trainspect.rules.verdict import Status


@pytest.fixture(autouse=True)
def _no_cuda_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def _mixed() -> FakeNvml:
    """NVML (PCI) order: a T4 at bus 01, an A100 at bus 02, a T4 at bus 03."""
    return FakeNvml(
        [
            t4("0000:01:00.0", "GPU-1111-t4", util=11.0),
            a100("0000:02:00.0", "GPU-2222-a100", util=22.0),
            t4("0000:03:00.0", "GPU-3333-t4", util=33.0),
        ]
    )


def _sample(fake: FakeNvml, **kw: object) -> dict[str, float]:
    sampler = GPUSampler(nvml=fake, **kw)  # type: ignore[arg-type]
    sampler.collect()
    sampler.close()
    return sampler.aggregate()


def _utils(got: dict[str, float]) -> list[float]:
    return [got[f"gpu{j}_utilization_percent"] for j in range(len(got)) if f"gpu{j}_utilization_percent" in got]


def test_fastest_first_is_cuda_default_and_pci_order_on_request(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _utils(_sample(_mixed())) == [22.0, 11.0, 33.0]  # the A100 is cuda:0; T4s keep PCI order
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert _utils(_sample(_mixed())) == [22.0]  # index 0 is CUDA's 0, not NVML's 0
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    assert _utils(_sample(_mixed())) == [11.0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,1")
    assert _utils(_sample(_mixed())) == [33.0, 22.0]


def test_fastest_first_falls_back_to_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _mixed()
    fake.gpus[0].cores = None  # this driver does not give core counts
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")
    assert _utils(_sample(fake)) == [11.0, 22.0]  # capability 8.0 first, then the T4s in PCI order


def test_gpu_uuid_prefixes_and_parse_stops_like_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-3333,gpu-1111-t4")
    assert _utils(_sample(_mixed())) == [33.0, 11.0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-2222,GPU-,0")  # ambiguous prefix: the rest is ignored
    assert _utils(_sample(_mixed())) == [22.0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,7,0")  # no device 7: the rest is ignored
    assert _utils(_sample(_mixed())) == [11.0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,2")
    assert _utils(_sample(_mixed())) == [33.0]
    fake = _mixed()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-9")
    with pytest.raises(GPUUnavailable, match="no GPU is visible"):
        GPUSampler(nvml=fake)
    assert fake.shutdowns == 1  # NVML was started, so it is shut down


def _mig_host() -> FakeNvml:
    migs = [FakeMig("MIG-aaaa-0001", 1, 0, used=1 * GIB), FakeMig("MIG-bbbb-0002", 2, 0, used=3 * GIB)]
    return FakeNvml([a100("0000:01:00.0", "GPU-5555", migs=migs), a100("0000:02:00.0", "GPU-6666", util=66.0)])


def test_mig_instances_are_sampled_for_memory_with_one_warning(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-bbbb,GPU-6666")
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        got = _sample(_mig_host())
    assert got["gpu0_memory_used_bytes"] == 3 * GIB and got["gpu0_memory_used_percent"] == 30.0
    assert "gpu0_utilization_percent" not in got and "gpu0_power_watts" not in got
    assert got["gpu1_utilization_percent"] == 66.0
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1 and "gpu0 (MIG instance MIG-bbbb-0002 of GPU-5555" in warnings[0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "MIG-GPU-5555/1/0")  # the pre-R470 naming
    assert _sample(_mig_host())["gpu0_memory_used_bytes"] == 1 * GIB
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # a GPU in MIG mode: CUDA sees its first instance
    assert _sample(_mig_host())["gpu0_memory_used_bytes"] == 1 * GIB


def test_transient_errors_are_retried_then_dropped_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([a100("0000:01:00.0", "GPU-1"), a100("0000:02:00.0", "GPU-2")])
    flaky = iter([FakeNVMLError(UNKNOWN), None, FakeNVMLError(UNKNOWN)] + [None] * 100)
    fake.fail[("nvmlDeviceGetTemperature", ("gpu", 0))] = lambda: next(flaky)
    fake.fail[("nvmlDeviceGetPowerUsage", ("gpu", 1))] = lambda: FakeNVMLError(UNKNOWN)
    sampler = GPUSampler(nvml=fake)
    seen = []
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        for _ in range(FAILURE_LIMIT + 3):
            sampler.collect()
            seen.append(sampler.aggregate())
    sampler.close()
    assert [("gpu0_temperature_celsius" in s) for s in seen[:4]] == [False, True, False, True]
    assert "gpu0_temperature_celsius" in seen[-1]  # one-off failures never drop a metric
    assert not any("gpu1_power_watts" in s for s in seen) and "gpu1_utilization_percent" in seen[-1]
    power_calls = [c for c in fake.calls if c == ("nvmlDeviceGetPowerUsage", ("gpu", 1))]
    assert len(power_calls) == FAILURE_LIMIT  # retried, then no longer asked
    assert len(caplog.records) == 1
    assert "power of gpu1 (GPU-2, PCI 0000:02:00.0) failed 5 times in a row" in caplog.records[0].getMessage()


def test_gpu_lost_mid_run_stops_that_device_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([a100("0000:01:00.0", "GPU-1"), a100("0000:02:00.0", "GPU-2")])
    sampler = GPUSampler(nvml=fake)
    sampler.collect()
    assert "gpu1_memory_used_bytes" in sampler.aggregate()
    fake.lost.add(1)
    before = len(fake.calls)
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        for _ in range(4):
            sampler.collect()
    got = sampler.aggregate()
    sampler.close()
    assert "gpu0_utilization_percent" in got and not any(k.startswith("gpu1") for k in got)
    assert len(caplog.records) == 1 and "gpu1 (GPU-2, PCI 0000:02:00.0) stopped answering" in caplog.messages[0]
    assert sum(h == ("gpu", 1) for _n, h in fake.calls[before:]) == 1  # asked once, then never again


def test_nvml_shutdown_waits_for_the_sampling_thread() -> None:
    fake = FakeNvml([a100("0000:01:00.0", "GPU-1"), a100("0000:02:00.0", "GPU-2")])
    sampler = GPUSampler(nvml=fake)
    fake.delay_s = 0.002
    stop = threading.Event()

    def loop() -> None:
        while not stop.is_set():
            sampler.collect()

    thread = threading.Thread(target=loop)
    thread.start()
    threading.Event().wait(0.05)
    sampler.close()  # while the thread samples
    threading.Event().wait(0.05)
    stop.set()
    thread.join()
    sampler.close()
    assert fake.shutdowns == 1
    assert fake.after_shutdown == []  # no call reached NVML after, or during, the shutdown


def test_setup_failure_after_init_shuts_nvml_down() -> None:
    fake = _mixed()
    fake.fail[("nvmlDeviceGetUUID", ("gpu", 1))] = lambda: FakeNVMLError(UNKNOWN)
    with pytest.raises(GPUUnavailable, match="cannot list the GPUs") as info:
        GPUSampler(nvml=fake)
    assert fake.shutdowns == 1 and not info.value.expected


def test_driver_without_nvml_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml([], init_error=FakeNVMLError(LIBRARY_NOT_FOUND))
    with pytest.raises(GPUUnavailable, match="NVML is not usable") as info:
        GPUSampler(nvml=fake)
    assert fake.shutdowns == 0  # nvmlInit failed: nothing to shut down
    assert info.value.expected is (not os.path.exists("/dev/nvidiactl"))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # CUDA libraries and a GPU asked for, no driver: a warning
    with pytest.raises(GPUUnavailable) as info:
        GPUSampler(nvml=fake)
    assert not info.value.expected


def test_utilisation_is_the_mean_of_the_interval_samples() -> None:
    gpu = a100("0000:01:00.0", "GPU-1", util=99.0, samples=[(1_000, 10), (2_000, 20)])
    fake = FakeNvml([gpu])
    sampler = GPUSampler(nvml=fake)
    sampler.collect()
    assert sampler.aggregate()["gpu0_utilization_percent"] == 15.0
    gpu.samples += [(3_000, 30), (4_000, 50), (5_000, 70)]
    sampler.collect()
    assert sampler.aggregate()["gpu0_utilization_percent"] == 50.0  # only the samples since the last reading
    sampler.collect()  # no new sample yet: the current rate
    assert sampler.aggregate()["gpu0_utilization_percent"] == 99.0
    sampler.close()


def test_job_process_memory_beside_the_device_total() -> None:
    me, child, neighbour = os.getpid(), os.getpid() + 100_000, 1
    gpu = FakeGpu("GPU-1", "0000:01:00.0", used=10 * GIB, total=40 * GIB)
    gpu.procs = [(me, 2 * GIB), (child, 1 * GIB), (neighbour, 7 * GIB)]
    got = _sample(FakeNvml([gpu]), job_pids=lambda: [me, child])
    assert got["gpu0_memory_used_bytes"] == 10 * GIB and got["gpu0_memory_used_percent"] == 25.0
    assert got["gpu0_process_memory_used_bytes"] == 3 * GIB and got["gpu0_process_memory_used_percent"] == 7.5
    gpu.procs = [(neighbour, 7 * GIB)]  # none of the job's (or another PID namespace): unknown, not 0
    assert "gpu0_process_memory_used_bytes" not in _sample(FakeNvml([gpu]), job_pids=lambda: [me])
    gpu.procs = []
    assert _sample(FakeNvml([gpu]), job_pids=lambda: [me])["gpu0_process_memory_used_bytes"] == 0.0
    assert "gpu0_process_memory_used_bytes" not in _sample(FakeNvml([gpu]))  # no job pids given


def test_monitor_keeps_training_when_the_gpu_is_lost(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml([a100("0000:01:00.0", "GPU-1", procs=[(os.getpid(), GIB)])])
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    config = ProfilerConfig(system_monitor_interval_millis=100)
    model = torch.nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with caplog.at_level(logging.WARNING, logger="trainspect"), SystemMonitor(tmp_path, node="n0", config=config):
        for step in range(40):
            if step == 20:
                fake.lost.add(0)
            loss = model(torch.randn(16, 8)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            time.sleep(0.01)
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "gpu0 (GPU-1, PCI 0000:01:00.0) stopped answering" in caplog.messages[0]
    arrays = SystemMetricsReader(tmp_path).read_arrays()["n0"]
    util = arrays.column("gpu0_utilization_percent")
    assert util is not None and np.isfinite(util).any() and np.isnan(util[-1])
    job = arrays.column("gpu0_process_memory_used_bytes")
    assert job is not None and np.nanmax(job) == GIB
    verdict = LowGPUUtilization().evaluate(load_profiler_data(tmp_path))
    assert verdict.status is Status.NO_DATA


def test_monitor_warns_once_when_a_gpu_was_asked_for_but_nvml_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    fake = FakeNvml([], init_error=FakeNVMLError(LIBRARY_NOT_FOUND))  # CUDA libraries, no driver's NVML
    monkeypatch.setitem(sys.modules, "pynvml", fake.module())
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    with caplog.at_level(logging.INFO, logger="trainspect"):
        with SystemMonitor(tmp_path, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100)):
            time.sleep(0.3)
    gpu_lines = [r for r in caplog.records if "GPU metrics are not recorded" in r.getMessage()]
    assert [r.levelno for r in gpu_lines] == [logging.WARNING] and "NVML is not usable" in gpu_lines[0].getMessage()
    assert SystemMetricsReader(tmp_path).read_arrays()["n0"].gpus == []


def test_a_hung_nvml_call_does_not_hang_close(caplog: pytest.LogCaptureFixture) -> None:
    fake = FakeNvml([a100("0000:01:00.0", "GPU-1")])
    sampler = GPUSampler(nvml=fake)
    release = threading.Event()
    fake.fail[("nvmlDeviceGetMemoryInfo", None)] = lambda: release.wait() and None  # blocks until released
    thread = threading.Thread(target=sampler.collect)
    thread.start()
    while not any(name == "nvmlDeviceGetMemoryInfo" for name, _h in fake.calls):
        threading.Event().wait(0.01)
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        sampler._nv.close(wait_s=0.2)
    release.set()
    thread.join()
    assert fake.shutdowns == 0 and "did not return" in caplog.messages[0]
    assert fake.after_shutdown == [] and fake.calls[-1][0] == "nvmlDeviceGetMemoryInfo"  # nothing called after
