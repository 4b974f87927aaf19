"""One verdict record (issue 13, point 6): offline evaluation never destroys the live verdicts; every reader
shows each rule's latest verdict; the mode of the trigger steps is named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import mlflow.tracking.context.registry  # noqa: E402, F401  (first: the plugin's context provider registers cleanly)

import trainspect as ts  # noqa: E402
from trainspect.mlflow_plugin.session import verdict_tags  # noqa: E402
from trainspect.report.context import ReportContext  # noqa: E402
from trainspect.rules import ExplodingTensor, LossNotDecreasing, Status, VanishingGradient, Verdict, evaluate  # noqa: E402
from trainspect.rules.cli import main as rules_main  # noqa: E402
from trainspect.rules.record import MAX_EVALUATIONS, VerdictRecord, read_record, stamp  # noqa: E402
from trainspect.rules.verdict import read_verdicts, write_verdicts  # noqa: E402
from trainspect.store.layout import RunLayout  # noqa: E402


def diverging_run(out: Path) -> Path:
    """A real training whose learning rate is far too high: the loss becomes NaN; rules evaluated live."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=50.0, momentum=0.9)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(
        str(out),
        include_collections=["losses", "gradients"],
        rules=[ExplodingTensor(), VanishingGradient(), LossNotDecreasing()],
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(256, 8, generator=gen)
    y = x.sum(1, keepdim=True) * 10
    for step in range(40):
        idx = slice((step * 32) % 256, (step * 32) % 256 + 32)
        opt.zero_grad()
        loss_fn(model(x[idx]), y[idx]).backward()
        opt.step()
    hook.close()
    return out


def test_offline_evaluation_keeps_the_live_record_and_every_reader_shows_the_latest(tmp_path: Path, capsys) -> None:
    run = diverging_run(tmp_path / "run")
    live = {v.rule: v for v in read_verdicts(RunLayout(run).verdicts)}
    assert live["ExplodingTensor"].status is Status.ISSUES_FOUND and live["ExplodingTensor"].source == "live"
    assert live["ExplodingTensor"].mode == "TRAIN"

    # an offline evaluation with other parameters, through the API and through `trainspect rules`
    (offline,) = evaluate(run, [ExplodingTensor(only_nan=True)])
    assert offline.source == "offline" and offline.evaluated_at is not None
    assert rules_main([str(run), "--rule", "LossNotDecreasing", "--param", "LossNotDecreasing.num_steps=5"]) == 1
    printed = capsys.readouterr().out  # `trainspect rules` also lists the record's other current verdicts
    assert "also current in the run's record (not evaluated now):" in printed
    assert "VanishingGradient" in printed.split("not evaluated now")[1] and "(live)" in printed
    assert "(offline)" in printed and "ExplodingTensor" in printed.split("not evaluated now")[1]

    doc = read_record(RunLayout(run).verdicts)
    sources = [(e["source"], e["final"]) for e in doc["evaluations"]]
    assert sources[0] == ("live", True) and sources.count(("offline", True)) == 2
    assert [v["rule"] for v in doc["evaluations"][0]["verdicts"]] == [
        "ExplodingTensor",
        "VanishingGradient",
        "LossNotDecreasing",
    ]
    assert all("series" not in v for e in doc["evaluations"] for v in e["verdicts"])  # the history stays small

    current = {v.rule: v for v in ts.rules.load_verdicts(run)}
    assert set(current) >= {"ExplodingTensor", "VanishingGradient", "LossNotDecreasing"}
    others = set(current) - {"ExplodingTensor", "VanishingGradient", "LossNotDecreasing"}
    assert others and all(current[r].source == "report" for r in others)  # the other rules, judged at close
    assert current["ExplodingTensor"].source == "offline" and current["ExplodingTensor"].parameters["only_nan"]
    assert current["LossNotDecreasing"].parameters["num_steps"] == 5
    assert current["VanishingGradient"].source == "live"  # not evaluated offline: the live verdict stays current

    # the report and the MLflow tags show that same set
    ctx = ReportContext.load(run, evaluate_profiler_rules=False)
    assert [(v.rule, v.status, v.source) for v in ctx.verdicts] == [
        (v.rule, v.status, v.source) for v in ts.rules.load_verdicts(run)
    ]
    tags = verdict_tags(ctx.verdicts)
    issues = sorted(v.rule for v in current.values() if v.status is Status.ISSUES_FOUND)
    assert tags["trainspect.issues"] == ", ".join(issues) and "ExplodingTensor" in issues
    assert tags["trainspect.rule.VanishingGradient"] == current["VanishingGradient"].status.value


