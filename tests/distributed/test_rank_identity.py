"""Where a hook's rank comes from: the process group, a launcher's variables, or nothing (issue 27, point 1)."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

import trainspect as ts
from trainspect.exceptions import RunDirectoryInUse
from trainspect.hooks.distributed import RankConflict, settle

_LAUNCH_VARS = (
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "TRAINSPECT_JOB_ID",
    "HOROVOD_RANK",
    "HOROVOD_SIZE",
    "HOROVOD_LOCAL_RANK",
    "HOROVOD_GLOO_RENDEZVOUS_ADDR",
    "HOROVOD_GLOO_RENDEZVOUS_PORT",
)


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _LAUNCH_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def one_rank_group(tmp_path: Path):  # type: ignore[no-untyped-def]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _train(hook: ts.torch.Hook, steps: int = 3) -> list[float]:
    model = torch.nn.Linear(3, 1)
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = model(torch.ones(2, 3)).pow(2).mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def test_a_plain_process_is_settled_at_its_first_step_as_a_single_process() -> None:
    assert settle(final=False) is None  # a process group may still come
    ident = settle(final=True)
    assert ident is not None and (ident.rank, ident.world_size, ident.source) == (0, 1, "single process")


def test_torchrun_variables_settle_at_once_and_every_rank_derives_one_job_id(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "abc")
    monkeypatch.setenv("WORLD_SIZE", "4")
    ids = set()
    for rank in range(4):
        monkeypatch.setenv("RANK", str(rank))
        ident = settle(final=False)
        assert ident is not None and (ident.rank, ident.world_size, ident.worker) == (rank, 4, f"worker_{rank}")
        ids.add(ident.job_id)
    assert len(ids) == 1


def test_launcher_variables_without_a_job_id_wait_for_the_process_group(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert settle(final=False) is None  # DeepSpeed's launcher: the ranks agree on a job id through the group
    ident = settle(final=True)
    assert ident is not None and (ident.rank, ident.source) == (1, "RANK/WORLD_SIZE")


def test_slurm_srun_variables_give_the_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in (("SLURM_PROCID", "3"), ("SLURM_NTASKS", "4"), ("SLURM_LOCALID", "1"), ("SLURM_JOB_ID", "77")):
        monkeypatch.setenv(name, value)
    ident = settle(final=True)
    assert ident is not None
    assert (ident.rank, ident.world_size, ident.local_rank, ident.source) == (3, 4, 1, "SLURM_PROCID/SLURM_NTASKS")


def test_horovodrun_variables_give_the_rank_and_a_job_id_per_rendezvous(monkeypatch: pytest.MonkeyPatch) -> None:
    # what horovodrun -np 2 --gloo set for rank 1 on this machine (horovod 0.28.1)
    for name, value in (
        ("HOROVOD_RANK", "1"),
        ("HOROVOD_SIZE", "2"),
        ("HOROVOD_LOCAL_RANK", "1"),
        ("HOROVOD_GLOO_RENDEZVOUS_ADDR", "127.0.0.1"),
        ("HOROVOD_GLOO_RENDEZVOUS_PORT", "13347"),
    ):
        monkeypatch.setenv(name, value)
    assert settle(final=False) is None  # no job id from the launcher: settled at the first step
    ident = settle(final=True)
    assert ident is not None and (ident.rank, ident.world_size, ident.source) == (1, 2, "HOROVOD_RANK")
    monkeypatch.setenv("HOROVOD_GLOO_RENDEZVOUS_PORT", "13348")  # another job
    other = settle(final=True)
    assert other is not None and other.job_id != ident.job_id


def test_the_process_group_is_authoritative(one_rank_group: None) -> None:
    ident = settle(final=False)
    assert ident is not None and (ident.rank, ident.world_size, ident.source) == (0, 1, "torch.distributed")


def test_ranks_that_disagree_are_refused_and_training_goes_on(
    one_rank_group: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("RANK", "1")  # stale: the process group says rank 0 of 1
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(RankConflict, match="torch.distributed says rank 0 of 1, RANK=1 WORLD_SIZE=2"):
        settle(final=False)
    hook = ts.torch.Hook(tmp_path / "run")
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        losses = _train(hook)
    hook.close()
    assert len(losses) == 3
    lines = [r.getMessage() for r in caplog.records if "records nothing" in r.getMessage()]
    assert len(lines) == 1 and "rank 0 of 1" in lines[0] and "RANK=1" in lines[0]
    assert not (tmp_path / "run" / "tensors").exists()


def test_two_processes_never_write_one_workers_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("TRAINSPECT_JOB_ID", "one-job")
    out = tmp_path / "run"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        first = ts.torch.Hook(out)
        _train(first, 1)  # worker_0 of job one-job, as a single process
        doc = (out / "workers" / "worker_0.json").read_text()
        (out / "workers" / "worker_0.json").write_text(
            doc.replace(f'"pid": {__import__("os").getpid()}', f'"pid": {holder.pid}')
        )
        second = ts.torch.Hook(out)  # the same job, the same worker, another (live) process
        with caplog.at_level(logging.WARNING, logger="trainspect"):
            _train(second, 2)
        second.close()
        message = next(r.getMessage() for r in caplog.records if "records nothing" in r.getMessage())
        assert f"worker_0 of {out} is already recorded by pid {holder.pid}" in message
        assert "rank 0 from single process" in message
        first.close()
    finally:
        holder.kill()
    assert ts.create_trial(out).steps() == [0]  # the first process's step only


def test_a_finished_run_of_the_same_job_is_not_joined(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRAINSPECT_JOB_ID", "job-a")
    with ts.torch.Hook(tmp_path / "run") as hook:
        _train(hook, 1)
    with pytest.raises(RunDirectoryInUse, match="finished run of this job"):
        ts.torch.Hook(tmp_path / "run")


def test_a_hook_built_before_its_process_group_takes_its_rank_from_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    hook = ts.torch.Hook(out)
    assert not out.exists() or not (out / "trainspect.json").exists()  # nothing claimed before the first step
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        _train(hook, 2)
        hook.close()
    finally:
        dist.destroy_process_group()
    doc = (out / "workers" / "worker_0.json").read_text()
    assert '"rank_source": "torch.distributed"' in doc


def test_saves_before_any_step_make_a_step_of_their_own(tmp_path: Path) -> None:
    with ts.torch.Hook(tmp_path / "run") as hook:
        hook.save_scalar("lr", 0.5)
    trial = ts.create_trial(tmp_path / "run")
    assert float(trial.tensor("scalar/lr").value(0)) == 0.5 and trial.job_ended


_THREAD_SCRIPT = """
import os, sys, threading, torch, trainspect as ts
def train():
    model = torch.nn.Linear(3, 1); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(sys.argv[1]); hook.register_module(model)
    for _ in range(5):
        opt.zero_grad(); model(torch.ones(2, 3)).pow(2).mean().backward(); opt.step()
