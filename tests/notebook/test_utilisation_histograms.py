"""``trainspect.profiler.histograms.utilisation_histograms``: counts exact against numpy, per node and device."""

from __future__ import annotations

from pathlib import Path

import nb_synth
import numpy as np
import pytest

from trainspect.profiler import SystemMetricsReader
from trainspect.profiler.arrays import SystemArrays
from trainspect.profiler.histograms import histogram_edges, utilisation_histograms

FIX = Path(__file__).resolve().parents[1] / "data" / "smdebug_profiler_resources" / "test_traces"


def test_counts_match_numpy_per_device_and_node(tmp_path: Path) -> None:
    nb_synth.write_system(tmp_path, 80, cores=3, gpus=2, node="a")
    nb_synth.write_system(tmp_path, 40, cores=1, gpus=0, node="b", seed=3)
    arrays = SystemMetricsReader(tmp_path).read_arrays()
    found = utilisation_histograms(arrays, bins=10)
    assert list(found) == ["a", "b"]
    assert list(found["a"]) == ["cpu_total", "cpu0", "cpu1", "cpu2", "gpu0", "gpu1", "gpu_total"]
    assert list(found["b"]) == ["cpu_total", "cpu0"]
    a = arrays["a"]
    edges = np.linspace(0, 100, 11)
    for key, device in (("cpu1_utilization_percent", "cpu1"), ("gpu0_utilization_percent", "gpu0")):
        expected, _ = np.histogram(a.column(key).astype(np.float64), bins=edges)
        assert found["a"][device].counts == tuple(expected.tolist())
        assert found["a"][device].samples == 80
        assert found["a"][device].mean == pytest.approx(float(a.column(key).astype(np.float64).mean()))
    cores = a.matrix([f"cpu{i}_utilization_percent" for i in range(3)]).astype(np.float64).mean(axis=1)
    assert found["a"]["cpu_total"].counts == tuple(np.histogram(cores, bins=edges)[0].tolist())
    assert found["a"]["cpu_total"].to_dict()["edges"] == edges.tolist()


def test_window_explicit_edges_clipping_and_missing_samples() -> None:
    values = np.array([[-5.0, np.nan], [0.0, 10.0], [50.0, 20.0], [100.0, np.nan], [130.0, 99.0]], np.float32)
    arr = SystemArrays("n", np.arange(5.0), ("cpu0_utilization_percent", "gpu0_utilization_percent"), values)
    h = utilisation_histograms(arr, bins=[0, 50, 100])["n"]
    assert h["cpu0"].counts == (2, 3) and h["cpu0"].samples == 5  # clipped into the end bins, 100 in the last
    assert h["gpu0"].counts == (2, 1) and h["gpu0"].samples == 3  # NaN: not sampled, not counted
    assert utilisation_histograms(arr, bins=2, start=1.0, end=2.0)["n"]["cpu0"].counts == (1, 1)
    assert utilisation_histograms({}) == {}
    with pytest.raises(ValueError, match="ascending"):
        histogram_edges([0, 50, 50])
    with pytest.raises(ValueError, match="at least one bin"):
        histogram_edges(0)


def test_sagemaker_profiler_output_matches_numpy() -> None:
    arrays = SystemMetricsReader(FIX).read_arrays()
    found = utilisation_histograms(arrays)["algo-1"]
    gpu1 = arrays["algo-1"].column("gpu1_utilization_percent").astype(np.float64)
    assert found["gpu1"].counts == tuple(np.histogram(gpu1, bins=np.linspace(0, 100, 21))[0].tolist())
    assert len([d for d in found if d.startswith("cpu") and d != "cpu_total"]) == 32
    # the GPUs are sampled on rows of their own: each row's total averages every GPU's latest sample
    gpus = arrays["algo-1"].matrix(["gpu0_utilization_percent", "gpu1_utilization_percent"]).astype(np.float64)
    g0, g1 = gpus[np.isfinite(gpus[:, 0]), 0], gpus[np.isfinite(gpus[:, 1]), 1]
    totals = [(g0[0] + g1[0]) / 2, (g0[1] + g1[0]) / 2, (g0[1] + g1[1]) / 2]  # rows: both, GPU 0, then GPU 1
    assert found["gpu_total"].samples == 3 and found["gpu_total"].mean == pytest.approx(np.mean(totals))