def test_tensorboard_rules_rows_show_the_current_set(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from trainspect.tb_plugin.rules_view import verdict_rows

    path = tmp_path / "rules" / "verdicts.json"
    VerdictRecord(path, "live").write(
        stamp([Verdict("A", Status.ISSUES_FOUND), Verdict("B", Status.NO_ISSUES_FOUND)], "live", 1.0), final=True
    )
    VerdictRecord(path, "offline").write(stamp([Verdict("A", Status.NO_ISSUES_FOUND)], "offline", 2.0), final=True)
    rows = verdict_rows("run", read_verdicts(path))
    assert [(r["rule"], r["status"], r["source"]) for r in rows] == [
        ("A", "NoIssuesFound", "offline"),
        ("B", "NoIssuesFound", "live"),
    ]


def test_a_record_of_the_first_format_becomes_the_first_evaluation(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.json"
    write_verdicts(path, [Verdict("A", Status.ISSUES_FOUND)], final=True, source="live")
    VerdictRecord(path, "offline").write(stamp([Verdict("B", Status.NO_DATA)], "offline"), final=True)
    doc = json.loads(path.read_text())
    assert [(e["id"], e["source"]) for e in doc["evaluations"]] == [
        ("earlier", "live"),
        (doc["evaluations"][1]["id"], "offline"),
    ]
    assert [v.rule for v in read_verdicts(path)] == ["A", "B"]


def test_unfinished_evaluations_update_their_entry_and_placeholders_never_win(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.json"
    offline = VerdictRecord(path, "offline")
    offline.write(stamp([Verdict("P", Status.NO_ISSUES_FOUND, kind="profiler")], "offline", 5.0), final=False)
    offline.write(stamp([Verdict("P", Status.IN_PROGRESS, kind="profiler")], "offline", 6.0), final=False)
    live = VerdictRecord(path, "live")
    for _ in range(3):  # the live runner rewrites its snapshot; a placeholder says "evaluated at close"
        live.write([Verdict("P", Status.IN_PROGRESS, kind="profiler", source="live")], final=False)
    doc = read_record(path)
    assert [(e["source"], e["final"]) for e in doc["evaluations"]] == [("offline", False), ("live", False)]
    (current,) = read_verdicts(path)
    assert current.source == "offline" and current.evaluated_at == 6.0
    offline.write(stamp([Verdict("P", Status.NO_ISSUES_FOUND, kind="profiler")], "offline", 7.0), final=True)
    offline.write(stamp([Verdict("P", Status.ISSUES_FOUND, kind="profiler")], "offline", 8.0), final=True)
    assert len(read_record(path)["evaluations"]) == 3  # the unfinished entry became final; the next one is new
    assert read_verdicts(path)[0].status is Status.ISSUES_FOUND


def test_the_history_is_capped(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.json"
    for i in range(MAX_EVALUATIONS + 5):
        VerdictRecord(path, "offline").write(stamp([Verdict("A", Status.NO_DATA)], "offline", float(i)), final=True)
    doc = read_record(path)
    assert len(doc["evaluations"]) == MAX_EVALUATIONS and doc["evaluations_dropped"] == 5
    assert read_verdicts(path)[0].evaluated_at == float(MAX_EVALUATIONS + 4)


def test_watch_like_repeated_evaluations_of_a_running_job_keep_one_entry(tmp_path: Path) -> None:
    path = tmp_path / "verdicts.json"
    for i in range(5):  # `trainspect rules --watch`: a new evaluation at every look, the run not over yet
        VerdictRecord(path, "offline").write(stamp([Verdict("A", Status.IN_PROGRESS)], "offline", float(i)), False)
    VerdictRecord(path, "offline").write(stamp([Verdict("A", Status.NO_ISSUES_FOUND)], "offline", 9.0), True)
    VerdictRecord(path, "offline").write(stamp([Verdict("A", Status.NO_ISSUES_FOUND)], "offline", 10.0), True)
    assert [e["final"] for e in read_record(path)["evaluations"]] == [True, True]


def test_live_and_offline_verdicts_name_the_mode_of_their_global_trigger_steps(tmp_path: Path) -> None:
    import numpy as np
    from rules_synth import record, tensor, write_run

    from trainspect.modes import ModeKeys
    from trainspect.rules import LiveRuleRunner

    recs = []  # training steps 0-9, evaluation 10-14 (NaN in the evaluation from 12), training 15-19 (NaN from 18)
    for n in range(20):
        mode = ModeKeys.EVAL if 10 <= n < 15 else ModeKeys.TRAIN
        bad = 12 <= n < 15 or n >= 18
        recs.append(record(n, [tensor("loss", np.float32(np.nan if bad else 1.0), ["losses"])], mode))
    runner = LiveRuleRunner([ExplodingTensor()], tmp_path / "live", poll=0.05)
    runner.start()
    for r in recs:
        runner.submit(r)
    (live,) = runner.close()
    (offline,) = evaluate(write_run(tmp_path / "off", recs), [ExplodingTensor()], write=False)
    for v in (live, offline):
        assert (v.first_trigger_step, v.last_trigger_step, v.mode) == (12, 19, "EVAL+TRAIN"), v