thread = threading.Thread(target=train); thread.start(); thread.join()
deadline = __import__("time").monotonic() + 60
while not os.path.exists(os.path.join(sys.argv[1], "training_job_end.ts")) and __import__("time").monotonic() < deadline:
    __import__("time").sleep(0.05)
os._exit(0)  # as Ray ends its workers: killed, no exit handler runs
"""


def test_a_run_trained_in_a_thread_ends_when_the_thread_ends(tmp_path: Path) -> None:
    """Ray Train runs the training function in a thread of its worker, then kills the worker (one worker: no
    process group is destroyed first)."""
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-c", _THREAD_SCRIPT, str(out)], capture_output=True, text=True, timeout=120, check=False
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = ts.create_trial(out)
    assert trial.job_ended and trial.steps() == list(range(5))


@pytest.fixture
def unwrapped_destroy(monkeypatch: pytest.MonkeyPatch) -> object:
    """``torch.distributed``'s own ``destroy_process_group``, set back as if no hook had wrapped it (restored after)."""
    c10d = sys.modules["torch.distributed.distributed_c10d"]
    real = getattr(dist.destroy_process_group, "original", dist.destroy_process_group)
    monkeypatch.setattr(dist, "destroy_process_group", real)
    monkeypatch.setattr(c10d, "destroy_process_group", real)
    return real


def test_destroy_process_group_imported_by_name_is_wrapped_too(
    monkeypatch: pytest.MonkeyPatch, unwrapped_destroy: object
) -> None:
    """A module's own name for it, and the training function's globals (``mp.spawn`` runs ``main`` with globals that
    are not its module's), are pointed at the wrapper that closes the hooks first; another name is left alone."""
    import types

    from trainspect.hooks import distributed as d

    real = unwrapped_destroy
    module = types.ModuleType("user_teardown")
    module.destroy_process_group = real  # type: ignore[attr-defined]  # as `from torch.distributed import ...` does
    module.end_group = real  # type: ignore[attr-defined]  # another name: not found
    monkeypatch.setitem(sys.modules, "user_teardown", module)
    calls: list[str] = []
    space: dict[str, object] = {"destroy_process_group": real, "d": d, "calls": calls}
    exec("def train():\n    d.close_with_process_group(lambda: calls.append('closed'))\n", space)  # noqa: S102
    space["train"]()  # type: ignore[operator]
    wrapper = dist.destroy_process_group
    assert isinstance(wrapper, d._GroupEnd) and wrapper.original is real
    assert sys.modules["torch.distributed.distributed_c10d"].destroy_process_group is wrapper
    assert module.destroy_process_group is wrapper and space["destroy_process_group"] is wrapper
    assert module.end_group is real
    # no group here: the original's own error, after the callbacks
    with pytest.raises((AssertionError, ValueError, RuntimeError)):
        module.destroy_process_group()
    assert calls == ["closed"]


def test_a_later_run_rebinds_a_name_imported_after_the_wrapper_was_made(
    monkeypatch: pytest.MonkeyPatch, unwrapped_destroy: object
) -> None:
    """The second hook's run finds the original in its own training code, bound before (a runpy namespace)."""
    import types

    from trainspect.hooks import distributed as d

    d.close_with_process_group(lambda: None)  # the first run: the wrapper is made
    wrapper = dist.destroy_process_group
    late = types.ModuleType("late_teardown")
    late.destroy_process_group = unwrapped_destroy  # type: ignore[attr-defined]  # kept from before (not imported from dist now)
    monkeypatch.setitem(sys.modules, "late_teardown", late)
    d.close_with_process_group(lambda: None)
    assert dist.destroy_process_group is wrapper and late.destroy_process_group is wrapper
