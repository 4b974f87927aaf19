"""Distributed jobs: torchrun ranks (gloo), simulated nodes, a killed rank, two jobs on one directory."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _support.package import PACKAGE_ROOT

import trainspect as ts
from trainspect.exceptions import RunDirectoryInUse

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def _torchrun(
    args: list[str], env: dict[str, str] | None = None, timeout: int = 300
) -> subprocess.CompletedProcess[str]:
    base = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
    }
    return subprocess.run(
        [str(BIN / "torchrun"), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**base, **(env or {})},
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_two_ranks_write_one_run_directory(tmp_path: Path) -> None:
    out = tmp_path / "ddp2"
    proc = _torchrun(
        [
            "--standalone",
            "--nproc_per_node",
            "2",
            "examples/ddp_train.py",
            "--out",
            str(out),
            "--steps",
            "12",
            "--profile",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = ts.create_trial(out)
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps() == list(range(12)) and trial.incomplete_steps() == {}
    loss = trial.tensor("CrossEntropyLoss_output_0")
    assert loss.workers(0) == ["worker_0", "worker_1"]
    assert loss.value(0, worker="worker_0") != loss.value(0, worker="worker_1")  # each rank its own batch
    manifest = json.loads((out / "trainspect.json").read_text())
    assert manifest["world_size"] == 2
    assert sorted(p.name for p in (out / "profiler" / "framework").iterdir()) == ["worker_0", "worker_1"]
    assert len(list((out / "profiler" / "system").iterdir())) == 1  # one monitor per node
    assert (out / "training_job_end.ts").exists()
    assert list((out / "tb_workers" / "worker_1").glob("events.out.tfevents.*"))


def test_four_ranks_with_include_workers_one(tmp_path: Path) -> None:
    out = tmp_path / "ddp4"
    proc = _torchrun(
        [
            "--standalone",
            "--nproc_per_node",
            "4",
            "examples/ddp_train.py",
            "--out",
            str(out),
            "--steps",
            "6",
            "--include-workers",
            "one",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = ts.create_trial(out)
    assert trial.workers() == ["worker_0"]
    assert trial.steps() == list(range(6))
    workers = sorted(p.stem for p in (out / "workers").glob("*.json"))
    assert workers == ["worker_0", "worker_1", "worker_2", "worker_3"]
    assert (out / "training_job_end.ts").exists()


def test_two_simulated_nodes_share_one_directory(tmp_path: Path) -> None:
    out = tmp_path / "nodes"
    port = _free_port()
    common = [
        "--nnodes",
        "2",
        "--nproc_per_node",
        "1",
        "--rdzv-backend",
        "c10d",
        "--rdzv-endpoint",
        f"127.0.0.1:{port}",
        "--rdzv-id",
        "twonodes",
    ]
    script = ["examples/ddp_train.py", "--out", str(out), "--steps", "8", "--profile"]
    base = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
    }
    procs = [
        subprocess.Popen(
            [str(BIN / "torchrun"), *common, "--node_rank", str(i), *script],
            cwd=ROOT,
            env={**base, "TRAINSPECT_NODE_ID": f"node{i}"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(2)
    ]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-3000:]
    trial = ts.create_trial(out)
    assert trial.workers() == ["worker_0", "worker_1"]
    assert sorted(p.name for p in (out / "profiler" / "system").iterdir()) == ["node0", "node1"]
    nodes = {json.loads(p.read_text())["node"] for p in (out / "workers").glob("*.json")}
    assert nodes == {"node0", "node1"}
    assert trial.steps() == list(range(8))


_RANK_SCRIPT = textwrap.dedent("""
    import os, signal, sys, torch, trainspect as ts
    rank, steps = int(os.environ["RANK"]), int(sys.argv[2])
    torch.manual_seed(rank)
    model = torch.nn.Linear(4, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(sys.argv[1], include_workers="all")
    hook.register_module(model); hook.register_loss(loss := torch.nn.MSELoss())
    for step in range(steps):
        opt.zero_grad(); loss(model(torch.randn(8, 4)), torch.zeros(8, 2)).backward(); opt.step()
        if rank == 1 and step == 9:
            import time; time.sleep(1.2)   # let the writer flush, then die hard
            os.kill(os.getpid(), signal.SIGKILL)
    hook.close()
""")


def _two_ranks(script: Path, source: str, args: list[str], env: dict[str, str]) -> list[subprocess.Popen[str]]:
    """Ranks 0 and 1 of a two-rank job running ``source`` (``RANK``/``WORLD_SIZE`` set, as a launcher sets them)."""
    script.write_text(source)
    base = {"PATH": f"{BIN}:/usr/bin:/bin", "WORLD_SIZE": "2", "OMP_NUM_THREADS": "1", "PYTHONPATH": str(PACKAGE_ROOT)}
    return [
        subprocess.Popen(
            [sys.executable, str(script), *args],
            env={**base, **env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for r in range(2)
    ]


def test_a_killed_rank_leaves_a_readable_run_that_names_the_missing_worker(tmp_path: Path) -> None:
    out = tmp_path / "killed"
    procs = _two_ranks(tmp_path / "rank.py", _RANK_SCRIPT, [str(out), "30"], {"TRAINSPECT_JOB_ID": "killed-job"})
    codes = [p.wait(timeout=240) for p in procs]
    assert codes[0] == 0 and codes[1] == -9
    trial = ts.create_trial(out)
    assert not trial.job_ended  # the dead rank never finished: no end marker
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps() == list(range(10))  # complete steps only
    assert trial.steps(show_incomplete_steps=True) == list(range(30))
    missing = trial.incomplete_steps()
    assert sorted(missing) == list(range(10, 30))
    assert set(map(tuple, missing.values())) == {("worker_1",)}
    loss = trial.tensor("MSELoss_output_0")
    assert loss.value(29, worker="worker_0").shape == ()
    (verdict,) = ts.rules.evaluate(trial, [ts.rules.ExplodingTensor()], write=False)
    assert "worker_1 did not write 20 step(s) (10-29)" in verdict.message
    assert verdict.details["missing_workers"] == {"worker_1": 20}
    assert verdict.datapoints == 10


_GROUP_END_SCRIPT = textwrap.dedent("""
    import os, sys, torch, torch.distributed as dist, trainspect as ts
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = torch.nn.Linear(4, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(sys.argv[1], include_workers="all")
    hook.register_module(model); hook.register_loss(loss := torch.nn.MSELoss())
    for step in range(8):
        opt.zero_grad(); loss(model(torch.randn(8, 4)), torch.zeros(8, 2)).backward(); opt.step()
    dist.destroy_process_group()
    os._exit(0)  # as Ray Train kills its workers once training returns: no exit handler runs, no hook.close()
""")


def test_ranks_killed_right_after_destroying_their_process_group_end_the_run(tmp_path: Path) -> None:
    script = tmp_path / "group_end.py"
    script.write_text(_GROUP_END_SCRIPT)
    out = tmp_path / "group-end"
    proc = _torchrun(["--standalone", "--nproc_per_node", "2", str(script), str(out)])
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = ts.create_trial(out)
    assert trial.job_ended  # each rank's hook closed with its group: end marker and both manifests
    assert trial.workers() == ["worker_0", "worker_1"]
    assert trial.steps() == list(range(8)) and trial.incomplete_steps() == {}


_LATE_RANK_SCRIPT = textwrap.dedent("""
    import os, sys, time, torch, trainspect as ts
    rank = int(os.environ["RANK"])
    model = torch.nn.Linear(4, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    profiler = ts.ProfilerConfig(system_monitor_interval_millis=100)
    hook = ts.torch.Hook(sys.argv[1], rules=[ts.rules.LossNotDecreasing()], profiler_config=profiler)
    hook.register_module(model); hook.register_loss(loss := torch.nn.MSELoss())
    for step in range(6):
        opt.zero_grad(); loss(model(torch.randn(8, 4)), torch.zeros(8, 2)).backward(); opt.step()
    if rank == 1:
        time.sleep(3.0)  # the other rank finishes later (its evaluation, its checkpoint)
    hook.close()
""")


def test_the_chief_reports_on_the_whole_job_once_the_other_ranks_ended(tmp_path: Path) -> None:
    out = tmp_path / "late"
    env = {"TRAINSPECT_JOB_ID": "late-rank-job", "TRAINSPECT_TESTING": "1"}
    procs = _two_ranks(tmp_path / "late_rank.py", _LATE_RANK_SCRIPT, [str(out)], env)
    results = [p.communicate(timeout=240) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], results[0][1][-2000:] + results[1][1][-2000:]
    assert (out / "training_job_end.ts").exists()
    html = (out / "report.html").read_text()  # the chief's, written when it closed
    assert "worker_1" in html and "The job has not ended" not in html  # it waited for rank 1 to end


def test_a_second_job_on_the_same_directory_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "one_dir"
    monkeypatch.setenv("TRAINSPECT_JOB_ID", "job-a")
    with ts.torch.Hook(out) as hook:
        hook.save_scalar("x", 1.0)
    before = sorted(p.name for p in out.rglob("*"))
    monkeypatch.setenv("TRAINSPECT_JOB_ID", "job-b")
    with pytest.raises(RunDirectoryInUse, match="another job"):
        ts.torch.Hook(out)
    assert sorted(p.name for p in out.rglob("*")) == before
