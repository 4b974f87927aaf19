"""Tensor rules judge every recorded worker (issue 27, point 4): the verdict names the worker and its step.

Synthetic runs of four workers written through the store's writer, the live runners of four ranks sharing one
verdict record, and one real ``torchrun`` job of four ranks where rank 3 feeds a NaN at step 12.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import synthetic_run
from _support.package import PACKAGE_ROOT
from rules_synth import record, tensor, write_run, write_workers_run

import trainspect as ts
from trainspect.rules import (
    ExplodingTensor,
    LiveRuleRunner,
    LossNotDecreasing,
    Status,
    VanishingGradient,
    Verdict,
    WeightUpdateRatio,
    evaluate,
)
from trainspect.rules.record import read_record
from trainspect.rules.verdict import read_verdicts
from trainspect.rules.worker_verdicts import combine_workers, merge_current
from trainspect.store.layout import RunLayout

WORKERS = [f"worker_{r}" for r in range(4)]
LOSS, GRAD, WEIGHT = "CrossEntropyLoss_output_0", "gradient/Net_fc.weight", "Net_fc.weight"


def rank_records(
    worker: str, n: int = 30, nan_at: int | None = None, spread_at: int | None = None, stall_from: int | None = None
) -> list:
    """One rank's steps: its loss, gradient and weight.

    Args:
        nan_at: this rank's input is NaN at that step: its loss and gradient are NaN there, its weights after.
        spread_at: another rank's NaN reaches this rank through the gradient all-reduce at that step.
        stall_from: this rank's loss stops decreasing from that step on.
    """
    rng = np.random.default_rng(int(worker.rsplit("_", 1)[1]))
    out = []
    for i in range(n):
        bad_grad = any(s is not None and i >= s for s in (nan_at, spread_at))
        bad_loss = nan_at is not None and i >= nan_at
        bad_weight = any(s is not None and i > s for s in (nan_at, spread_at))
        level = 1.0 / (1 + min(i, stall_from)) if stall_from is not None else 1.0 / (1 + i)
        loss = np.float32(np.nan if bad_loss else level)
        grad = rng.normal(0, 1e-2, (4, 4)).astype(np.float32) * (np.nan if bad_grad else 1)
        weight = (np.ones((4, 4)) * (1 + 1e-3 * i) * (np.nan if bad_weight else 1)).astype(np.float32)
        tensors = [
            tensor(LOSS, loss, ["losses"]),
            tensor(GRAD, grad, ["gradients"]),
            tensor(WEIGHT, weight, ["weights"]),
        ]
        out.append(record(i, tensors, worker=worker))
    return out


def four_workers(tmp_path: Path, n: int = 30, **per_worker: dict) -> tuple[str, dict]:
    """A finished run of four workers; ``worker_3={"nan_at": 12}`` gives one worker its problem."""
    by_worker = {w: rank_records(w, n, **per_worker.get(w, {})) for w in WORKERS}
    return write_workers_run(tmp_path / "run", by_worker), by_worker


def test_a_nan_in_worker_3_at_step_12_is_named_exactly(tmp_path):
    run, _ = four_workers(tmp_path, worker_3={"nan_at": 12})
    assert ts.create_trial(run).workers() == WORKERS
    (v,) = evaluate(run, [ExplodingTensor()], write=False)
    assert v.status is Status.ISSUES_FOUND
    assert (v.details["worker"], v.details["step"], v.first_trigger_step) == ("worker_3", 12, 12)
    assert "(first in worker_3 at step 12, TRAIN step 12)" in v.message
    assert v.workers == tuple(WORKERS) and v.datapoints == 30
    assert v.triggers == 18  # steps 12-29, each counted once
    per = v.details["per_worker"]
    assert [per[w]["status"] for w in WORKERS] == ["NoIssuesFound"] * 3 + ["IssuesFound"]
    assert per["worker_3"] == {"status": "IssuesFound", "datapoints": 30, "triggers": 18, "first_trigger_step": 12}
    assert "1 of 4 workers triggered: worker_3 from step 12 (18 of 30 steps)" in v.message


def test_a_nan_spread_by_the_all_reduce_names_the_rank_where_it_began(tmp_path):
    """Rank 3's NaN reaches every rank's gradient at step 12; only rank 3's loss is NaN there: rank 3 is named.

    Each worker's account equals that worker's data judged alone as a run of its own (the brute-force reference).
    """
    spread = {w: {"spread_at": 12} for w in WORKERS[:3]}
    run, by_worker = four_workers(tmp_path, worker_3={"nan_at": 12}, **spread)
    (v,) = evaluate(run, [ExplodingTensor()], write=False)
    assert (v.details["worker"], v.details["step"]) == ("worker_3", 12)
    assert v.details["first_trigger_count"] == 2  # its loss and its gradient; the others only their gradient
    assert "4 of 4 workers triggered: worker_3 from step 12" in v.message
    for worker, recs in by_worker.items():
        alone = [record(r.global_step, list(r.tensors.values())) for r in recs]  # as worker_0 of a run of its own
        (ref,) = evaluate(write_run(tmp_path / f"alone_{worker}", alone), [ExplodingTensor()], write=False)
        mine = v.details["per_worker"][worker]
        assert (mine["status"], mine["datapoints"], mine["triggers"], mine.get("first_trigger_step")) == (
            ref.status.value,
            ref.datapoints,
            ref.triggers,
            ref.first_trigger_step,
        )


def test_a_healthy_four_worker_run_is_quiet(tmp_path):
    run, _ = four_workers(tmp_path)
    rules = [VanishingGradient(), ExplodingTensor(), LossNotDecreasing(), WeightUpdateRatio()]
    verdicts = evaluate(run, rules, write=False)
    assert [v.status for v in verdicts] == [Status.NO_ISSUES_FOUND] * 4
    assert [v.datapoints for v in verdicts] == [30, 30, 3, 29]  # as one worker's run: steps, counted once
    assert all(v.workers == tuple(WORKERS) and v.details["workers_judged"] == 4 for v in verdicts)
    assert all(" evaluated steps of 4 workers" in v.message for v in verdicts)


def test_a_loss_that_stalls_on_one_worker_names_that_worker(tmp_path):
    run, by_worker = four_workers(tmp_path, n=60, worker_2={"stall_from": 0})  # worker_2's loss never goes down
    (v,) = evaluate(run, [LossNotDecreasing()], write=False)
    assert v.status is Status.ISSUES_FOUND and v.details["worker"] == "worker_2"
    assert "first in worker_2 at step" in v.message
    assert [v.details["per_worker"][w]["status"] for w in WORKERS] == ["NoIssuesFound"] * 2 + ["IssuesFound"] + [
        "NoIssuesFound"
    ]
    healthy = [record(r.global_step, list(r.tensors.values())) for r in by_worker["worker_0"]]
    (alone,) = evaluate(write_run(tmp_path / "w0", healthy), [LossNotDecreasing()], write=False)
    assert alone.status is Status.NO_ISSUES_FOUND


def test_a_single_worker_run_keeps_its_messages(tmp_path):
    recs = [record(r.global_step, list(r.tensors.values())) for r in rank_records("worker_0", nan_at=12)]
    (v,) = evaluate(write_run(tmp_path / "one", recs), [ExplodingTensor()], write=False)
    assert v.message.startswith("ExplodingTensor triggered at 18 of 30 evaluated steps (first at step 12, TRAIN")
    assert "worker" not in v.message and "per_worker" not in v.details and "worker" not in v.details


def test_only_steps_every_worker_wrote_count_until_the_run_ends(tmp_path):
    """A lagging rank: its missing steps are named, not judged; once the run is over, every step counts."""
    by_worker = {"worker_0": rank_records("worker_0", n=20, nan_at=15), "worker_1": rank_records("worker_1", n=10)}
    run = write_workers_run(tmp_path / "lag", by_worker, end=False)
    (running,) = evaluate(run, [ExplodingTensor()], write=False)
    assert running.status is Status.IN_PROGRESS and running.datapoints == 10
    assert "worker_1 did not write 10 step(s) (10-19)" in running.message
    (final,) = evaluate(run, [ExplodingTensor()], write=False, final=True)  # over, but rank 1 never wrote them
    assert final.status is Status.NO_ISSUES_FOUND and final.datapoints == 10 and "did not write" in final.message
    synthetic_run.end_run(Path(run))  # the job's end marker: every step it wrote counts
    (ended,) = evaluate(run, [ExplodingTensor()], write=False)
    assert ended.status is Status.ISSUES_FOUND and (ended.details["worker"], ended.details["step"]) == ("worker_0", 15)
    assert ended.details["per_worker"]["worker_1"]["datapoints"] == 10 and ended.datapoints == 20


# --- combining verdicts (pure) ------------------------------------------------------------------------------------
def _part(worker: str, status: Status, first: int | None = None, count: int = 1, at: float = 1.0) -> Verdict:
    details: dict = {"worker": worker, "inputs_seen": 5, "last_detail": "x"}
    if first is not None:
        details.update(
            first_detail=f"bad in {worker}",
            first_trigger_count=count,
            first_trigger_mode="TRAIN",
            first_trigger_mode_step=first,
        )
    return Verdict(
        "R",
        status,
        datapoints=5,
        triggers=int(first is not None),
        first_trigger_step=first,
        last_trigger_step=first,
        workers=(worker,),
        details=details,
        evaluated_at=at,
        source="live",
    )


def test_the_first_trigger_is_named_by_step_then_tensors_then_numeric_rank():
    combined = combine_workers([_part("worker_10", Status.ISSUES_FOUND, 4), _part("worker_2", Status.ISSUES_FOUND, 4)])
    assert combined.details["worker"] == "worker_2"  # worker_2 before worker_10
    wider = combine_workers([_part("worker_1", Status.ISSUES_FOUND, 4), _part("worker_5", Status.ISSUES_FOUND, 4, 3)])
    assert wider.details["worker"] == "worker_5"
    earlier = combine_workers([_part("worker_0", Status.ISSUES_FOUND, 9, 9), _part("worker_7", Status.ISSUES_FOUND, 8)])
    assert earlier.details["worker"] == "worker_7" and earlier.first_trigger_step == 8
    assert earlier.last_trigger_step == 9 and earlier.workers == ("worker_0", "worker_7")


def test_statuses_combine_by_severity_and_workers_without_inputs_are_left_out():
    no_inputs = Verdict("R", Status.NO_DATA, message="R found no inputs", workers=("worker_3",))
    quiet = combine_workers([_part("worker_0", Status.NO_ISSUES_FOUND), no_inputs])
    assert quiet.status is Status.NO_ISSUES_FOUND and quiet.details["workers_without_inputs"] == ["worker_3"]
    failed = combine_workers([_part("worker_0", Status.NO_ISSUES_FOUND), _part("worker_1", Status.ERROR)])
    assert failed.status is Status.ERROR and failed.details["worker"] == "worker_1"
    assert combine_workers([no_inputs, replace_worker(no_inputs, "worker_1")]).status is Status.NO_DATA


def replace_worker(v: Verdict, worker: str) -> Verdict:
    from dataclasses import replace

    return replace(v, workers=(worker,))


def test_the_record_combines_ranks_and_a_verdict_replaces_only_the_workers_it_covers():
    current, parts = merge_current(None, None, _part("worker_3", Status.ISSUES_FOUND, 12, at=1.0))
    for i, w in enumerate(WORKERS[:3]):  # the healthy ranks write later: they must not hide rank 3's verdict
        current, parts = merge_current(current, parts, _part(w, Status.NO_ISSUES_FOUND, at=2.0 + i))
    v = Verdict.from_dict(current)
    assert v.status is Status.ISSUES_FOUND and (v.details["worker"], v.details["step"]) == ("worker_3", 12)
    assert parts is not None and len(parts) == 4 and v.workers == tuple(WORKERS)
    stale, _ = merge_current(current, parts, _part("worker_3", Status.NO_ISSUES_FOUND, at=0.5))
    assert Verdict.from_dict(stale).status is Status.ISSUES_FOUND  # an older verdict of worker_3 changes nothing
    placeholder = Verdict("R", Status.IN_PROGRESS, message="evaluated at close")
    assert merge_current(current, parts, placeholder) == (current, parts)
    job = Verdict("R", Status.NO_ISSUES_FOUND, workers=tuple(WORKERS), evaluated_at=9.0, source="offline")
    assert merge_current(current, parts, job) == (job.to_dict(), None)  # every worker covered: it replaces them all
    current, parts = merge_current(job.to_dict(), None, _part("worker_0", Status.NO_ISSUES_FOUND, at=10.0))
    assert parts is not None and [p["source"] for p in parts] == ["offline", "live"]  # the job still runs
    for i, w in enumerate(WORKERS[1:]):
        current, parts = merge_current(current, parts, _part(w, Status.NO_ISSUES_FOUND, at=11.0 + i))
    assert parts is not None and sorted(p["workers"][0] for p in parts) == WORKERS  # later verdicts cover it all
    assert all(p["source"] == "live" for p in parts) and Verdict.from_dict(current).evaluated_at == 13.0


# --- live runners of several ranks on one run directory -----------------------------------------------------------
def _live(run: str, worker: str, recs: list) -> LiveRuleRunner:
    runner = LiveRuleRunner([ExplodingTensor()], run, worker=worker)  # not started: evaluates inline at close
    for r in recs:
        runner.submit(r)
    return runner


def test_live_runners_of_four_ranks_add_up_in_one_record(tmp_path):
    run, by_worker = four_workers(tmp_path, worker_3={"nan_at": 12})
    runners = {w: _live(run, w, by_worker[w]) for w in WORKERS}
    (own,) = runners["worker_3"].close()  # rank 3 closes first, the healthy ranks after it
    assert (own.first_trigger_step, "first in worker_3 at step 12" in own.message) == (12, True)
    for w in WORKERS[:3]:
        runners[w].close()
    doc = read_record(RunLayout(run).verdicts)
    assert sorted(e["worker"] for e in doc["evaluations"]) == WORKERS  # every rank's evaluation kept
    (current,) = read_verdicts(RunLayout(run).verdicts)
    assert current.status is Status.ISSUES_FOUND and current.source == "live"
    assert (current.details["worker"], current.details["step"], current.workers) == ("worker_3", 12, tuple(WORKERS))
    assert current.series and current.series[0].trigger_x[0] == 12.0  # the named worker's chart
    (offline,) = evaluate(run, [ExplodingTensor()])  # the job-wide offline verdict replaces the ranks' verdicts
    (after,) = read_verdicts(RunLayout(run).verdicts)
    assert after.source == "offline" and after.details["worker"] == "worker_3" and after.triggers == offline.triggers
    assert "worker_parts" not in read_record(RunLayout(run).verdicts)


def test_a_rank_that_saw_no_data_never_hides_another_ranks_issue(tmp_path):
    run, by_worker = four_workers(tmp_path, worker_0={"nan_at": 3})
    _live(run, "worker_0", by_worker["worker_0"]).close()
    (empty,) = _live(run, "worker_1", []).close()  # e.g. a rank that records no tensors (include_workers="one")
    assert empty.status is Status.NO_DATA
    (current,) = read_verdicts(RunLayout(run).verdicts)
    assert current.status is Status.ISSUES_FOUND and current.details["worker"] == "worker_0"


# --- one real job: torchrun, 4 ranks, gloo ------------------------------------------------------------------------
_NAN_RANK = textwrap.dedent("""
    import sys
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel
    import trainspect as ts

    out, steps = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    end_of_job = dist.new_group(backend="gloo")  # the end-of-job barrier on its own group (examples/ddp_train.py)
    rank = dist.get_rank()
    torch.manual_seed(0)
    model = DistributedDataParallel(nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2)))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(rank)
    hook = ts.torch.Hook(out, include_collections=["losses", "gradients"], save_config=ts.SaveConfig(save_interval=1),
                         include_workers="all", rules=[ts.rules.ExplodingTensor()])
    hook.register_module(model)
    hook.register_loss(loss_fn)
    for step in range(steps):
        x, y = torch.randn(16, 8, generator=gen), torch.randint(0, 2, (16,), generator=gen)
        if rank == 3 and step == 12:
            x[0, 0] = float("nan")  # one bad input sample on rank 3
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()
    hook.close()
    dist.barrier(group=end_of_job)
    dist.destroy_process_group()
