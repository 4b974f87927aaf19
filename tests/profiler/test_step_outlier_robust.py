"""StepOutlier (issue 28): robust (median + k·MAD) and length-aware; trigger time = the outlier step's own time.

Step timings are written in the run-directory format (the frames the framework recorder writes) and read back
through :func:`trainspect.profiler.load_profiler_data`. The healthy series are real recorded timings
(``tests/data/step_timings``); the faults are added to them, so nothing depends on this machine's speed.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from trainspect.exceptions import ConfigError
from trainspect.modes import ModeKeys
from trainspect.profiler import load_profiler_data, schema
from trainspect.profiler.data import ProfilerData
from trainspect.profiler.writers import FrameFile
from trainspect.rules.profiler import StepOutlier
from trainspect.rules.verdict import Status
from trainspect.store.layout import RunLayout

T0 = 1_790_000_000.0
RECORDED = Path(__file__).resolve().parents[1] / "data" / "step_timings" / "loaded_cpu_mlp_1000.json"


def _recorded(n: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Durations and the gaps after each step (s) of the recorded healthy run on a loaded CPU."""
    raw = json.loads(RECORDED.read_text())
    start = np.array(raw["start_us"], dtype=np.float64) / 1e6
    dur = np.array(raw["duration_us"], dtype=np.float64) / 1e6
    gaps = np.append(np.diff(start) - dur[:-1], np.median(np.diff(start) - dur[:-1]))
    return (dur[:n], gaps[:n]) if n else (dur, gaps)


def _write_run(
    root: Path,
    dur: np.ndarray,
    gaps: np.ndarray | float = 1e-4,
    mode: ModeKeys = ModeKeys.TRAIN,
    worker: str = "worker_0",
) -> ProfilerData:
    """Write one worker's steps (back to back, ``gaps`` after each) as the recorder does, and load the run."""
    gaps = np.broadcast_to(np.asarray(gaps, dtype=np.float64), dur.shape)
    start = T0 + 5 + np.concatenate([[0.0], np.cumsum(dur + gaps)[:-1]])
    directory = RunLayout(root).framework_dir(worker)
    directory.mkdir(parents=True, exist_ok=True)
    frames = FrameFile(directory / f"{int(T0 * 1000):013d}{schema.FRAMEWORK_SUFFIX}")
    frames.write_json(
        schema.KIND_EVENT,
        {
            "event": "start",
            "time": T0,
            "process_start": T0,
            "worker": worker,
            "node": "n0",
            "host": "n0",
            "pid": 1,
            "config": {},
        },
    )
    n = len(dur)
    columns = {
        "mode": np.full(n, int(mode), np.uint8),
        "mode_step": np.arange(n, dtype=np.int64),
        "global_step": np.arange(n, dtype=np.int64),
        "start": start,
        "end": start + dur,
    }
    frames.write(schema.KIND_TABLE, schema.encode_table("steps", columns))
    frames.write_json(schema.KIND_EVENT, {"event": "close", "time": float(start[-1] + dur[-1] + 0.1)})
    frames.close()
    RunLayout(root).end_marker.touch()  # the job is over: verdicts are final, not in progress
    return load_profiler_data(root, final=True)


def _steps(data: ProfilerData) -> tuple[np.ndarray, np.ndarray]:
    tab = data.framework["worker_0"]
    return tab.steps["start"], tab.steps["end"]


def test_recorded_scheduler_noise_on_300_steps_is_quiet(tmp_path: Path) -> None:
    dur, gaps = _recorded(300)
    assert np.median(dur) < 0.002 and (dur > 0.01).sum() >= 10  # blips of 10-34 ms among ~1 ms steps
    v = StepOutlier().evaluate(_write_run(tmp_path, dur, gaps))
    assert v.status is Status.NO_ISSUES_FOUND, v.message
    assert v.triggers == 0 and v.first_trigger_time is None
    d = v.details["worker_0/TRAIN"]
    assert d["number_of_outliers"] > 10 and d["excess_s"] < 0.5  # many outliers, little time lost
    assert "min_lost_percent 20%" in v.message and "min_excess_s 0.5 s" in v.message


def test_recorded_noise_stays_quiet_however_long_the_run(tmp_path: Path) -> None:
    dur, gaps = _recorded()
    long = StepOutlier().evaluate(_write_run(tmp_path, np.tile(dur, 5), np.tile(gaps, 5)))  # 5000 steps
    assert long.status is Status.NO_ISSUES_FOUND, long.message


def test_the_issues_demo_noise_is_quiet_but_smdebugs_literal_rule_fires(tmp_path: Path) -> None:
    # the healthy 300-step demo of issue 28: 11 outliers of 14-23 ms against a 2.1 ms median, ~0.12 s apart
    rng = np.random.default_rng(0)
    dur = 0.0021 + rng.normal(0, 5e-5, 300)
    dur[np.arange(11) * 27 + 10] = np.linspace(0.014, 0.023, 11)
    data = _write_run(tmp_path, dur, 0.0021)
    assert StepOutlier().evaluate(data).status is Status.NO_ISSUES_FOUND
    literal = StepOutlier(literal=True).evaluate(data)
    assert literal.status is Status.ISSUES_FOUND  # 11 > n_outliers 10: red or green by machine noise
    start, end = _steps(data)
    assert literal.first_trigger_time == pytest.approx(
        start[10 + 27 * 10], abs=1e-6
    )  # the 11th outlier, not a window end
    assert literal.last_trigger_time is not None and literal.last_trigger_time <= end[-1]


