"""Framework metrics from real torch training with a slow dataset, through the recorder and torch adapters."""

from __future__ import annotations

import json
import pstats
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402
from torch.utils.data import dataloader as dl  # noqa: E402

from trainspect.hooks.framework_metrics import FrameworkRecorder  # noqa: E402
from trainspect.hooks.torch_profiling import (  # noqa: E402
    TorchProfilingWindow,
    install_dataloader_timer,
    uninstall_dataloader_timer,
)
from trainspect.modes import ModeKeys  # noqa: E402
from trainspect.profiler import (  # noqa: E402
    FrameworkProfile,
    ProfilerConfig,
    dataloader_statistics,
    load_profiler_data,
    python_hotspots,
    top_operators,
)

SLEEP = 0.005


class SlowData(Dataset):  # type: ignore[type-arg]
    def __len__(self) -> int:
        return 96

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        time.sleep(SLEEP)
        return torch.full((8,), float(i % 7)), torch.tensor(float(i % 3))


def test_recorder_and_adapters_on_real_training(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    cfg = ProfilerConfig(framework_profile_params=FrameworkProfile.window(start_step=3, num_steps=2))
    rec = FrameworkRecorder(tmp_path, "worker_0", cfg, node="n0")
    other = FrameworkRecorder(tmp_path, "worker_x", cfg, node="n0")
    window = TorchProfilingWindow(tmp_path, "worker_0", cfg)
    original = dl._BaseDataLoaderIter.__next__
    rec.start()
    other.start()
    install_dataloader_timer(rec)
    install_dataloader_timer(other)
    uninstall_dataloader_timer(other)  # reference counted: still patched for rec
    assert dl._BaseDataLoaderIter.__next__ is not original
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    step = 0
    for x, y in DataLoader(SlowData(), batch_size=4, num_workers=0):
        rec.on_step_start(ModeKeys.TRAIN, step, step)
        window.on_step_start(step)
        t = time.time()
        loss = torch.nn.functional.mse_loss(model(x).squeeze(1), y)
        rec.record_span("forward", t, time.time(), step)
        t = time.time()
        opt.zero_grad()
        loss.backward()
        rec.record_span("backward", t, time.time(), step)
        t = time.time()
        opt.step()
        rec.record_span("optimizer", t, time.time(), step)
        window.on_step_end(step)
        rec.on_step_end(ModeKeys.TRAIN, step, step)
        step += 1
    window.close()
    uninstall_dataloader_timer(rec)
    assert dl._BaseDataLoaderIter.__next__ is original
    rec.close()
    other.close()

    data = load_profiler_data(tmp_path)
    tab = data.framework["worker_0"]
    assert tab.step_count == 24 and tab.steps["global_step"].tolist() == list(range(24))
    assert np.all(tab.steps["end"] >= tab.steps["start"])
    loads = tab.spans["kind"] == 4
    assert loads.sum() == 24  # one wait per batch; the final StopIteration is not a span
    assert np.all((tab.spans["end"] - tab.spans["start"])[loads] >= 4 * SLEEP * 0.9)  # 4 slow items per batch
    assert tab.dataloader_workers == 0
    assert data.framework["worker_x"].spans["kind"].size == 0  # uninstalled before the loop
    assert {1, 2, 3} <= set(tab.spans["kind"].tolist())
    phases = tab.phases()
    assert phases["initialization"][0] < phases["initialization"][1] == tab.steps["start"][0]  # type: ignore[index]
    assert phases["finalization"] is not None
    stats = dataloader_statistics(data)
    assert int(stats.loc[stats["worker"] == "worker_0", "count"].iloc[0]) == 24

    detailed = tmp_path / "profiler" / "detailed" / "worker_0"
    trace = json.loads((detailed / "trace_3-5.json").read_text())
    assert trace["traceEvents"]
    ops = top_operators(data, "cpu")
    assert not ops.empty and ops["name"].str.contains("aten::").any()
    assert ops["self_time_us"].is_monotonic_decreasing
    assert pstats.Stats(str(detailed / "python_3-5.pstats")).total_calls > 0  # type: ignore[attr-defined]
    hot = python_hotspots(data)
    assert not hot.empty and set(hot.columns) >= {"function", "total_time_s", "cumulative_time_s"}
    assert any("__getitem__" in f or "sleep" in f for f in hot["function"])
