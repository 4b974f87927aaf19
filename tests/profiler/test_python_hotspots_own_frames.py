"""The report's Python hotspots are the training's, not trainspect's or the profilers' own (issue 13, point 4)."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import trainspect as ts  # noqa: E402
from trainspect.profiler import FrameworkProfile, ProfilerConfig, load_profiler_data, python_hotspots  # noqa: E402
from trainspect.profiler.analysis import is_own_frame  # noqa: E402


def slow_feature(x: torch.Tensor) -> torch.Tensor:
    """The user's own hot spot: a pure-Python loop computing a feature."""
    acc = 0.0
    for i in range(50_000):
        acc += (i % 7) * 1e-9
    return x + acc


def test_hotspots_leave_out_trainspect_and_profiler_frames(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    # the detailed (torch.profiler) and the Python window overlap: the profilers' own work lands in cProfile
    cfg = ProfilerConfig(framework_profile_params=FrameworkProfile.window(start_step=2, num_steps=3))
    hook = ts.torch.Hook(str(tmp_path), include_collections=["losses"], profiler_config=cfg)
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(64, 8), torch.randn(64, 1)
    for _ in range(8):
        opt.zero_grad()
        loss_fn(model(slow_feature(x)), y).backward()
        opt.step()
    hook.close()
    data = load_profiler_data(tmp_path)
    everything = python_hotspots(data, n=10_000, include_own=True)
    own = [is_own_frame(f, p) for f, p in zip(everything["function"], everything["filename"], strict=True)]
    assert any(own), "the overlapping windows profile the profilers themselves"
    assert any("trainspect" in p or "profiler" in p for p in everything["filename"][own])
    hot = python_hotspots(data, n=10_000)
    assert len(hot) == len(everything) - sum(own)
    assert not any(is_own_frame(f, p) for f, p in zip(hot["function"], hot["filename"], strict=True))
    # what trainspect and the profilers called (getattr in torch.profiler's parser, pathlib/json in the writers)
    # is theirs too: the user's own loop is the top hot spot
    assert "slow_feature" in python_hotspots(data, n=3)["function"].tolist()
