"""The system monitor: real sampling checked against psutil, the node claim, fake NVML, failures."""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import psutil
import pytest

from trainspect.hooks.samplers import CPUSampler, DiskSampler, GPUSampler, MemorySampler, NetworkSampler
from trainspect.hooks.samplers.base import Sampler
from trainspect.hooks.samplers.gpu import GPUUnavailable, visible_gpu_indices
from trainspect.hooks.system_monitor import NodeClaim, SystemMonitor
from trainspect.profiler import ProfilerConfig, SystemMetricsReader


def _burn(seconds: float) -> None:
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1


def test_cpu_sampler_matches_psutil_over_same_interval() -> None:
    sampler = CPUSampler()
    psutil.cpu_percent(percpu=True)
    sampler.collect()
    _burn(0.6)
    sampler.collect()
    theirs = psutil.cpu_percent(percpu=True)
    ours = sampler.aggregate()
    assert len(theirs) == len([k for k in ours if k[3:4].isdigit()])
    for i, value in enumerate(theirs):
        assert abs(ours[f"cpu{i}_utilization_percent"] - value) < 10.0
    assert max(ours[f"cpu{i}_utilization_percent"] for i in range(len(theirs))) > 30.0  # we burnt a core
    assert 0.0 <= ours["cpu_iowait_percent"] <= 100.0
    assert abs(ours["cpu_utilization_percent"] - float(np.mean(theirs))) < 10.0


def test_memory_disk_network_match_proc_counters(tmp_path: Path) -> None:
    mem = MemorySampler()
    mem.collect()
    vm = psutil.virtual_memory()
    assert abs(mem.aggregate()["cpu_memory_used_percent"] - vm.percent) < 5.0
    assert abs(mem.aggregate()["cpu_memory_used_bytes"] - (vm.total - vm.available)) < 0.05 * vm.total
    disk, net = DiskSampler(), NetworkSampler()
    t0, io0 = time.monotonic(), psutil.disk_io_counters()
    disk.collect()
    net.collect()
    io_a, net_a, t_a = psutil.disk_io_counters(), psutil.net_io_counters(), time.monotonic()
    with open(tmp_path / "blob", "wb") as fh:
        fh.write(b"x" * 4_000_000)
        fh.flush()
        os.fsync(fh.fileno())
    _loopback_traffic(1_000_000)
    io_b, net_b, t_b = psutil.disk_io_counters(), psutil.net_io_counters(), time.monotonic()
    disk.collect()
    net.collect()
    io1, t1 = psutil.disk_io_counters(), time.monotonic()
    # the samplers' counter deltas lie between the inner (a..b) and outer deltas, their periods between the
    # inner (t_a..t_b) and outer (t0..t1) periods: their rates are bounded on both sides
    rate = disk.aggregate()["disk_write_bytes_per_second"]
    if io0 is not None and io_a is not None and io_b is not None and io1 is not None:
        assert (
            (io_b.write_bytes - io_a.write_bytes) / (t1 - t0)
            <= rate
            <= (io1.write_bytes - io0.write_bytes) / (t_b - t_a)
        )
    sent = net.aggregate()["network_sent_bytes_per_second"]
    assert sent >= (net_b.bytes_sent - net_a.bytes_sent) / (t1 - t0) >= 1_000_000 / (t1 - t0)  # loopback counts
    assert net.aggregate()["network_received_bytes_per_second"] >= 1_000_000 / (t1 - t0)
    assert set(net.aggregate()) == {"network_sent_bytes_per_second", "network_received_bytes_per_second"}


