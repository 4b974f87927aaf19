"""Issue 14 (point 5): a damaged run directory gives a clear message, never a traceback, a 500 or a wrong value.

One small real run (weights, gradients, losses, default rules, the profiler with an operator window and a Python
profile) is recorded once; each case damages one file of a copy (truncate, flip bytes, zero a region, delete,
append garbage, JSON of the wrong shape) and reads it through every reader: the Trial, the rules, the report and
the TensorBoard plugin's routes. Values read back equal the originals or are absent; whatever is absent, and every
deleted file, is named in a warning or a note.
"""

from __future__ import annotations

import json
import logging
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from markupsafe import escape
from tensorboard.plugins import base_plugin
from werkzeug import test as wtest
from werkzeug import wrappers

import trainspect as ts
from trainspect.exceptions import NotARunDirectory, TensorUnavailableForStep
from trainspect.profiler import load_profiler_data
from trainspect.report import ReportContext, render_report
from trainspect.rules.registry import default_registry
from trainspect.rules.verdict import Status
from trainspect.tb_plugin.plugin import TrainspectPlugin

HERE = Path(__file__).parent
RUN = "run"


@dataclass
class Reference:
    """What the undamaged run reads back."""

    root: Path
    values: Saved
    steps: list[int]
    samples: dict[str, tuple[np.ndarray, np.ndarray]]
    framework_steps: int
    operators: int
    python_rows: int
    statuses: dict[str, Status]


def _rules() -> list[Any]:
    registry = default_registry()
    return [cls() for cls in registry.classes() if _default_constructible(cls)]


def _default_constructible(cls: Any) -> bool:
    try:
        cls()
    except Exception:
        return False
    return True


Saved = dict[str, dict[int, tuple[np.ndarray | None, dict[tuple[str, bool], float]]]]


def _read_values(trial: Any) -> Saved:
    """Every tensor's raw value (or None when only reductions were saved) and saved reductions, by step."""
    out: Saved = {}
    for name in trial.tensor_names():
        tensor = trial.tensor(name)
        out[name] = {}
        for step in tensor.steps():
            try:
                raw: np.ndarray | None = tensor.value(step)
            except TensorUnavailableForStep:
                raw = None
            out[name][step] = (raw, tensor.reduction_values(step))
    return out


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Reference:
    root = tmp_path_factory.mktemp("fuzz") / "template"
    subprocess.run(
        [sys.executable, str(HERE / "fuzztrain.py"), str(root)],
        check=True,
        timeout=240,
        capture_output=True,
        cwd=HERE.parent.parent,
    )
    (root / "report.html").unlink(missing_ok=True)  # written at close; nothing reads it
    trial = ts.create_trial(root)
    assert trial.problems == []
    prof = load_profiler_data(root)
    assert prof.problems == [] and prof.system and prof.has_steps
    assert not prof.operators.empty and not prof.python_stats.empty
    verdicts = ts.rules.evaluate(trial, _rules(), write=False, actions=False)
    assert not [v for v in verdicts if v.status is Status.ERROR]
    values = _read_values(trial)
    assert len(values) >= 9 and all(len(v) == 14 for v in values.values())
    assert sum(raw is not None for v in values.values() for raw, _r in v.values()) >= 5 * 14
    return Reference(
        root=root,
        values=values,
        steps=trial.steps(),
        samples={n: (a.timestamps.copy(), a.values.copy()) for n, a in prof.system.items()},
        framework_steps=sum(t.step_count for t in prof.framework.values()),
        operators=len(prof.operators),
        python_rows=len(prof.python_stats),
        statuses={v.rule: v.status for v in verdicts},
    )


