"""Issue 31: profiler DataFrames, the time-window query, and readers following a running job."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synthetic_run import write_steps, write_system

import trainspect as ts
from trainspect.exceptions import TrainspectError
from trainspect.frames import PHASE_COLUMNS, SPAN_COLUMNS, STEP_COLUMNS, SYSTEM_COLUMNS, NotRecorded
from trainspect.profiler import FrameworkMetricsReader, SystemMetricsReader, _files, window

T0 = 1_700_000_000.0
KEYS = ["cpu0_utilization_percent", "gpu0_utilization_percent", "cpu_memory_used_percent", "disk_read_bytes"]
HOURS = 3


def _system(run: Path, node: str = "algo-1", start: float = T0, hours: int = HOURS, every: float = 60.0) -> None:
    times = start + np.arange(int(hours * 3600 / every)) * every
    values = np.stack([(times - T0) % 100, (times - T0) % 77, np.full(len(times), 42.5), times - T0], axis=1)
    write_system(run, node, int(every * 1000), times, KEYS, values, flush_every=10)


def _framework(run: Path, worker: str = "worker_0", n: int = 50, start: float = T0 + 3600.0) -> None:
    """``n`` TRAIN steps of 2 s from ``start``, each: a 0.25 s loader wait before it, forward, backward, optimizer."""
    starts = start + np.arange(n) * 3.0
    steps = {
        "mode": np.full(n, 1, np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": starts,
        "end": starts + 2.0,
    }
    kinds, s0, s1 = [], [], []
    for code, a, b in ((4, -0.5, -0.25), (1, 0.0, 0.5), (2, 0.5, 1.5), (3, 1.5, 1.75)):
        kinds.append(np.full(n, code, np.uint8))
        s0.append(starts + a)
        s1.append(starts + b)
    spans = {
        "kind": np.concatenate(kinds),
        "start": np.concatenate(s0),
        "end": np.concatenate(s1),
        "global_step": np.tile(np.arange(n, dtype=np.int64), 4),
        "workers": np.full(4 * n, 2, np.int16),
    }
    order = np.argsort(spans["start"], kind="stable")
    spans = {k: v[order] for k, v in spans.items()}
    write_steps(run, worker, "algo-1", (start - 10, start - 20), [(steps, spans)], closed=starts[-1] + 10)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pframes") / "run"
    _system(out)
    _system(out, node="algo-2", hours=1)
    _framework(out)
    return out


def test_system_frame_values_are_the_readers(run: Path) -> None:
    reader = SystemMetricsReader(run)
    t0, t1 = T0 + 1800, T0 + 5400
    df = reader.dataframe(t0, t1, node="algo-1")
    assert list(df.columns) == list(SYSTEM_COLUMNS) and dict(df.dtypes.astype(str)) == SYSTEM_COLUMNS
    arrays = reader.read_arrays()["algo-1"]
    keep = (arrays.timestamps >= t0) & (arrays.timestamps < t1)
    assert len(df) == keep.sum() * len(KEYS) and df["timestamp"].min() >= t0 and df["timestamp"].max() < t1
    got = df.pivot(index="timestamp", columns="metric", values="value")[list(arrays.keys)].to_numpy()
    np.testing.assert_array_equal(got, arrays.values[keep].astype(np.float64))
    gpu = df[df["metric"] == "gpu0_utilization_percent"].iloc[0]
    assert (gpu["type"], gpu["name"], gpu["dimension"], gpu["node"]) == ("gpu", "gpu0", "GPUUtilization", "algo-1")


def test_system_frame_wide_and_filters(run: Path) -> None:
    reader = SystemMetricsReader(run)
    df = reader.dataframe(T0, T0 + 600, metrics=["cpu*", "disk_read_bytes"], wide=True)
    assert list(df.columns) == [
        "timestamp",
        "node",
        "cpu0_utilization_percent",
        "cpu_memory_used_percent",
        "disk_read_bytes",
    ]
    assert df.groupby("node").size().to_dict() == {"algo-1": 10, "algo-2": 10}
    assert df["disk_read_bytes"].tolist()[:3] == [0.0, 60.0, 120.0]
    assert len(reader.dataframe()) == (HOURS * 60 + 60) * len(KEYS)


def test_unknown_metric_and_node_name_what_exists(run: Path) -> None:
    reader = SystemMetricsReader(run)
    with pytest.raises(NotRecorded, match=r"no metric 'gpu9_memory' .*recorded: cpu0_utilization_percent, .*"):
        reader.dataframe(T0, T0 + 600, metrics="gpu9_memory")
    with pytest.raises(KeyError, match="no node 'algo-3' in this run; recorded: algo-1, algo-2"):
        reader.dataframe(node="algo-3")
    with pytest.raises(ValueError, match="no framework table 'op'; tables: steps, spans, phases"):
        FrameworkMetricsReader(run).dataframe("op")


def test_steps_frame_has_each_steps_phases_and_loader_wait(run: Path) -> None:
    df = FrameworkMetricsReader(run).dataframe()
    assert list(df.columns) == list(STEP_COLUMNS) and dict(df.dtypes.astype(str)) == STEP_COLUMNS
    assert len(df) == 50 and set(df["mode"]) == {"TRAIN"} and set(df["node"]) == {"algo-1"}
    first = df.iloc[0]
    assert (first.forward, first.backward, first.optimizer, first.dataloader, first.duration) == (
        0.5,
        1.0,
        0.25,
        0.25,
        2.0,
    )
    spans = FrameworkMetricsReader(run).dataframe("spans")
    assert dict(spans.dtypes.astype(str)) == SPAN_COLUMNS and set(spans["kind"]) >= {"forward", "dataloader"}
    phases = FrameworkMetricsReader(run).dataframe("phases")
    assert phases["phase"].tolist() == ["initialization", "training_loop", "finalization"]
    assert FrameworkMetricsReader(run).dataframe("operators").empty


def test_window_returns_only_the_window_and_reads_only_its_files(run: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[Path] = []
    real = _files.open_regular
    monkeypatch.setattr(_files, "open_regular", lambda p, *a, **k: opened.append(Path(p)) or real(p, *a, **k))
    t0, t1 = T0 + 3600 + 30, T0 + 3600 + 90  # a minute of the second hour
    w = window(run, t0, t1)
    system_files = {p for p in opened if p.suffix == ".tsys"}
    assert {p.parent.name for p in system_files} == {"algo-1"}  # algo-2 recorded the first hour only
    assert len(system_files) == 1 and len(list(run.glob("profiler/system/algo-1/*.tsys"))) == HOURS
    assert w.system["timestamp"].between(t0, t1, inclusive="left").all() and len(w.system) == len(KEYS)
    assert w.steps["global_step"].tolist() == list(range(10, 30))  # steps of 2 s every 3 s from T0 + 3600
    assert (w.steps["end"] > t0).all() and (w.steps["start"] < t1).all()
    assert set(w.loader_waits["kind"]) == {"dataloader"} and len(w.loader_waits) == 20
    assert w.phases["phase"].tolist() == ["training_loop"]
    assert set(w.frames()) == {"system", "steps", "spans", "loader_waits", "phases"}


def test_window_outside_the_run_or_backwards_raises(run: Path) -> None:
    with pytest.raises(
        NotRecorded,
        match=r"no data in the window '\[1699990000.000, 1699990001.000\)'.*recorded: "
        r"\[1700000000.000, ",
    ):
        window(run, T0 - 10_000, T0 - 9_999)
    with pytest.raises(ValueError, match="must be after"):
        window(run, T0 + 10, T0)
    assert window(run, T0 + 10.5, T0 + 10.6).system.empty  # between two samples of the run: empty, no error


def test_empty_run_gives_empty_frames(tmp_path: Path) -> None:
    w = window(tmp_path, T0, T0 + 3600)
    for name, frame in w.frames().items():
        assert frame.empty, name
    assert dict(w.system.dtypes.astype(str)) == SYSTEM_COLUMNS
    assert dict(w.steps.dtypes.astype(str)) == STEP_COLUMNS and dict(w.phases.dtypes.astype(str)) == PHASE_COLUMNS
    assert SystemMetricsReader(tmp_path).dataframe(metrics="cpu*", wide=True).columns.tolist() == ["timestamp", "node"]
    for table in ("steps", "spans", "phases", "step_metrics", "operators", "python"):
        assert FrameworkMetricsReader(tmp_path).dataframe(table).empty
    assert issubclass(NotRecorded, TrainspectError) and ts.frames.window is window


def test_refresh_event_file_list_picks_up_new_files(tmp_path: Path) -> None:
    _system(tmp_path, hours=1)
    system = SystemMetricsReader(tmp_path)
    framework = FrameworkMetricsReader(tmp_path)
    assert list(system.read_arrays()) == ["algo-1"] and framework.read_tables() == {}
    _system(tmp_path, node="algo-2", hours=1)
    _framework(tmp_path, worker="worker_1", n=3)
    system.refresh_event_file_list()
    framework.refresh_event_file_list()
    assert sorted(system.read_arrays()) == ["algo-1", "algo-2"]
    assert set(system.dataframe(T0, T0 + 60)["node"]) == {"algo-1", "algo-2"}
    assert list(framework.read_tables()) == ["worker_1"] and len(framework.dataframe()) == 3


def test_sagemaker_folder_frames_match_its_arrays() -> None:
    fix = Path(__file__).resolve().parents[1] / "data" / "smdebug_profiler_resources" / "test_traces"
    reader = SystemMetricsReader(fix)
    assert reader.source == "sagemaker"
    df = reader.dataframe(wide=True)
    arrays = reader.read_arrays()
    assert len(df) == sum(len(a) for a in arrays.values()) and set(df["node"]) == set(arrays)
    node, a = next(iter(arrays.items()))
    key = a.keys[0]
    got = df[df["node"] == node][key].to_numpy()
    np.testing.assert_array_equal(got, a.values[:, 0].astype(np.float64))
    span = reader.time_span()
    assert span is not None and len(reader.dataframe(span[0], span[1])) == len(reader.dataframe()) - len(
        reader.dataframe(span[1], span[1] + 1)
    )
