"""Before/after comparison: SageMaker's published example (83 % saving) reproduced from synthetic runs."""

from __future__ import annotations

from pathlib import Path

import pytest
import synth_run

from trainspect.cli import main
from trainspect.report import RunSummary, compare_runs, compare_table, summary_for
from trainspect.report.cli import parse_prices
from trainspect.report.compare import saving_percent


def _run(path: Path, nodes: int, seconds: float) -> Path:
    # steps end `seconds` after the start: init 5 s + steps, closing 1 s later
    steps = 100
    step_s = (seconds - 5.0 - 1.0 - 0.005 * (steps - 1)) / steps
    return synth_run.write_run(path, seconds=seconds, interval_s=0.5, nodes=nodes, steps=steps, step_s=step_s, seed=1)


def test_sagemaker_example_saving_of_83_percent(tmp_path: Path) -> None:
    a = summary_for(_run(tmp_path / "p3.8xlarge-x3", nodes=3, seconds=503), 14.688)
    b = summary_for(_run(tmp_path / "p3.2xlarge-x2", nodes=2, seconds=502), 3.825)
    assert (a.instances, b.instances) == (3, 2)
    assert a.duration_s == pytest.approx(503, abs=1.5) and b.duration_s == pytest.approx(502, abs=1.5)
    assert round(saving_percent(a, b)) == 83
    table = compare_table(a, b)
    assert "83%" in table and "p3.8xlarge-x3" in table
    rows = {r["label"]: r for r in compare_runs(a, b)}
    assert rows["saving"]["better"] is True and rows["instances (nodes)"]["b"] == "2"


def test_compare_cli_prints_a_table_and_writes_html(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path / "a", 3, 503), _run(tmp_path / "b", 2, 502)
    out = tmp_path / "cmp.html"
    code = main(["compare", str(a), str(b), "--price-per-hour", "A=14.688", "B=3.825", "-o", str(out)])
    assert code == 0
    text = capsys.readouterr().out
    assert "saving" in text and "83%" in text
    assert "83%" in out.read_text()
    assert main(["compare", str(a), str(tmp_path / "missing")]) == 2
    assert main(["compare", str(a), str(b), "--price-per-hour", "C=1"]) == 2


def test_price_parsing_and_metrics_round_trip() -> None:
    assert parse_prices(["2.5"]) == (2.5, 2.5)
    with pytest.raises(ValueError, match="A=<price>"):
        parse_prices(["A=x"])
    s = RunSummary("r", duration_s=10.0, instances=2, steps=5, gpu_p95=50.0, triggers={"X": 3}, price_per_hour=1.0)
    back = RunSummary.from_metrics("r", s.to_metrics())
    assert back.to_dict() == s.to_dict()
