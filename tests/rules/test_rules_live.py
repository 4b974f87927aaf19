"""LiveRuleRunner: fed from step records, same verdicts as offline, StopTraining, verdict file, close."""

from __future__ import annotations

import json
import math
import time

import numpy as np
from rules_synth import record, tensor, write_run

from trainspect.exceptions import TrainingStopped
from trainspect.rules import (
    ExplodingTensor,
    LiveRuleRunner,
    LossNotDecreasing,
    SimilarAcrossRuns,
    StalledTrainingRule,
    Status,
    VanishingGradient,
    WeightUpdateRatio,
    evaluate,
)
from trainspect.store.layout import RunLayout


def records(n: int, nan_from: int | None = None) -> list:
    rng = np.random.default_rng(2)
    out = []
    for i in range(n):
        loss = math.nan if nan_from is not None and i >= nan_from else 2.0 * 0.97**i
        out.append(
            record(
                i,
                [
                    tensor("loss", np.float32(loss), ["losses"]),
                    tensor("gradient/fc.weight", rng.normal(0, 1e-2, (3, 3)), ["gradients"]),
                    tensor("fc.weight", np.ones((3, 3)) * (1 + 1e-3 * i), ["weights"]),
                ],
            )
        )
    return out


def wait_until(cond, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.01)
    return cond()


def test_live_verdicts_equal_offline_verdicts(tmp_path):
    recs = records(40, nan_from=30)
    make = lambda: [VanishingGradient(), ExplodingTensor(), LossNotDecreasing(), WeightUpdateRatio()]  # noqa: E731
    runner = LiveRuleRunner(make(), tmp_path / "live", poll=0.05)
    runner.start()
    for r in recs:
        runner.submit(r)
    live = runner.close()
    offline = evaluate(write_run(tmp_path / "off", recs), make(), write=False)
    strip = lambda v: (v.rule, v.status, v.datapoints, v.triggers, v.first_trigger_step, v.last_trigger_step, v.tensors)  # noqa: E731
    assert [strip(v) for v in live] == [strip(v) for v in offline]
    assert live[1].status is Status.ISSUES_FOUND and live[1].triggers == 10
    doc = json.loads(RunLayout(tmp_path / "live").verdicts.read_text())
    assert doc["final"] is True and doc["verdicts"][1]["status"] == "IssuesFound"


def test_stop_training_is_pending_after_the_trigger(tmp_path):
    runner = LiveRuleRunner([ExplodingTensor(actions=["StopTraining"])], tmp_path, poll=0.05)
    runner.start()
    recs = records(10, nan_from=6)
    for r in recs[:6]:
        runner.submit(r)
    assert wait_until(lambda: runner.lag == 0)
    time.sleep(0.05)
    assert runner.pending_stop() is None
    runner.submit(recs[6])
    assert wait_until(lambda: runner.pending_stop() is not None)
    stop = runner.pending_stop()
    assert isinstance(stop, TrainingStopped) and stop.rule == "ExplodingTensor" and stop.step == 6
    (v,) = runner.close(final=False)
    assert v.status is Status.ISSUES_FOUND
    (final,) = runner.close(final=True)
    assert final.status is Status.ISSUES_FOUND and json.loads(RunLayout(tmp_path).verdicts.read_text())["final"]


def test_verdict_file_is_kept_current_while_running(tmp_path):
    runner = LiveRuleRunner([LossNotDecreasing(num_steps=2)], tmp_path, poll=0.05)
    runner.start()
    for r in records(8):
        runner.submit(r)
    path = RunLayout(tmp_path).verdicts

    def current() -> bool:
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            return False
        return doc["last_step"] == 7 and doc["verdicts"][0]["datapoints"] == 3

    assert wait_until(current)
    assert json.loads(path.read_text())["verdicts"][0]["status"] == "InProgress"
    assert runner.verdicts()[0].status is Status.IN_PROGRESS
    assert runner.close()[0].status is Status.NO_ISSUES_FOUND


def test_stalled_training_fires_from_idle_checks(tmp_path):
    fired = []
    rule = StalledTrainingRule(threshold=0.2, actions=[fired.append])
    runner = LiveRuleRunner([rule], tmp_path, poll=0.05)
    runner.start()
    now = time.time()
    runner.submit(record(0, [], wall=now))
    runner.submit(record(1, [], wall=now + 0.01))
    assert wait_until(lambda: bool(fired), timeout=5)
    assert fired[0].rule == "StalledTrainingRule" and fired[0].status is Status.ISSUES_FOUND
    assert runner.close()[0].triggers == 1


def test_non_live_rules_are_evaluated_at_close(tmp_path):
    recs = records(4)
    other = write_run(tmp_path / "other", recs)
    run_dir = write_run(tmp_path / "run", recs)
    runner = LiveRuleRunner([SimilarAcrossRuns(other_trials=other), ExplodingTensor()], run_dir, poll=0.05)
    runner.start()
    for r in recs:
        runner.submit(r)
    assert runner.verdicts()[0].status is Status.IN_PROGRESS
    similar, exploding = runner.close()
    assert similar.status is Status.NO_ISSUES_FOUND and similar.datapoints == 4
    assert exploding.datapoints == 4


def test_runner_without_start_drains_inline_and_ignores_late_submits(tmp_path):
    runner = LiveRuleRunner([ExplodingTensor()], tmp_path)
    for r in records(3):
        runner.submit(r)
    (v,) = runner.close()
    assert v.datapoints == 3
    runner.submit(records(1)[0])
    assert runner.close()[0].datapoints == 3
