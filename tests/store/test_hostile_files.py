"""Issue 30 (bullet 5): a run directory is a file a user may be handed; no reader can be made to hang or blow up.

One small real run is recorded once; each case puts, on a copy, a FIFO, a symlink to ``/dev/zero`` or a
50,000-deep JSON document in place of one JSON file, then reads it through the Trial, ``trainspect info``,
``rules`` and ``report`` (each in a child process with a time limit and a memory limit: a hang or a
``MemoryError`` fails). The TensorBoard routes answer JSON 400 for ids that are not ASCII numbers, and 2,000 junk
trace files give one aggregated warning line.

The CLI commands run in children forked from one driver process that imported trainspect once (a fresh
interpreter per command would take most of this file's time budget); a few run as real ``trainspect`` processes.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import pytest

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
TRAINSPECT = Path(sys.executable).with_name("trainspect")
FILES = ["trainspect.json", "rules/verdicts.json", "workers/worker_0.json", "tensors/worker_0/collections.json"]
COMMANDS = ["info", "rules", "report"]
READS = {("info", "rules/verdicts.json"): False}
"""(command, file) pairs where the command does not read that file: it need only finish."""
MEMORY_LIMIT = 3 << 30
CHILD_TIMEOUT = 30


# --- the driver: ``python test_hostile_files.py CASES.json`` ------------------------------------------------
def _child(argv: list[str], out: str) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    fd = os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    from trainspect.cli import main

    try:
        code = main(argv)
    except BaseException as exc:  # noqa: BLE001 - reported to the test, which fails on it
        print(f"UNCAUGHT {type(exc).__name__}: {exc}", flush=True)
        code = 99
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code if isinstance(code, int) else 0)


def _wait(pid: int, timeout: float) -> int | str:
    import time

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.02)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return "hang"


def _warm_up(argvs: list[list[str]]) -> None:
    """Run the commands once in this process (on an intact copy) so that the forked children import nothing."""
    from trainspect.cli import main

    saved = os.dup(1), os.dup(2)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    try:
        for argv in argvs:
            main(argv)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)


def drive(cases_file: str) -> None:
    """Run each ``[argv, output file]`` of the cases file in a forked child; print ``{output: exit code}``."""
    spec = json.loads(Path(cases_file).read_text())
    _warm_up(spec["warm_up"])
    results: dict[str, int | str] = {}
    for argv, out in spec["cases"]:
        pid = os.fork()
        if pid == 0:
            _child(argv, out)
        results[out] = _wait(pid, CHILD_TIMEOUT)
    print(json.dumps(results))


if __name__ == "__main__":
    drive(sys.argv[1])
    sys.exit(0)


# --- fixtures and helpers ------------------------------------------------------------------------------------
from tensorboard.plugins import base_plugin  # noqa: E402
from werkzeug import test as wtest  # noqa: E402
from werkzeug import wrappers  # noqa: E402

import trainspect as ts  # noqa: E402 - the driver above needs only the CLI
from trainspect.store.safe_files import loads_bounded, read_capped  # noqa: E402
from trainspect.tb_plugin.plugin import TrainspectPlugin  # noqa: E402

DEEP = "[" * 50_000 + "]" * 50_000


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("hostile") / "template"
    subprocess.run(
        [sys.executable, str(HERE / "fuzztrain.py"), str(root)], check=True, timeout=240, capture_output=True, cwd=ROOT
    )
    (root / "report.html").unlink(missing_ok=True)
    return root


def fifo(path: Path) -> None:
    os.mkfifo(path)


def zero(path: Path) -> None:
    path.symlink_to("/dev/zero")


def deep(path: Path) -> None:
    path.write_text(DEEP, encoding="utf-8")


KINDS: dict[str, Callable[[Path], None]] = {"fifo": fifo, "zero": zero, "deep": deep}


def hostile_copy(template: Path, dest: Path, rel: str, kind: str) -> Path:
    shutil.copytree(template, dest, symlinks=True)
    target = dest / rel
    target.unlink()
    KINDS[kind](target)
    return dest


def run_driver(template: Path, cases: list[tuple[list[str], Path]], tmp: Path) -> dict[str, int | str]:
    spec = tmp / "cases.json"
    warm = tmp / "warm_up"
    shutil.copytree(template, warm)
    doc = {"warm_up": [[cmd, str(warm)] for cmd in COMMANDS], "cases": [[argv, str(out)] for argv, out in cases]}
    spec.write_text(json.dumps(doc))
    env = {**os.environ, "TRAINSPECT_TESTING": "1", "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [sys.executable, __file__, str(spec)],
        capture_output=True,
        text=True,
        timeout=60 + 3 * len(cases),
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def assert_clean(text: str, where: str) -> None:
    for bad in ("Traceback", "MemoryError", "RecursionError", "UNCAUGHT"):
        assert bad not in text, f"{where}: {bad} in:\n{text[-3000:]}"


# --- the CLI and the Trial on hostile copies ----------------------------------------------------------------
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_cli_commands_finish_and_name_the_file(kind: str, template: Path, tmp_path: Path) -> None:
    cases: list[tuple[list[str], Path]] = []
    for i, rel in enumerate(FILES):
        for cmd in COMMANDS:
            run = hostile_copy(template, tmp_path / f"{i}_{cmd}" / "run", rel, kind)
            cases.append(([cmd, str(run)], tmp_path / f"{i}_{cmd}.out"))
    results = run_driver(template, cases, tmp_path)
    for (argv, out), rel in zip(cases, [r for r in FILES for _c in COMMANDS], strict=True):
        text = out.read_text(errors="replace")
        where = f"{kind} {rel} trainspect {argv[0]}"
        assert results[str(out)] != "hang", f"{where} hung"
        assert results[str(out)] in (0, 1, 2), f"{where}: exit {results[str(out)]}\n{text[-2000:]}"
        assert_clean(text, where)
        if READS.get((argv[0], rel), True):
            named = [line for line in text.splitlines() if Path(rel).name in line and "report:" not in line]
            assert named, f"{where}: nothing names {rel}:\n{text[-2000:]}"


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_trial_names_the_file_once(kind: str, template: Path, tmp_path: Path) -> None:
    for i, rel in enumerate(FILES):
        run = hostile_copy(template, tmp_path / str(i), rel, kind)
        trial = ts.create_trial(run)
        assert len(trial.steps()) == 14
        assert trial.collections()
        if rel != "rules/verdicts.json":  # the Trial does not read the verdicts
            named = [p for p in trial.problems if str(run / rel) in p]
            assert len(named) == 1, (rel, trial.problems)
            assert ("nested deeper" if kind == "deep" else "not a regular file") in named[0]


def test_real_trainspect_processes_finish_on_a_fifo(template: Path, tmp_path: Path) -> None:
    """The console script itself (not the forked driver): a FIFO manifest never blocks it."""
    env = {**os.environ, "TRAINSPECT_TESTING": "1", "OMP_NUM_THREADS": "1"}
    procs = []
    for cmd in COMMANDS:
        run = hostile_copy(template, tmp_path / cmd, "trainspect.json", "fifo")
        procs.append(
            subprocess.Popen(
                [str(TRAINSPECT), cmd, str(run)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
            )
        )
    for cmd, proc in zip(COMMANDS, procs, strict=True):
        try:
            out, _ = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            pytest.fail(f"trainspect {cmd} hung on a FIFO trainspect.json")
        assert_clean(out, cmd)
        lines = [line for line in out.splitlines() if "trainspect.json" in line and "FIFO" in line]
        assert lines, out


# --- the reading primitives ------------------------------------------------------------------------------------
def test_safe_reads(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OSError, match="is a FIFO"):
        read_capped(tmp_path / "pipe")
    (tmp_path / "zero").symlink_to("/dev/zero")
    with pytest.raises(OSError, match="character device"):
        read_capped(tmp_path / "zero")
    with pytest.raises(OSError, match="directory"):
        read_capped(tmp_path)
    (tmp_path / "big").write_bytes(b" " * 100)
    with pytest.raises(OSError, match="over the 10-byte limit"):
        read_capped(tmp_path / "big", cap=10)
    with pytest.raises(ValueError, match="nested deeper than 512"):
        loads_bounded(DEEP)
    deep_in_string = json.dumps(["[" * 5000, {"a": "{" * 5000}])
    assert loads_bounded(deep_in_string)[1]["a"] == "{" * 5000  # brackets inside strings do not count
    assert loads_bounded("[" * 500 + "]" * 500) == loads_bounded("[" * 500 + "]" * 500)


# --- the TensorBoard routes ---------------------------------------------------------------------------------------
def _client(logdir: Path) -> wtest.Client:
    apps = TrainspectPlugin(base_plugin.TBContext(logdir=str(logdir))).get_plugin_apps()

    def dispatch(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        return apps[environ["PATH_INFO"]](environ, start_response)

    return wtest.Client(dispatch, wrappers.Response)


@pytest.mark.parametrize("bad", ["²", "①", "٣", "9" * 5000, "-1", "1e3", " 1", ""])
def test_tb_trace_ids_that_are_not_ascii_numbers_give_json_400(bad: str, template: Path, tmp_path: Path) -> None:
    shutil.copytree(template, tmp_path / "run")
    client = _client(tmp_path)
    response = client.get("/trace", query_string={"run": "run", "id": bad})
    assert response.status_code == 400, (bad, response.status_code, response.data[:300])
    assert "error" in json.loads(response.data)
    assert client.get("/trace", query_string={"run": "run", "id": "0"}).status_code == 200


@pytest.mark.parametrize("bad", ["²", "①", "9" * 5000])
def test_tb_card_arguments_that_are_not_numbers_give_json_400(bad: str, template: Path, tmp_path: Path) -> None:
    shutil.copytree(template, tmp_path / "run")
    client = _client(tmp_path)
    cards = json.loads(client.get("/cards").data)["cards"]
    numeric = [(c["id"], a["name"]) for c in cards for a in c["args"] if a["type"] in ("integer", "number")]
    assert numeric
    for card, arg in numeric:
        response = client.get(f"/{card}", query_string={"run": "run", arg: bad})
        assert response.status_code == 400, (card, arg, response.status_code, response.data[:300])
        assert "error" in json.loads(response.data)


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_tb_routes_on_hostile_files_answer_json(kind: str, template: Path, tmp_path: Path) -> None:
    for i, rel in enumerate(FILES):
        hostile_copy(template, tmp_path / f"log{i}" / "run", rel, kind)
        client = _client(tmp_path / f"log{i}")
        for route, params in (
            ("/runs", {}),
            ("/profiler", {"run": "run"}),
            ("/rules", {}),
            ("/rule", {"run": "run", "rule": "LossNotDecreasing"}),
        ):
            response = client.get(route, query_string=params)
            assert response.status_code in (200, 400, 404), (kind, rel, route, response.data[:300])
            json.loads(response.data)


def test_tb_unexpected_errors_are_json_500(template: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(template, tmp_path / "run")
    client = _client(tmp_path)

    def boom(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("boom")

    monkeypatch.setattr("trainspect.tb_plugin.plugin.find_trace", boom)
    response = client.get("/trace", query_string={"run": "run", "id": "0"})
    assert response.status_code == 500 and "RuntimeError" in json.loads(response.data)["error"]
    assert b"Traceback" not in response.data


# --- many junk trace files ------------------------------------------------------------------------------------------
def test_junk_trace_files_give_one_aggregated_warning(template: Path, tmp_path: Path) -> None:
    sm = tmp_path / "sagemaker"
    pevents = sm / "framework" / "pevents" / "2026120100"
    pevents.mkdir(parents=True)
    run = tmp_path / "run"
    shutil.copytree(template, run)
    detailed = run / "profiler" / "detailed" / "worker_0"
    for i in range(2000):
        (pevents / f"{1000 + i}_algo-1_pythontimeline.json").write_text("junk{")
        (detailed / f"trace_{100 + i}-{101 + i}.json").write_text("junk{")
    cases = [(["report", str(sm)], tmp_path / "sm.out"), (["report", str(run)], tmp_path / "run.out")]
    results = run_driver(template, cases, tmp_path)
    for argv, out in cases:
        text = out.read_text(errors="replace")
        assert results[str(out)] in (0, 1, 2), text[-2000:]
        assert_clean(text, argv[1])
        lines = [ln for ln in text.splitlines() if ("trace" in ln or "pevents" in ln) and not ln.startswith("report:")]
        assert len(lines) == 1 and "2,000" in lines[0], text[-3000:]