def _loopback_traffic(nbytes: int) -> None:
    """Send ``nbytes`` over a TCP connection on 127.0.0.1 (counted by the loopback interface)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        conn, _ = server.accept()
        with client, conn:
            client.sendall(b"y" * nbytes)
            client.shutdown(socket.SHUT_WR)
            got = 0
            while chunk := conn.recv(1 << 16):
                got += len(chunk)
    assert got == nbytes


def test_monitor_writes_samples_and_one_process_per_node(tmp_path: Path) -> None:
    cfg = ProfilerConfig(system_monitor_interval_millis=100)
    first = SystemMonitor(tmp_path, node="n0", config=cfg)
    second = SystemMonitor(tmp_path, node="n0", config=cfg)
    assert first.start() is True
    assert second.start() is False  # the node is already sampled
    time.sleep(1.5)
    first.close()
    second.close()
    arrays = SystemMetricsReader(tmp_path).read_arrays()["n0"]
    assert len(arrays) >= 5
    assert {"cpu0_utilization_percent", "cpu_memory_used_percent", "disk_read_bytes_per_second"} <= set(arrays.keys)
    assert np.all(np.diff(arrays.timestamps) > 0)
    cpu = arrays.column("cpu_utilization_percent")
    assert cpu is not None and np.all((cpu >= 0) & (cpu <= 100))
    assert not (tmp_path / "profiler" / "system" / "n0" / "monitor.lock").exists()
    assert SystemMonitor(tmp_path, node="n0", config=cfg).start() is True  # released on close


def test_stale_claim_is_taken_over(tmp_path: Path) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock = tmp_path / "monitor.lock"
    lock.write_text(f'{{"pid": {dead.pid}, "host": null, "create_time": 1.0}}')
    claim = NodeClaim(tmp_path)
    assert claim.acquire() is True
    assert NodeClaim(tmp_path).acquire() is False
    claim.release()
    assert not lock.exists()


class _Broken(Sampler):
    def __init__(self) -> None:
        self.calls = 0

    def collect(self) -> None:
        self.calls += 1
        if self.calls > 2:
            raise OSError("sensor gone")

    def aggregate(self) -> dict[str, float]:
        return {"x_percent": 1.0}


def test_failing_sampler_stops_monitor_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    mon = SystemMonitor(
        tmp_path, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100), samplers=[_Broken()]
    )
    with caplog.at_level(logging.WARNING):
        assert mon.start()
        deadline = time.monotonic() + 10
        while mon.running and time.monotonic() < deadline:
            time.sleep(0.05)
        mon.close()
    assert mon.failed
    assert len([r for r in caplog.records if "system monitor stopped" in r.getMessage()]) == 1
    assert len(SystemMetricsReader(tmp_path).read_arrays()["n0"]) == 1  # the sample before the failure


def _fake_nvml(n: int = 2, fail_power: bool = False) -> types.ModuleType:
    mod = types.ModuleType("pynvml")
    state: dict[str, Any] = {"shutdown": False}

    def rates(h: int) -> Any:
        return types.SimpleNamespace(gpu=10.0 * (h + 1), memory=0)

    def power(h: int) -> int:
        if fail_power:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 50_000 + h * 1000

    mod.NVML_TEMPERATURE_GPU = 0  # type: ignore[attr-defined]
    mod.nvmlInit = lambda: None  # type: ignore[attr-defined]
    mod.nvmlShutdown = lambda: state.update(shutdown=True)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetCount = lambda: n  # type: ignore[attr-defined]
    mod.nvmlDeviceGetHandleByIndex = lambda i: i  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUUID = lambda h: f"GPU-{h}aaaa".encode()  # type: ignore[attr-defined]
    mod.nvmlDeviceGetUtilizationRates = rates  # type: ignore[attr-defined]
    mod.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(used=(h + 1) * 2**30, total=8 * 2**30)  # type: ignore[attr-defined]
    mod.nvmlDeviceGetPowerUsage = power  # type: ignore[attr-defined]
    mod.nvmlDeviceGetTemperature = lambda h, kind: 40 + h  # type: ignore[attr-defined]
    mod.state = state  # type: ignore[attr-defined]
    return mod


def test_gpu_sampler_through_fake_nvml(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    sampler = GPUSampler()
    sampler.collect()
    got = sampler.aggregate()
    assert got["gpu0_utilization_percent"] == 10.0 and got["gpu1_utilization_percent"] == 20.0
    assert got["gpu1_memory_used_bytes"] == 2 * 2**30 and got["gpu1_memory_used_percent"] == 25.0
    assert got["gpu0_power_watts"] == 50.0 and got["gpu1_temperature_celsius"] == 41.0
    sampler.close()
    assert fake.state["shutdown"]  # type: ignore[attr-defined]


def test_gpu_sampler_only_visible_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml(fail_power=True))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    sampler = GPUSampler()
    sampler.collect()
    got = sampler.aggregate()
    assert got["gpu0_utilization_percent"] == 20.0  # NVML device 1 is the job's gpu0
    assert not any(k.startswith("gpu1") for k in got)
    assert "gpu0_power_watts" not in got and "gpu0_temperature_celsius" in got  # unsupported metric dropped
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(GPUUnavailable, match="no GPU"):
        GPUSampler()
    assert visible_gpu_indices("GPU-1a,0,7,1", ["GPU-0aaaa", "GPU-1aaaa"]) == [1, 0]


def test_no_nvml_logs_one_info_and_records_no_gpu(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import fails
    with caplog.at_level(logging.INFO, logger="trainspect"):
        mon = SystemMonitor(tmp_path, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100))
        assert mon.start()
        time.sleep(0.5)
        mon.close()
    infos = [r for r in caplog.records if "GPU metrics are not recorded" in r.getMessage()]
    assert len(infos) == 1 and infos[0].levelno == logging.INFO and "pip install" in infos[0].getMessage()
    arrays = SystemMetricsReader(tmp_path).read_arrays()["n0"]
    assert arrays.gpus == [] and len(arrays) >= 1


def test_monitor_with_fake_gpu_end_to_end(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_nvml())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    mon = SystemMonitor(tmp_path, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100))
    mon.start()
    time.sleep(0.6)
    mon.close()
    arrays = SystemMetricsReader(tmp_path).read_arrays()["n0"]
    assert arrays.gpus == [0, 1]
    events = SystemMetricsReader(tmp_path).get_events(0, 2e9, event_type="gpu")
    dims = {e.dimension for e in events}
    assert {"GPUUtilization", "GPUMemoryUtilization"} <= dims
    assert {e.name for e in events} == {"gpu0", "gpu1"}
