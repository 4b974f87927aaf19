"""The job's CUDA memory as framework step metrics, and GPUMemoryIncrease judging the job's memory."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from profiler_synth import T0, data, gpus, steps, system

from trainspect.hooks.cuda_memory import CudaMemoryProbe, install_cuda_memory
from trainspect.hooks.framework_metrics import FrameworkRecorder
from trainspect.modes import ModeKeys
from trainspect.profiler import FrameworkMetricsReader, ProfilerConfig
from trainspect.rules.profiler import GPUMemoryIncrease
from trainspect.rules.verdict import Status

GIB = 2**30


class FakeCuda:
    """The four ``torch.cuda`` functions the probe may call; anything else (a sync, an init) is an AttributeError."""

    def __init__(self, used: list[int], initialized: bool = True) -> None:
        self.used = used  # bytes allocated per device (0: never used)
        self.peak = list(used)
        self.initialized = initialized

    def is_initialized(self) -> bool:
        return self.initialized

    def device_count(self) -> int:
        assert self.initialized, "device_count before CUDA is initialised"
        return len(self.used)

    def memory_stats_as_nested_dict(self, d: int) -> dict[str, Any]:
        self.peak[d] = max(self.peak[d], self.used[d])
        if not self.used[d] and not self.peak[d]:
            return {"allocated_bytes": {"all": {"current": 0, "peak": 0}}, "reserved_bytes": {"all": {"current": 0}}}
        return {
            "allocated_bytes": {"all": {"current": self.used[d], "peak": self.peak[d]}},
            "reserved_bytes": {"all": {"current": self.used[d] + GIB}},
        }

    def get_device_properties(self, d: int) -> Any:
        return type("Props", (), {"total_memory": 40 * GIB})()


def _record(tmp_path: Path, cuda: FakeCuda, allocated: list[int]) -> dict[str, np.ndarray]:
    """One step per value of ``allocated`` (device 0's bytes) through a recorder; the table read back."""
    rec = FrameworkRecorder(tmp_path, "worker_0", ProfilerConfig())
    rec.start()
    rec.add_step_source(CudaMemoryProbe(cuda))
    for step, value in enumerate(allocated):
        cuda.used[0] = value
        rec.on_step_start(ModeKeys.TRAIN, step, step)
        rec.on_step_end(ModeKeys.TRAIN, step, step)
    rec.close()
    return FrameworkMetricsReader(tmp_path).read_tables()["worker_0"].step_metrics


def test_allocator_counters_per_used_device_are_written_per_step(tmp_path: Path) -> None:
    cols = _record(tmp_path, FakeCuda([0, 0, 0]), [GIB, 4 * GIB, 2 * GIB])
    assert list(cols["global_step"]) == [0, 1, 2] and np.all(np.diff(cols["time"]) >= 0)
    assert list(cols["gpu0_memory_allocated_bytes"]) == [GIB, 4 * GIB, 2 * GIB]
    assert list(cols["gpu0_memory_reserved_bytes"]) == [2 * GIB, 5 * GIB, 3 * GIB]
    assert list(cols["gpu0_memory_peak_allocated_bytes"]) == [GIB, 4 * GIB, 4 * GIB]
    assert list(cols["gpu0_memory_allocated_percent"]) == [2.5, 10.0, 5.0]
    assert not any(k.startswith(("gpu1", "gpu2")) for k in cols)  # devices this process never used


def test_cuda_is_never_initialised_by_the_probe(tmp_path: Path) -> None:
    assert CudaMemoryProbe(FakeCuda([GIB], initialized=False))() == {}
    rec = FrameworkRecorder(tmp_path, "worker_0", ProfilerConfig())
    rec.start()
    install_cuda_memory(rec)  # the real torch.cuda: CPU training
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(3):
        rec.on_step_start(ModeKeys.TRAIN, step, step)
        loss = model(torch.randn(8, 4)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        rec.on_step_end(ModeKeys.TRAIN, step, step)
    rec.close()
    tables = FrameworkMetricsReader(tmp_path).read_tables()["worker_0"]
    assert tables.step_count == 3 and list(tables.step_metrics) == ["global_step", "time"]
    assert not torch.cuda.is_initialized()


def test_a_failing_source_is_dropped_with_one_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    calls = []

    def broken() -> dict[str, float]:
        calls.append(1)
        raise RuntimeError("driver went away")

    rec = FrameworkRecorder(tmp_path, "worker_0", ProfilerConfig())
    rec.start()
    rec.add_step_source(broken, name="broken")
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        for step in range(3):
            rec.on_step_start(ModeKeys.TRAIN, step, step)
            rec.on_step_end(ModeKeys.TRAIN, step, step)
    rec.close()
    assert len(calls) == 1 and len(caplog.records) == 1 and "'broken'" in caplog.messages[0]
    assert FrameworkMetricsReader(tmp_path).read_tables()["worker_0"].step_count == 3


def _rule() -> GPUMemoryIncrease:
    return GPUMemoryIncrease(patience=20, window=5)


def test_gpu_memory_increase_judges_the_jobs_allocated_memory(tmp_path: Path) -> None:
    growth = [GIB] * 40 + [12 * GIB] * 20  # 2.5 % of the device, then 30 %
    grown = _rule().evaluate(data(framework=[_tables(tmp_path / "grow", growth)]))
    assert grown.status is Status.ISSUES_FOUND and grown.triggers >= 1
    assert "worker_0/gpu0" in grown.message and "PyTorch allocator" in grown.message
    assert grown.details["worker_0/gpu0"]["source"] == "framework"
    healthy = _rule().evaluate(data(framework=[_tables(tmp_path / "flat", [GIB + (s % 3) * 2**20 for s in range(60)])]))
    assert healthy.status is Status.NO_ISSUES_FOUND and healthy.triggers == 0
    few = _rule().evaluate(data(framework=[_tables(tmp_path / "few", [GIB] * 10)]))
    assert few.status is Status.NO_DATA


def _tables(path: Path, allocated: list[int]) -> Any:
    _record(path, FakeCuda([0]), allocated)
    return FrameworkMetricsReader(path).read_tables()["worker_0"]


def test_a_neighbours_growth_is_not_blamed_on_the_job(tmp_path: Path) -> None:
    neighbour = gpus(1, 90.0, lambda t: np.where(t > 30, 90.0, 10.0))  # the device fills up at t = 30 s
    own = {"gpu0_process_memory_used_percent": 10.0}
    arrays = system(60, **neighbour, **own)
    assert _rule().evaluate(data([arrays])).status is Status.NO_ISSUES_FOUND  # NVML per-process: flat
    smdebug = GPUMemoryIncrease(patience=20, window=5, memory_source="device").evaluate(data([arrays]))
    assert smdebug.status is Status.ISSUES_FOUND and smdebug.details["n0/gpu0"]["source"] == "device"
    without = system(60, **neighbour)  # nothing but the device total: it is judged, as before
    assert _rule().evaluate(data([without])).status is Status.ISSUES_FOUND
    flat_job = _tables(tmp_path, [GIB] * 60)  # framework memory wins over NVML
    both = _rule().evaluate(data([without], [flat_job, steps(np.full(5, 0.1), worker="w1", start=T0)]))
    assert both.status is Status.NO_ISSUES_FOUND and list(both.details) == ["worker_0/gpu0"]


def test_a_damaged_step_metrics_table_is_skipped_with_a_warning(tmp_path: Path) -> None:
    from trainspect.profiler import schema
    from trainspect.profiler.writers import FrameFile

    _record(tmp_path, FakeCuda([0]), [GIB, 2 * GIB])
    folder = next((tmp_path / "profiler" / "framework").iterdir())
    bad = FrameFile(folder / f"{int(T0 * 1000) + 1:013d}{schema.FRAMEWORK_SUFFIX}")
    bad.write(schema.KIND_TABLE, schema.encode_table("step_metrics", {"global_step": np.array([5])}))  # no time
    bad.close()
    reader = FrameworkMetricsReader(tmp_path)
    cols = reader.read_tables()["worker_0"].step_metrics
    assert list(cols["gpu0_memory_allocated_bytes"]) == [GIB, 2 * GIB]
    assert any("step_metrics" in p for p in reader.problems())


def test_the_report_and_the_profiler_tab_show_the_jobs_gpu_memory(tmp_path: Path) -> None:
    from trainspect.profiler import load_profiler_data
    from trainspect.report import render_report
    from trainspect.tb_plugin.cards import default_cards

    _record(tmp_path, FakeCuda([0]), [GIB, 3 * GIB, 2 * GIB])
    html = render_report(tmp_path)
    assert 'id="cuda-memory"' in html and "GPU memory of the training job" in html
    section = html.split('id="cuda-memory"', 1)[1].split("</section>", 1)[0]
    # first 1024 MiB, last 2048, max 3072, reserved max 4096 (allocated + 1 GiB), peak 3072, growth +1024
    for cell in ("1,024.0", "2,048.0", "3,072.0", "4,096.0"):
        assert f">{cell}<" in section, cell
    card = {c.id: c for c in default_cards(plugins=False).cards()}["cuda_memory"]
    rows = card.serve(load_profiler_data(tmp_path), card.parse({}))["rows"]
    assert [(r["device"], r["steps"], r["allocated_last_bytes"], r["peak_bytes"], r["growth_bytes"]) for r in rows] == [
        ("gpu0", 3, 2 * GIB, 3 * GIB, GIB)
    ]
    empty = tmp_path / "cpu"
    rec = FrameworkRecorder(empty, "worker_0", ProfilerConfig())
    rec.start()
    rec.on_step_start(ModeKeys.TRAIN, 0, 0)
    rec.on_step_end(ModeKeys.TRAIN, 0, 0)
    rec.close()
    assert '<li id="cuda-memory" data-section="cuda-memory" data-empty="1">' in render_report(empty)  # CPU: why
    assert '<li id="cuda-memory"' not in html


def test_the_pytorch_hook_records_the_jobs_cuda_memory_each_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import trainspect as ts
    from trainspect.hooks import cuda_memory

    cuda = FakeCuda([3 * GIB])
    monkeypatch.setattr(cuda_memory.CudaMemoryProbe, "_module", lambda self: cuda)
    model = torch.nn.Linear(4, 1)
    hook = ts.torch.Hook(out_dir=str(tmp_path / "run"), profiler_config=ProfilerConfig())
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(4):
        cuda.used[0] = (3 + step) * GIB
        opt.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()
    hook.close()
    metrics = FrameworkMetricsReader(tmp_path / "run").read_tables()["worker_0"].step_metrics
    assert list(metrics["global_step"]) == [0, 1, 2, 3]
    assert list(metrics["gpu0_memory_allocated_bytes"]) == [3 * GIB, 4 * GIB, 5 * GIB, 6 * GIB]