# --- mutations -----------------------------------------------------------------------------------------------
def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def flip(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    for pos in (len(raw) // 3, len(raw) // 2, 2 * len(raw) // 3):
        raw[pos] ^= 0x5A
    path.write_bytes(bytes(raw))


def zero(path: Path) -> None:
    raw = bytearray(path.read_bytes())
    start = len(raw) // 4
    raw[start : start + max(16, len(raw) // 8)] = bytes(max(16, len(raw) // 8))
    path.write_bytes(bytes(raw[: len(raw)]))


def delete(path: Path) -> None:
    path.unlink()


def garbage(path: Path) -> None:
    with open(path, "ab") as fh:
        fh.write(b"\x00garbage\xff" * 13)


def shape(doc: Any) -> Callable[[Path], None]:
    def mutate(path: Path) -> None:
        path.write_text(json.dumps(doc), encoding="utf-8")

    mutate.__name__ = f"shape({json.dumps(doc)})"
    return mutate


BINARY = (truncate, flip, zero, delete, garbage)
CASES: list[tuple[str, Callable[[Path], None]]] = [
    *[("tensors/*/index-*.idx", m) for m in BINARY],
    *[("tensors/*/data-*.bin", m) for m in BINARY],
    *[("profiler/system/*/*.tsys", m) for m in BINARY],
    *[("profiler/framework/*/*.tfw", m) for m in BINARY],
    *[("tensors/*/collections.json", m) for m in (truncate, delete, garbage, shape(None), shape({"collections": []}))],
    *[("trainspect.json", m) for m in (truncate, delete, shape([1, 2]))],
    *[("workers/*.json", m) for m in (delete, shape(None))],
    *[("rules/verdicts.json", m) for m in (truncate, delete, shape({"verdicts": 5}), shape({"verdicts": [{}]}))],
    *[("profiler/detailed/*/operators_*.json", m) for m in (truncate, delete, shape([]), shape({"rows": {"a": 1}}))],
    *[("profiler/detailed/*/python_*.json", m) for m in (delete, shape(None), shape({"rows": [1, 2]}))],
    ("profiler/detailed/*/trace_*.json", delete),
    ("profiler/detailed/*/python_*.pstats", delete),
    ("training_job_end.ts", delete),
]
HARMLESS = {("tensors/*/data-*.bin", "garbage")}
"""Damage no reader can see: bytes appended to a data file that no index entry points to."""


# --- checks --------------------------------------------------------------------------------------------------
class Notes:
    """Every warning and note the readers gave about the damaged run."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self.caplog = caplog
        self.extra: list[str] = []

    def add(self, lines: Iterable[str]) -> None:
        self.extra.extend(lines)

    def text(self) -> str:
        logged = [r.getMessage() for r in self.caplog.records if r.levelno >= logging.WARNING]
        return "\n".join(logged + self.extra)

    def names(self, filename: str) -> bool:
        return filename in self.text()


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"))


def check_trial(run: Path, ref: Reference, notes: Notes) -> bool:
    """Values equal the originals or are absent; returns whether something was lost."""
    trial = ts.create_trial(run)
    values = _read_values(trial)
    notes.add(trial.problems)
    lost = set(trial.steps()) != set(ref.steps)
    for name, per_step in ref.values.items():
        for step, (ref_raw, ref_red) in per_step.items():
            raw, red = values.get(name, {}).get(step, (None, {}))
            if ref_raw is not None and raw is None or set(red) != set(ref_red):
                lost = True
            assert raw is None or ref_raw is not None and _equal(raw, ref_raw), f"wrong value of {name} at {step}"
            for key, value in red.items():
                assert value == ref_red[key] or np.isnan(value) and np.isnan(ref_red[key]), f"wrong {key} of {name}"
    assert set(values) <= set(ref.values), "a tensor that was never saved"
    if lost:
        assert trial.problems, "data was lost but the Trial names no problem"
    return lost


def check_profiler(run: Path, ref: Reference, notes: Notes) -> bool:
    data = load_profiler_data(run)
    notes.add(data.problems)
    lost = False
    for node, (times, rows) in ref.samples.items():
        arr = data.system.get(node)
        if arr is None or len(arr) < len(times):
            lost = True
        if arr is None:
            continue
        idx = np.searchsorted(times, arr.timestamps)
        assert np.all(idx < len(times)) and np.array_equal(times[idx], arr.timestamps), "a sample that never was"
        assert np.array_equal(arr.values, rows[idx], equal_nan=True), f"wrong system values of {node}"
    lost |= sum(t.step_count for t in data.framework.values()) < ref.framework_steps
    lost |= len(data.operators) < ref.operators or len(data.python_stats) < ref.python_rows
    if lost:
        assert data.problems, "profiler data was lost but no problem is named"
    return lost


def check_rules(run: Path, ref: Reference, notes: Notes) -> None:
    verdicts = ts.rules.evaluate(ts.create_trial(run), _rules(), write=False, actions=False)
    errors = [f"{v.rule}: {v.message}" for v in verdicts if v.status is Status.ERROR]
    assert not errors, errors
    for v in verdicts:
        if v.status is Status.NO_DATA and ref.statuses.get(v.rule) is not Status.NO_DATA:
            assert "damaged run directory" in v.message, f"{v.rule} lost its inputs silently: {v.message}"
            notes.add([v.message])


def check_report(run: Path, notes: Notes) -> None:
    ctx = ReportContext.load(run)
    html = render_report(ctx)
    assert "<html" in html.lower()
    for problem in ctx.problems:
        assert str(escape(problem)) in html, f"a problem not shown in the report: {problem}"
    notes.add(ctx.problems)


def check_plugin(logdir: Path, ref: Reference, notes: Notes) -> None:
    apps = TrainspectPlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return apps[environ["PATH_INFO"]](environ, start_response)

    client = wtest.Client(dispatch, wrappers.Response)
    rule = sorted(ref.statuses)[0]
    for route, params in (
        ("/runs", {}),
        ("/profiler", {"run": RUN}),
        ("/heatmap", {"run": RUN}),
        ("/timeseries", {"run": RUN}),
        ("/rules", {}),
        ("/rule", {"run": RUN, "rule": rule}),
    ):
        response = client.get(route, query_string=params)
        assert response.status_code in (200, 400, 404), (route, response.status_code, response.data[:300])
        body = json.loads(response.data)
        assert response.status_code == 200 or body.get("error"), (route, body)
        notes.add([str(body.get("error", ""))] + [str(p) for p in body.get("problems", [])])


@pytest.mark.parametrize(("pattern", "mutate"), CASES, ids=[f"{p}-{m.__name__}" for p, m in CASES])
def test_damaged_run_directory(
    pattern: str, mutate: Callable[[Path], None], reference: Reference, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run = tmp_path / RUN
    shutil.copytree(reference.root, run)
    (target,) = sorted(run.glob(pattern))
    mutate(target)
    caplog.set_level(logging.WARNING)
    notes = Notes(caplog)
    lost = check_trial(run, reference, notes)
    lost |= check_profiler(run, reference, notes)
    check_rules(run, reference, notes)
    check_report(run, notes)
    check_plugin(tmp_path, reference, notes)
    if (pattern, mutate.__name__) not in HARMLESS:  # a deleted file may be named by the folder it left empty
        named = notes.names(target.name) or mutate is delete and notes.names(str(target.parent.relative_to(tmp_path)))
        assert named, f"{target.name} was damaged (lost data: {lost}) but nothing names it"


def test_create_trial_refuses_a_file_and_a_directory_without_a_run(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("not a run")
    with pytest.raises(NotARunDirectory, match="notes.txt is a file, not a run directory"):
        ts.create_trial(path)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(NotARunDirectory, match=f"{empty} holds no run") as info:
        ts.create_trial(empty)
    assert isinstance(info.value, ValueError) and "\n" not in str(info.value)