def test_periodic_200ms_stalls_trigger_at_the_first_stall(tmp_path: Path) -> None:
    dur, gaps = _recorded(300)
    dur = dur.copy()
    dur[49::50] = 0.2  # a checkpoint or evaluation stall every 50th step
    data = _write_run(tmp_path, dur, gaps)
    v = StepOutlier().evaluate(data)
    assert v.status is Status.ISSUES_FOUND, v.message
    start, end = _steps(data)
    assert v.first_trigger_time == pytest.approx(start[49], abs=1e-6)  # the stall's own time, not after the job ended
    assert v.last_trigger_time == pytest.approx(start[299], abs=1e-6) and v.last_trigger_time < end[-1]
    assert v.triggers == 6 and v.details["worker_0/TRAIN"]["stall_step_numbers"] == [49, 99, 149, 199, 249, 299]
    assert v.details["worker_0/TRAIN"]["lost_percent"] > 20
    (series,) = v.series
    assert series.trigger_x == tuple(start[49::50])


def test_a_stall_at_the_first_step_is_reported_there(tmp_path: Path) -> None:
    dur = np.full(300, 0.002)
    dur[::50] = 0.2
    data = _write_run(tmp_path, dur)
    v = StepOutlier().evaluate(data)
    assert v.status is Status.ISSUES_FOUND
    assert v.first_trigger_time == pytest.approx(_steps(data)[0][0])  # counted or not, it is the first outlier


def test_a_slow_first_step_alone_is_warm_up(tmp_path: Path) -> None:
    dur = np.full(300, 0.002)
    dur[0] = 1.5  # CUDA initialisation, cuDNN autotuning, loader start
    assert StepOutlier().evaluate(_write_run(tmp_path, dur)).status is Status.NO_ISSUES_FOUND
    assert StepOutlier(warmup_steps=0).evaluate(_write_run(tmp_path / "b", dur)).status is Status.ISSUES_FOUND


def test_a_sustained_slowdown_triggers(tmp_path: Path) -> None:
    dur, gaps = _recorded(300)
    dur = dur.copy()
    dur[200:260] += 0.02  # every step 20 ms slower for 60 steps: no single stall (each < min_step_excess_s)
    data = _write_run(tmp_path, dur, gaps)
    v = StepOutlier().evaluate(data)
    assert v.status is Status.ISSUES_FOUND, v.message
    assert v.first_trigger_time is not None and v.first_trigger_time >= _steps(data)[0][195]
    assert set(range(205, 255)) <= set(v.details["worker_0/TRAIN"]["stall_step_numbers"])


def test_a_short_run_says_too_little_data(tmp_path: Path) -> None:
    dur, gaps = _recorded(80)
    dur = dur.copy()
    dur[::10] = 0.5
    v = StepOutlier().evaluate(_write_run(tmp_path, dur, gaps))
    assert v.status is Status.NO_DATA and v.triggers == 0
    assert "too little data: 80 steps" in v.message and "more than 100" in v.message


def test_thresholds_are_parameters() -> None:
    rule = StepOutlier(mad_factor="4", min_lost_percent="5", min_excess_s="0.1", min_step_excess_s="0.02")
    assert (rule.mad_factor, rule.min_lost_percent, rule.min_excess_s, rule.min_step_excess_s) == (4, 5, 0.1, 0.02)
    assert StepOutlier(literal="true").literal is True


@pytest.mark.parametrize(
    ("params", "needle"),
    [
        ({"mad_factor": 0}, "mad_factor=0.0 is out of range; allowed: > 0"),
        ({"min_lost_percent": 150}, "min_lost_percent=150 is out of range; allowed: >= 0 and <= 100"),
        ({"min_excess_s": -1}, "min_excess_s=-1 is out of range; allowed: >= 0"),
        ({"min_step_excess_s": "soon"}, "min_step_excess_s='soon': expected float"),
        ({"warmup_steps": 1.5}, "warmup_steps=1.5"),
        ({"mode": "sideways"}, "sideways"),
    ],
)
def test_invalid_parameters_are_refused_at_construction(params: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError, match="StepOutlier") as err:
        StepOutlier(**params)
    assert needle in str(err.value)


@pytest.mark.parametrize(("stall", "kind"), [(False, "note"), (True, "warn")])
def test_the_reports_long_step_note_warns_only_when_the_rule_does(tmp_path: Path, stall: bool, kind: str) -> None:
    from trainspect.report._framework_sections import StepDurationSection
    from trainspect.report.context import ReportContext
    from trainspect.report.sections import Page

    dur, gaps = _recorded(300)
    dur = dur.copy()
    if stall:
        dur[49::50] = 0.2
    _write_run(tmp_path, dur, gaps)
    ctx = ReportContext.load(tmp_path)
    page = Page()
    StepDurationSection().build(ctx, page)
    (block,) = [b for b in page.blocks if "StepOutlier finds" in b.get("text", "")]
    assert block["kind"] == kind
