"""How a job is accounted for (issue 29): its start, its training loader, its ending, and the rules that judge it.

Real trainings in subprocesses (a job's start depends on what else ran in its process) and ``trainspect run``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from trainspect.profiler import load_profiler_data
from trainspect.profiler.analysis import dataloader_statistics, job_statistics, training_loader
from trainspect.rules.counts import RuleCounts
from trainspect.rules.verdict import Status, read_verdicts
from trainspect.store.job_events import read_exit, read_stops

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

_ENV = {**os.environ, "OMP_NUM_THREADS": "1", "TRAINSPECT_TESTING": "1"}
_BIN = Path(sys.executable).parent


def _python(script: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    path = cwd / "script.py"
    path.write_text(textwrap.dedent(script))
    return subprocess.run(
        [sys.executable, str(path)], cwd=cwd, env=env or _ENV, capture_output=True, text=True, timeout=300
    )


def _trainspect(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    environ = {**(env or _ENV), "PATH": f"{_BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    environ.pop("TRAINSPECT_TESTING", None)  # the user's view: warnings, not re-raised internals
    return subprocess.run(
        [str(_BIN / "trainspect"), *args], cwd=cwd, env=environ, capture_output=True, text=True, timeout=300
    )


_TRAIN = """
import torch, trainspect as ts
from torch.utils.data import DataLoader, TensorDataset

