"""Every rank of a job launched by mp.spawn, Lightning (subprocess and spawn launchers), accelerate and Ray Train.

Each job runs for real on CPU/gloo (2 ranks); each rank writes the losses it computed, and the test compares them
with what trainspect recorded for that rank's worker. Rows of issue 27's table: a hook created before the Trainer
(training hung), in ``Callback.setup`` (both ranks wrote worker_0), under ``trainspect run`` (one rank recorded),
``mp.spawn`` with a hook per rank (exit 1), Ray Train (the run never ended; a relative out_dir landed in Ray's
session directory).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import psutil
import pytest
from _support.package import PACKAGE_ROOT

import trainspect as ts

ROOT = Path(__file__).resolve().parents[2]
SCRIPTS = Path(__file__).parent / "scripts"
BIN = Path(sys.executable).parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(
    cmd: list[str],
    cwd: Path,
    under_trainspect: Path | None = None,
    extra: dict[str, str] | None = None,
    timeout: int = 420,
) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PATH": f"{BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
        "PWD": str(cwd),
        **(extra or {}),
    }
    env.pop("TRAINSPECT_JOB_ID", None)
    if under_trainspect is not None:
        config = cwd / "config.json"
        config.write_text(json.dumps({"HookParameters": {"include_workers": "all"}}))
        cmd = [str(BIN / "trainspect"), "run", "--out", str(under_trainspect), "--config", str(config), "--", *cmd]
    env["PYTHONFAULTHANDLER"] = "1"  # a job stopped at the timeout prints every thread's stack (below)
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        for child in [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]:
            with contextlib.suppress(psutil.Error):
                child.send_signal(signal.SIGABRT)  # faulthandler dumps each process's threads, then it dies
        out, err = proc.communicate(timeout=60)
        pytest.fail(f"the job did not end in {timeout} s; its stacks:\n{err[-20000:]}\n{out[-3000:]}")
    assert proc.returncode == 0, (out[-3000:], err[-6000:])
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def _check_every_rank(out: Path, expected: Path, world: int = 2, loss: str = "loss") -> ts.Trial:
    """Every rank is its own worker, recorded its own losses, and the job ended."""
    trial = ts.create_trial(out)
    workers = [f"worker_{r}" for r in range(world)]
    assert trial.workers() == workers
    assert trial.job_ended, "the last rank to close writes the end marker"
    manifest = json.loads((out / "trainspect.json").read_text())
    assert manifest["world_size"] == world
    for rank, worker in enumerate(workers):
        doc = json.loads((out / "workers" / f"{worker}.json").read_text())
        assert (doc["rank"], doc["world_size"], doc["end_time"] is not None) == (rank, world, True)
        want = json.loads((expected / f"rank{rank}.json").read_text())
        tensor = trial.tensor(loss)
        got = [float(tensor.value(s, mode=ts.modes.TRAIN, worker=worker)) for s in trial.steps(mode=ts.modes.TRAIN)]
        np.testing.assert_allclose(got, want, rtol=1e-6)
    losses = [json.loads((expected / f"rank{r}.json").read_text()) for r in range(world)]
    assert losses[0] != losses[1]  # each rank trained on its own batches: a mix-up would show
    return trial


@pytest.mark.parametrize("hook", ["after-init", "before-init", "inner", "parent", "trainspect run"])
def test_mp_spawn_records_every_rank(tmp_path: Path, hook: str) -> None:
    """Each way of making the hook. ``inner`` (the model registered before DDP wraps it) and ``parent`` (registered in
    the parent, handed to mp.spawn) hung a rank in gloo's teardown in 2-5 runs of 8 while the script's
    ``destroy_process_group``, imported by name, did not close the hook first (docs/distributed.md)."""
    out, expected = tmp_path / "run", tmp_path / "expected"
    expected.mkdir()
    cmd = [
        sys.executable,
        str(SCRIPTS / "spawn_ddp.py"),
        str(out),
        str(expected),
        "--port",
        str(_free_port()),
        "--hook",
        "none" if hook == "trainspect run" else hook,
    ]
    _run(cmd, tmp_path, under_trainspect=out if hook == "trainspect run" else None)
    trial = _check_every_rank(out, expected)
    assert trial.steps() == list(range(8))
    sources = {json.loads(p.read_text())["rank_source"] for p in (out / "workers").glob("*.json")}
    assert sources == {"torch.distributed"}


@pytest.mark.parametrize("end", ["killed", "killed-by-name"])
def test_a_rank_killed_after_its_process_group_ended_still_ends_the_run(tmp_path: Path, end: str) -> None:
    """Ray Train destroys the process group, then kills its workers (no exit handler runs): the run still ends.

    ``killed-by-name``: through ``destroy_process_group`` imported by name before the hook was made (the tutorial's
    ``from torch.distributed import destroy_process_group``), which the hook rebinds in the script's namespace.
    """
    out, expected = tmp_path / "run", tmp_path / "expected"
    expected.mkdir()
    cmd = [
        sys.executable,
        str(SCRIPTS / "spawn_ddp.py"),
        str(out),
        str(expected),
        "--port",
        str(_free_port()),
        "--end",
        end,
    ]
    _run(cmd, tmp_path)
    _check_every_rank(out, expected)


# a hook built before the Trainer, in Callback.setup (on the spawned strategy, the harder case), or none
_LIGHTNING = [
    ("ddp", "before-trainer"),
    ("ddp", "trainspect run"),
    ("ddp_spawn", "callback"),
    ("ddp_spawn", "trainspect run"),
]


@pytest.mark.parametrize(
    ("strategy", "hook"), [*_LIGHTNING, ("ddp_fork", "before-trainer"), ("ddp_spawn", "before-trainer")]
)
def test_lightning_ddp_records_every_rank(tmp_path: Path, strategy: str, hook: str) -> None:
    out, expected = tmp_path / "run", tmp_path / "expected"
    expected.mkdir()
    cmd = [
        sys.executable,
        str(SCRIPTS / "lightning_ddp.py"),
        str(out),
        str(expected),
        "--strategy",
        strategy,
        "--hook",
        "none" if hook == "trainspect run" else hook,
    ]
    _run(cmd, tmp_path, under_trainspect=out if hook == "trainspect run" else None)
    trial = _check_every_rank(out, expected)
    assert len(trial.steps(mode=ts.modes.TRAIN)) == 6  # 96 samples, batches of 8, split over 2 ranks


@pytest.mark.parametrize("hook", ["manual", "trainspect run"])
def test_accelerate_launch_records_every_process(tmp_path: Path, hook: str) -> None:
    out, expected = tmp_path / "run", tmp_path / "expected"
    expected.mkdir()
    cmd = [
        str(BIN / "accelerate"),
        "launch",
        "--multi_gpu",
        "--num_processes",
        "2",
        "--num_machines",
        "1",
        "--mixed_precision",
        "no",
        "--dynamo_backend",
        "no",
        "--main_process_port",
        str(_free_port()),
        str(SCRIPTS / "accelerate_train.py"),
        str(out),
        str(expected),
    ] + (["--hook"] if hook == "manual" else [])
    _run(cmd, tmp_path, under_trainspect=out if hook == "trainspect run" else None, extra={"ACCELERATE_USE_CPU": "1"})
    _check_every_rank(out, expected)


@pytest.mark.slow
@pytest.mark.parametrize("hook", ["autolog, relative out_dir", "trainspect run"])
def test_ray_train_records_every_worker_and_ends(tmp_path: Path, hook: str) -> None:
    expected = tmp_path / "expected"
    expected.mkdir()
    autolog = hook.startswith("autolog")
    target = Path("runs/ray") if autolog else tmp_path / "run"
    cmd = [sys.executable, str(SCRIPTS / "ray_train.py"), str(target), str(expected)] + (["--autolog"] * autolog)
    _run(cmd, tmp_path, under_trainspect=None if autolog else target, extra={"RAY_USAGE_STATS_ENABLED": "0"})
    out = tmp_path / target  # a relative out_dir is taken from where the job started, not Ray's session directory
    trial = _check_every_rank(out, expected)
    assert trial.steps() == list(range(10))
