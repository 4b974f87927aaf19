"""``trainspect compare`` never crowns a broken run and never contradicts itself (issue 29, bullet 1).

Two real (tiny) torch runs of equal length, one whose loss goes NaN, one healthy; synthetic step timings for the
noise. Nothing here depends on how fast the machine is: speed figures are only compared with each other.
"""

from __future__ import annotations

import math
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import synth_run

from trainspect.report import RunSummary, compare_runs, compare_table, render_compare, summary_for
from trainspect.report.compare import compare_note, time_saving_percent
from trainspect.store.job_events import write_stop

STEPS = 120


def _train(out: Path, lr: float, scale: float) -> Path:
    """A small MLP on synthetic data, profiled, with an evaluation every 40 steps; ``lr``/``scale`` make it diverge."""
    import torch

    import trainspect as ts
    from trainspect.rules import ExplodingTensor

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    loss_fn = torch.nn.MSELoss()
    x, y = torch.randn(64, 8) * scale, torch.randn(64, 1)
    hook = ts.torch.Hook(
        str(out), rules=[ExplodingTensor()], profiler_config=ts.ProfilerConfig(system_monitor_interval_millis=100)
    )
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for step in range(STEPS):
            model.train()
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
            if (step + 1) % 40 == 0:
                model.eval()
                with torch.no_grad():
                    loss_fn(model(x), y)
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(a run whose loss goes NaN within ~20 steps, a healthy run of the same length)."""
    root = tmp_path_factory.mktemp("trust")
    return _train(root / "nan", lr=0.5, scale=10.0), _train(root / "healthy", lr=0.01, scale=1.0)


def _rows(a: RunSummary, b: RunSummary) -> dict[str, dict[str, Any]]:
    return {r["key"]: r for r in compare_runs(a, b)}


def test_a_nan_run_is_never_ranked_and_the_first_line_says_why(runs: tuple[Path, Path]) -> None:
    nan, healthy = summary_for(runs[0]), summary_for(runs[1])
    assert nan.steps == healthy.steps == STEPS
    assert re.match(r"loss (NaN|Inf) from step \d+$", nan.diverged) and not healthy.diverged
    assert "ExplodingTensor" in nan.issues and nan.broken and not healthy.broken
    first = compare_table(nan, healthy).splitlines()[0]
    assert first.startswith(f"unlike runs: A diverged ({nan.diverged}): its speed figures are not a fair comparison")
    assert first.endswith("no row ranks the runs")
    for a, b, sick in ((nan, healthy, "a"), (healthy, nan, "b")):
        rows = _rows(a, b)
        assert all(r["winner"] is None for r in rows.values())  # the healthy run is never marked worse either
        assert rows["verdict"][sick].startswith(f"diverged ({nan.diverged}); ")
        assert re.search(r"\d+ rules? found issues", rows["verdict"][sick])
        assert rows["saving"]["b"].startswith("not offered: unlike runs")
    assert " *" not in "\n".join(compare_table(nan, healthy).splitlines()[3:-3])


def test_a_stop_is_named_beside_the_divergence(runs: tuple[Path, Path], tmp_path: Path) -> None:
    stopped = Path(shutil.copytree(runs[0], tmp_path / "stopped"))
    step = int(summary_for(stopped).diverged.rsplit(" ", 1)[1])
    if not (stopped / "rules" / "stopped.json").exists():  # the hook records it when StopTraining stops a run
        write_stop(stopped, "ExplodingTensor", step, "TRAIN", "worker_0")
    a = summary_for(stopped)
    note = compare_note(a, summary_for(runs[1]))
    assert note.startswith(
        f"unlike runs: A diverged ({a.diverged}) and was stopped by StopTraining at step {step} "
        "(rule ExplodingTensor): its speed figures are not a fair comparison"
    )
    assert (
        f"stopped by StopTraining at step {step} (rule ExplodingTensor)"
        in _rows(a, summary_for(runs[1]))["verdict"]["a"]
    )


def test_losses_at_matched_steps_side_by_side_with_nan_flagged(runs: tuple[Path, Path]) -> None:
    nan, healthy = summary_for(runs[0]), summary_for(runs[1])
    rows = _rows(nan, healthy)
    matched = [r for k, r in rows.items() if k.startswith("loss@")]
    assert [r["label"] for r in matched][0] == "training loss at TRAIN step 0" and len(matched) == 5
    assert matched[-1]["label"] == f"training loss at TRAIN step {STEPS - 1}"
    assert all(r["a"] != "–" and r["b"] != "–" for r in matched)
    assert matched[-1]["a"].endswith(" !") and matched[-1]["change"] == "non-finite"  # NaN/Inf, flagged
    assert math.isfinite(float(matched[-1]["b"].replace(",", "")))
    assert rows["final_loss"]["b"].endswith(f"(step {STEPS - 1})")
    assert healthy.eval_loss is not None and rows["eval_loss"]["b"] != "–"


def test_links_to_both_reports_in_the_table_and_the_page(runs: tuple[Path, Path], tmp_path: Path) -> None:
    nan, healthy = summary_for(runs[0]), summary_for(runs[1])
    table = compare_table(nan, healthy)
    assert str(runs[0].resolve() / "report.html") in table and str(runs[1].resolve() / "report.html") in table
    page = tmp_path / "out" / "compare.html"
    page.parent.mkdir()
    html = render_compare(nan, healthy, out=page)
    hrefs = re.findall(r'<a href="([^"]+)"', html)
    assert len(hrefs) == 2 and all(
        (page.parent / h).resolve() == r.resolve() / "report.html" for h, r in zip(hrefs, runs, strict=True)
    )
    main = html.split("<main>", 1)[1].lstrip()
    assert main.startswith('<p class="warn" id="unlike-runs"') and "unlike runs: A diverged" in main.split("</p>")[0]


def test_throughput_and_time_per_1000_steps_are_one_figure(runs: tuple[Path, Path]) -> None:
    a, b = summary_for(runs[0]), summary_for(runs[1])
    for s in (a, b):
        assert s.time_per_1k_steps_s == 1000 / s.steps_per_s  # the training loop, both ways
        assert s.steps_per_s == s.steps / s.loop_s and s.startup_s is not None and s.startup_s >= 0
    assert time_saving_percent(a, b) == pytest.approx(100 * (1 - a.steps_per_s / b.steps_per_s), rel=1e-9)
    rows = {r["label"]: r for r in compare_runs(a, b)}
    assert "start-up: job start to first step (s)" in rows
    assert rows["job duration (s, start-up included)"]["winner"] is None
    assert "step time p50 (s, compute, no input wait)" in rows and "step cycle p50 (s, input wait included)" in rows
    metrics = b.to_metrics()
    assert metrics["trainspect/time_per_1k_steps_s"] == 1000 / metrics["trainspect/steps_per_s"]
    assert metrics["trainspect/job_s"] == b.duration_s and metrics["trainspect/startup_s"] == b.startup_s
    back = RunSummary.from_metrics("b", metrics)
    assert back.time_per_1k_steps_s == pytest.approx(b.time_per_1k_steps_s)


def _synthetic(path: Path, step_s: float, seed: int) -> RunSummary:
    run = synth_run.write_run(path, seconds=80, interval_s=0.5, steps=300, step_s=step_s, seed=seed)
    return summary_for(run)


def test_two_runs_of_the_same_script_are_within_noise(tmp_path: Path) -> None:
    """Synthetic step timings (10 % spread): the same step time twice is noise; half the step time is not."""
    a, b = _synthetic(tmp_path / "a", 0.2, seed=1), _synthetic(tmp_path / "b", 0.2, seed=2)
    assert a.steps_per_s != b.steps_per_s and a.cycle_rel_se is not None and a.cycle_rel_se > 0
    rows = _rows(a, b)
    for key in ("steps_per_s", "time_per_1k_steps_s"):
        assert "within noise (95% CI" in rows[key]["change"] and rows[key]["winner"] is None, key
    assert rows["saving"]["b"].startswith("within noise") and rows["saving"]["winner"] is None
    for run in (a, b):  # the per-epoch time and cost follow the throughput: its noise too
        run.steps_per_epoch, run.price_per_hour = 100, 3.6
    rows = _rows(a, b)
    for key in ("samples_per_s", "time_per_epoch_s", "cost_per_1k_steps", "cost_per_epoch"):
        if key in rows:
            assert "within noise (95% CI" in rows[key]["change"] and rows[key]["winner"] is None, key
    assert {"time_per_epoch_s", "cost_per_epoch"} <= set(rows)
    fast = _synthetic(tmp_path / "fast", 0.1, seed=3)
    rows = _rows(a, fast)
    assert rows["steps_per_s"]["winner"] == "b" and "within noise" not in rows["steps_per_s"]["change"]
    assert rows["saving"]["winner"] == "b" and "95% CI" in rows["saving"]["change"]


def test_the_noise_rule_on_given_figures() -> None:
    a = RunSummary("a", steps=1000, loop_s=100.0, cycle_rel_se=0.01)
    near, far = (
        RunSummary("b", steps=1000, loop_s=98.0, cycle_rel_se=0.01),
        RunSummary("c", steps=1000, loop_s=80.0, cycle_rel_se=0.01),
    )
    assert _rows(a, near)["steps_per_s"]["winner"] is None  # 2 % < 2.09 * sqrt(2) * 1 %
    assert _rows(a, far)["steps_per_s"]["winner"] == "b" and _rows(a, far)["saving"]["b"] == "20%"


def test_changes_beyond_100_percent_are_ratios_and_cpu_over_100_never_wins() -> None:
    a = RunSummary("a", steps=100, loop_s=10.0, cpu_mean=60.0, cpu_p95=102.0)
    b = RunSummary("b", steps=450, loop_s=10.0, cpu_mean=80.0, cpu_p95=90.0)
    rows = _rows(a, b)
    assert rows["steps"]["change"] == "4.5×" and rows["steps_per_s"]["change"] == "4.5×"
    assert rows["cpu_p95"]["winner"] is None and rows["cpu_mean"]["winner"] == "b"  # CPU-only, both healthy
    sick = RunSummary("b", steps=450, loop_s=10.0, cpu_mean=80.0, issues=("CPUBottleneck",))
    assert _rows(a, sick)["cpu_mean"]["winner"] is None
    slow = RunSummary("s", steps=100, loop_s=50.0)
    assert _rows(a, slow)["saving"]["b"] == "none: B needs 5× A's"


def test_a_run_with_issues_the_other_has_not_is_never_ranked_better() -> None:
    fast = RunSummary("a", steps=1000, loop_s=50.0, issues=("InputBottleneck",))
    slow = RunSummary("b", steps=1000, loop_s=100.0)
    rows = _rows(fast, slow)
    assert all(r["winner"] != "a" for r in rows.values())
    assert compare_note(fast, slow).startswith("unlike runs: 1 of A's rules found issues (InputBottleneck)")
    assert "1 rule found issues (InputBottleneck)" in rows["verdict"]["a"]
    fixed = RunSummary("b", steps=1000, loop_s=40.0)
    assert _rows(fast, fixed)["steps_per_s"]["winner"] == "b"  # the healthy run may win
    both = RunSummary("b", steps=1000, loop_s=40.0, issues=("InputBottleneck",))
    assert compare_note(fast, both) == "" and _rows(fast, both)["steps_per_s"]["winner"] == "b"  # shared: alike