def train(out, steps=40, lr=0.1, workers=0, batch=16, evaluate=False, rules=None):
    torch.manual_seed(0)
    ds = TensorDataset(torch.randn(steps * batch, 8), torch.randint(0, 2, (steps * batch,)))
    loader = DataLoader(ds, batch_size=batch, num_workers=workers)
    val = DataLoader(ds, batch_size=64, num_workers=0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    hook = ts.torch.Hook(out, profiler_config=ts.ProfilerConfig(), rules=rules)
    hook.register_module(model)
    for epoch in range(2):
        model.train()
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
        if evaluate:
            model.eval()
            with torch.no_grad():
                for x, y in val:
                    torch.nn.functional.cross_entropy(model(x), y)
    hook.close()
"""


_MID = """
            if epoch == 0 and mid is not None and not mid:
                import time; time.sleep(1.2)  # the framework recorder writes about once per second
                mid.extend(ts.rules.evaluate(out, [InputBottleneck()]))
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One process, several runs: two in a row, one with a validation loader, one stopped, one judged mid-run."""
    where = tmp_path_factory.mktemp("runs")
    script = _TRAIN.replace("rules=None):", "rules=None, mid=None):").replace(
        "            opt.zero_grad(); loss.backward(); opt.step()\n",
        "            opt.zero_grad(); loss.backward(); opt.step()\n" + _MID,
    ) + textwrap.dedent("""
        from trainspect.rules import ExplodingTensor
        from trainspect.rules.profiler import InputBottleneck
        train('first', steps=30)
        train('second', steps=30)
        train('loaders', steps=30, workers=2, batch=16, evaluate=True)
        MID = []
        train('mid', steps=40, mid=MID)
        print('MID', MID[0].status.value, MID[0].datapoints)
        try:
            train('stopped', steps=200, lr=1e6, rules=[ExplodingTensor(actions=["StopTraining"])])
        except ts.exceptions.TrainingStopped as exc:
            print("STOPPED", exc)
        import sys, time
        sys.ps1 = '>>> '  # from here on, an interactive session (a notebook kernel)
        before = time.time()
        train('nb', steps=5)
        print('BEFORE', before)
        """)
    done = _python(script, where)
    assert done.returncode == 0, done.stderr
    (where / "stdout.txt").write_text(done.stdout)
    return where


def test_a_second_run_in_one_process_starts_at_its_hook_not_at_the_process_start(runs: Path) -> None:
    tmp_path = runs
    first, second = load_profiler_data(tmp_path / "first"), load_profiler_data(tmp_path / "second")
    a, b = first.framework["worker_0"], second.framework["worker_0"]
    assert a.job_start == a.process_start  # a script's first job: its imports and set-up are initialization
    assert (a.extra["job_start_from"], b.extra["job_start_from"]) == ("process", "later run in the process")
    assert b.process_start == a.process_start and b.job_start is not None
    assert b.job_start >= first.end_time()  # the first run is not the second run's initialization
    stats = job_statistics(second)
    assert stats["start"] >= first.end_time()
    assert stats["before_job_s"] >= job_statistics(first)["duration_s"]  # kept as its own figure
    init = [
        v for v in read_verdicts(tmp_path / "second" / "rules" / "verdicts.json") if v.rule == "MaxInitializationTime"
    ][0]
    assert init.details["job_start"] >= first.end_time()


def test_in_an_interactive_session_the_job_starts_at_the_hook(runs: Path) -> None:
    before = float((runs / "stdout.txt").read_text().split("BEFORE")[1])
    tab = load_profiler_data(runs / "nb").framework["worker_0"]
    assert tab.extra["job_start_from"] == "interactive"
    assert tab.process_start is not None and tab.process_start < before
    assert tab.job_start is not None and tab.job_start >= before  # the kernel's idle time before is not the job's


def test_the_training_loader_is_the_one_the_train_steps_drew_from(runs: Path) -> None:
    tmp_path = runs / "loaders"
    data = load_profiler_data(tmp_path)
    assert data.framework["worker_0"].dataloader_workers == 0  # the validation loader ran last …
    assert training_loader(data) == {"num_workers": 2, "batch_size": 16}  # … the training loader fed TRAIN steps
    assert dataloader_statistics(data)["num_workers"].tolist() == [2]
    bottleneck = [v for v in read_verdicts(tmp_path / "rules" / "verdicts.json") if v.rule == "InputBottleneck"][0]
    assert bottleneck.details["worker_0"]["num_workers"] == 2
    assert "num_workers=2" in bottleneck.message


def test_the_closing_line_counts_tensor_and_profiler_rules_as_trainspect_rules_does(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        textwrap.dedent("""
        import torch
        torch.manual_seed(0)
        x, y = torch.randn(64, 8), torch.randint(0, 2, (64,))
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        opt = torch.optim.SGD(model.parameters(), lr=0.5, maximize=True)  # gradient ascent: the loss rises
        for step in range(80):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            opt.zero_grad(); loss.backward(); opt.step()
        """)
    )
    done = _trainspect("run", "--profile", "--out", "run", "--", "python", "train.py", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    verdicts = read_verdicts(tmp_path / "run" / "rules" / "verdicts.json")
    counts = RuleCounts.of(verdicts)
    assert "LossNotDecreasing" in counts.issues  # a tensor rule no hook ran live: judged at the end
    assert {"MaxInitializationTime", "OverallFrameworkMetrics"} <= set(counts.judged)  # and the profiler rules
    assert f"trainspect: {counts.line()}" in done.stderr
    assert "trainspect: LossNotDecreasing found issues" in done.stderr
    listed = _trainspect("rules", "run", cwd=tmp_path)
    assert listed.stdout.strip().splitlines()[-1] == counts.line()


def test_a_mid_run_evaluation_is_replaced_by_the_final_one(runs: Path) -> None:
    tmp_path = runs
    out = (runs / "stdout.txt").read_text()
    mid_status, mid_points = out.split("MID")[1].split()[:2]
    assert mid_status in ("InProgress", "IssuesFound", "NoData")  # not final: the run went on
    final = [v for v in read_verdicts(tmp_path / "mid" / "rules" / "verdicts.json") if v.rule == "InputBottleneck"][0]
    assert final.source == "report"  # evaluated again once the job ended
    assert final.status in (Status.NO_ISSUES_FOUND, Status.ISSUES_FOUND)
    assert final.datapoints > int(mid_points)  # over the whole run, not the first steps


def test_profiler_rules_are_judged_while_the_job_runs(tmp_path: Path) -> None:
    script = """
import time, torch, trainspect as ts
from torch.utils.data import DataLoader, Dataset
from trainspect.rules.verdict import read_verdicts

class Slow(Dataset):  # the input dominates every step cycle, however loaded the machine is
    def __len__(self): return 100000
    def __getitem__(self, i):
        time.sleep(0.003); return torch.randn(8), i % 2

model = torch.nn.Linear(8, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
hook = ts.torch.Hook("run", profiler_config=ts.ProfilerConfig())
hook.register_module(model)
seen, began = None, time.monotonic()
for x, y in DataLoader(Slow(), batch_size=4):
    loss = torch.nn.functional.cross_entropy(model(x), y); opt.zero_grad(); loss.backward(); opt.step()
    try:
        live = [v for v in read_verdicts("run/rules/verdicts.json") if v.rule == "InputBottleneck"]
    except Exception:
        live = []
    if live and live[0].status.value == "IssuesFound":
        seen = live[0]
        break
    if time.monotonic() - began > 120:
        break
print("LIVE", None if seen is None else (seen.source, seen.status.value))
hook.close()
"""
    done = _python(script, tmp_path, env={**_ENV, "TRAINSPECT_PROFILER_RULES_S": "0.3"})
    assert done.returncode == 0, done.stderr
    assert "LIVE ('live', 'IssuesFound')" in done.stdout  # seen during training, before the hook closed


def test_trainspect_run_refuses_a_directory_that_holds_another_run(tmp_path: Path) -> None:
    (tmp_path / "train.py").write_text(
        "import pathlib, torch\npathlib.Path('ran').touch()\n"
        "m = torch.nn.Linear(2, 1)\nm(torch.randn(3, 2)).sum().backward()\n"
    )
    first = _trainspect("run", "--profile", "--out", "run", "--", "python", "train.py", cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    (tmp_path / "ran").unlink()
    manifest = (tmp_path / "run" / "trainspect.json").read_text()
    again = _trainspect("run", "--out", "run", "--", "python", "train.py", cwd=tmp_path)
    assert again.returncode == 2
    lines = again.stderr.strip().splitlines()
    assert len(lines) == 1 and "already holds another run" in lines[0] and "choose a new --out" in lines[0]
    assert not (tmp_path / "ran").exists()  # refused before the script started
    assert (tmp_path / "run" / "trainspect.json").read_text() == manifest
    assert "report" not in again.stderr


def test_trainspect_run_records_how_the_script_ended(tmp_path: Path) -> None:
    (tmp_path / "fail.py").write_text("import torch\nraise SystemExit(3)\n")
    done = _trainspect("run", "--profile", "--out", "failed", "--", "python", "fail.py", cwd=tmp_path)
    assert done.returncode == 3
    assert "failed with exit status 3" in done.stderr
    ended = read_exit(tmp_path / "failed")
    assert ended is not None and ended["returncode"] == 3 and ended["steps_recorded"] is False


def test_a_stop_by_a_rule_is_recorded(runs: Path) -> None:
    assert "STOPPED" in (runs / "stdout.txt").read_text()
    stops = read_stops(runs / "stopped")
    assert [s["rule"] for s in stops] == ["ExplodingTensor"]
    exploding = [v for v in read_verdicts(runs / "stopped" / "rules" / "verdicts.json") if v.rule == "ExplodingTensor"][
        0
    ]
    assert stops[0]["step"] is not None and stops[0]["step"] >= exploding.first_trigger_step
    assert json.loads((runs / "stopped" / "rules" / "stopped.json").read_text())["stops"][0]["worker"] == "worker_0"
