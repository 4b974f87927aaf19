"""The offline engine over real run directories: bulk fetch, statuses, verdict files, errors, in-progress runs."""

from __future__ import annotations

import json
import math

import numpy as np
from rules_synth import record, tensor, write_run

import trainspect
from trainspect.rules import (
    DeadRelu,
    ExplodingTensor,
    LossNotDecreasing,
    SimilarAcrossRuns,
    Status,
    TensorRule,
    VanishingGradient,
    WeightUpdateRatio,
    evaluate,
    load_verdicts,
)
from trainspect.store.layout import RunLayout


def healthy_records(n: int = 30, nan_from: int | None = None, grad_scale: float = 1e-2) -> list:
    rng = np.random.default_rng(1)
    out = []
    for i in range(n):
        loss = np.float32(math.nan if nan_from is not None and i >= nan_from else 1.0 / (1 + i))
        g = rng.normal(0, grad_scale, (4, 4)).astype(np.float32)
        w = (np.ones((4, 4)) * (1 + 1e-3 * i)).astype(np.float32)
        out.append(
            record(
                i,
                [
                    tensor("CrossEntropyLoss_output_0", loss, ["losses"]),
                    tensor("gradient/Net_fc.weight", g, ["gradients"]),
                    tensor("Net_fc.weight", w, ["weights"]),
                ],
            )
        )
    return out


def test_evaluate_finished_run_writes_and_reads_back(tmp_path):
    run = write_run(tmp_path / "run", healthy_records())
    rules = [VanishingGradient(), ExplodingTensor(), LossNotDecreasing(), WeightUpdateRatio()]
    verdicts = evaluate(trainspect.create_trial(run), rules)
    assert [v.status for v in verdicts] == [Status.NO_ISSUES_FOUND] * 4
    assert [v.datapoints for v in verdicts] == [30, 30, 3, 29]
    doc = json.loads(RunLayout(run).verdicts.read_text())
    assert doc["final"] is True and [v["rule"] for v in doc["verdicts"]] == [r.name for r in rules]
    assert load_verdicts(run) == verdicts


def test_evaluate_counts_all_triggers_and_names_tensors(tmp_path):
    run = write_run(tmp_path / "run", healthy_records(nan_from=20))
    exploding, lnd = evaluate(run, [ExplodingTensor(), LossNotDecreasing(num_steps=5)])
    assert exploding.status is Status.ISSUES_FOUND and exploding.triggers == 10
    assert (exploding.first_trigger_step, exploding.last_trigger_step) == (20, 29)
    assert exploding.tensors == ("CrossEntropyLoss_output_0",)
    assert exploding.first_trigger_time is not None and exploding.recommendation
    assert lnd.status is Status.ISSUES_FOUND and lnd.first_trigger_step == 20


def test_start_and_end_step_limit_the_range(tmp_path):
    run = write_run(tmp_path / "run", healthy_records(nan_from=20))
    (v,) = evaluate(run, [ExplodingTensor()], start_step=5, end_step=22, write=False)
    assert v.datapoints == 17 and v.triggers == 2
    assert not RunLayout(run).verdicts.exists()


def test_missing_inputs_give_no_data_naming_the_collection(tmp_path):
    run = write_run(tmp_path / "run", healthy_records(5))
    (v,) = evaluate(run, [DeadRelu()], write=False)
    assert v.status is Status.NO_DATA and "relu_output" in v.message and "ReLU" in v.message


def test_a_failing_rule_is_an_error_and_the_others_go_on(tmp_path):
    class Broken(TensorRule):
        def check(self, state, data):
            raise RuntimeError("broken on purpose")

    run = write_run(tmp_path / "run", healthy_records(5))
    broken, ok = evaluate(run, [Broken(), ExplodingTensor()], write=False)
    assert broken.status is Status.ERROR and "broken on purpose" in broken.message
    assert ok.status is Status.NO_ISSUES_FOUND and ok.datapoints == 5


def test_run_in_progress_reports_in_progress_until_the_end_marker(tmp_path):
    run = write_run(tmp_path / "run", healthy_records(12), end=False)
    vg, dead = evaluate(run, [VanishingGradient(), DeadRelu()])
    assert vg.status is Status.IN_PROGRESS and vg.datapoints == 12
    assert dead.status is Status.IN_PROGRESS
    assert json.loads(RunLayout(run).verdicts.read_text())["final"] is False
    RunLayout(run).end_marker.write_text("1\n")
    assert evaluate(run, [VanishingGradient()])[0].status is Status.NO_ISSUES_FOUND


def test_reductions_only_run(tmp_path):
    records = [
        record(i, [tensor("gradient/w", None, ["gradients"], abs_mean=1e-9 if i > 2 else 1.0, min=0.0, max=1.0)])
        for i in range(6)
    ]
    run = write_run(tmp_path / "run", records)
    vg, ex = evaluate(run, [VanishingGradient(), ExplodingTensor()], write=False)
    assert vg.triggers == 3 and vg.first_trigger_step == 3
    assert ex.status is Status.NO_ISSUES_FOUND and ex.datapoints == 6


def test_similar_across_runs_reads_the_other_trial(tmp_path):
    a = write_run(tmp_path / "a", healthy_records(6))
    b = write_run(tmp_path / "b", healthy_records(6))
    rng = np.random.default_rng(5)
    changed = healthy_records(6)
    changed[4] = record(4, [tensor("gradient/Net_fc.weight", rng.normal(size=(4, 4)), ["gradients"])])
    c = write_run(tmp_path / "c", changed)
    (same,) = evaluate(a, [SimilarAcrossRuns(other_trials=b)], write=False)
    (diff,) = evaluate(a, [SimilarAcrossRuns(other_trials=str(c), collection_names="gradients")], write=False)
    assert same.status is Status.NO_ISSUES_FOUND and same.datapoints == 6
    assert diff.status is Status.ISSUES_FOUND and diff.first_trigger_step == 4 and diff.triggers == 1


def test_profiler_rule_gets_profiler_data_once_and_in_progress_until_end(tmp_path, monkeypatch):
    import sys
    import types

    from trainspect.rules import Rule, Verdict

    calls = []
    fake = types.ModuleType("trainspect.profiler")
    fake.load_profiler_data = lambda path: calls.append(path) or {"rows": 3}  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "trainspect.profiler", fake)

    class FakeProfilerRule(Rule):
        kind = "profiler"

        def evaluate(self, data):
            return Verdict(rule=self.name, status=Status.NO_ISSUES_FOUND, kind="profiler", datapoints=data["rows"])

    run = write_run(tmp_path / "run", healthy_records(3), end=False)
    (v,) = evaluate(run, [FakeProfilerRule()], write=False)
    assert v.status is Status.IN_PROGRESS and v.datapoints == 3 and len(calls) == 1