""")


def test_torchrun_four_ranks_names_the_rank_that_fed_a_nan(tmp_path, capsys):
    pytest.importorskip("torch")
    from trainspect.rules.cli import main as rules_main

    script, out = tmp_path / "nan_rank.py", tmp_path / "ddp4"
    script.write_text(_NAN_RANK)
    root, bin_dir = Path(__file__).resolve().parents[2], Path(sys.executable).parent
    env = {
        "PATH": f"{bin_dir}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
    }
    proc = subprocess.run(
        [str(bin_dir / "torchrun"), "--standalone", "--nproc_per_node", "4", str(script), str(out), "16"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    trial = ts.create_trial(out)
    assert trial.workers() == WORKERS and trial.steps() == list(range(16))

    (live,) = [v for v in read_verdicts(RunLayout(out).verdicts) if v.rule == "ExplodingTensor"]  # four ranks' live
    # verdicts, combined in the record (the report adds the other applicable rules at close)
    assert live.source == "live" and live.workers == tuple(WORKERS)
    assert (live.details["worker"], live.details["step"]) == ("worker_3", 12)

    (offline,) = ts.rules.evaluate(trial, [ExplodingTensor()], write=False)
    assert offline.status is Status.ISSUES_FOUND and offline.first_trigger_step == 12
    assert (offline.details["worker"], offline.details["step"]) == ("worker_3", 12)
    assert LOSS in offline.tensors  # rank 3's loss: the other ranks' losses are finite at step 12

    capsys.readouterr()
    assert rules_main([str(out), "--rule", "ExplodingTensor"]) == 1
    assert "first in worker_3 at step 12" in capsys.readouterr().out


def test_a_sharded_tensors_reductions_are_judged_as_the_full_tensors_on_every_worker(tmp_path):
    """Each rank recorded its piece of a sharded gradient: a rule on its mean sees the full tensor's mean."""
    from trainspect.modes import ModeKeys
    from trainspect.reductions import partials_of
    from trainspect.rules import Check, Select, TensorRule
    from trainspect.shard import Shard
    from trainspect.step import StepRecord, TensorRecord
    from trainspect.store.manifest import mark_job_end
    from trainspect.store.tensor_file import TensorFileWriter

    full = np.concatenate([np.zeros(6), np.full(4, 12.5)])  # rank 0's piece: mean 0; rank 1's: 12.5; full: 5.0
    pieces = [(full[:6], Shard((10,), (0,), "block")), (full[6:], Shard((10,), (6,), "block"))]
    for rank, (local, shard) in enumerate(pieces):
        writer = TensorFileWriter(tmp_path / "tensors" / f"worker_{rank}")
        for step in range(3):
            grad = TensorRecord(
                "gradient/w", None, {}, frozenset({"gradients"}), local.shape, shard, partials_of(local)
            )
            writer.write(StepRecord(ModeKeys.TRAIN, step, step, 100.0 + step, f"worker_{rank}", {"gradient/w": grad}))
        writer.close()
    mark_job_end(RunLayout(tmp_path))

    class MeanIsFive(TensorRule):
        def selects(self):
            return [Select(collections=("gradients",), reductions=("mean",), raw=False)]

        def check(self, state, data):
            means = [t.reductions.get(("mean", False)) for t in data.role()]
            means = [m for m in means if m is not None]
            if not means:
                return None
            return Check(means[0], abs(means[0] - 5.0) < 1e-9, ("gradient/w",), f"mean {means[0]}")

    (verdict,) = ts.rules.evaluate(ts.create_trial(tmp_path), [MeanIsFive()], write=False)
    assert verdict.status is Status.ISSUES_FOUND, verdict.message
    per_worker = verdict.details["per_worker"]
    assert sorted(per_worker) == ["worker_0", "worker_1"]
    assert all(p["status"] == "IssuesFound" for p in per_worker.values()), per_worker
