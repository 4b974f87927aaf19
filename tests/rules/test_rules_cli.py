"""The ``rules`` subcommand: built through argparse as trainspect/cli.py will, and via ``python -m``."""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import threading
import time

import numpy as np
from rules_synth import record, tensor, write_run
from test_rules_engine import healthy_records

from trainspect.rules.cli import add_parser
from trainspect.store.layout import RunLayout


def cli(*argv: str) -> tuple[int, str, str]:
    parser = argparse.ArgumentParser(prog="trainspect")
    add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["rules", *argv])
    out, err = io.StringIO(), io.StringIO()
    code = args.func(args, out, err)
    return code, out.getvalue(), err.getvalue()


def test_default_set_runs_what_was_recorded_and_lists_skipped(tmp_path):
    run_dir = write_run(tmp_path / "run", healthy_records())
    code, out, err = cli(str(run_dir), "--json")
    verdicts = {v["rule"]: v for v in json.loads(out)}
    assert code == (1 if any(v["status"] == "IssuesFound" for v in verdicts.values()) else 0)
    assert verdicts["ExplodingTensor"]["status"] == verdicts["VanishingGradient"]["status"] == "NoIssuesFound"
    assert {"VanishingGradient", "ExplodingTensor", "LossNotDecreasing", "WeightUpdateRatio"} <= set(verdicts)
    assert all({"rule", "status", "triggers"} <= set(v) for v in verdicts.values())
    assert "DeadRelu" not in verdicts and "skipped DeadRelu: inputs not recorded" in err
    assert "skipped AllZero: needs parameters" in err
    assert RunLayout(run_dir).verdicts.exists()


def test_issues_exit_1_with_params(tmp_path):
    run_dir = write_run(tmp_path / "run", healthy_records(nan_from=25))
    code, out, _ = cli(
        str(run_dir),
        "--rule",
        "ExplodingTensor",
        "--rule",
        "vanishinggradient",
        "--param",
        "VanishingGradient.threshold=1e-9",
    )
    assert code == 1
    assert "ExplodingTensor" in out and "IssuesFound" in out and "->" in out
    code, out, _ = cli(str(run_dir), "--rule", "AllZero", "--param", "AllZero.collection_names=weights", "--json")
    assert code == 0 and json.loads(out)[0]["status"] == "NoIssuesFound"


def test_usage_errors_exit_2_and_list_valid_names(tmp_path):
    run_dir = write_run(tmp_path / "run", healthy_records(3))
    code, _, err = cli(str(run_dir), "--rule", "Nope")
    assert code == 2 and "valid rules:" in err and "VanishingGradient" in err
    code, _, err = cli(str(run_dir), "--rule", "VanishingGradient", "--param", "VanishingGradient.bad=1")
    assert code == 2 and "allowed: threshold" in err
    code, _, err = cli(str(run_dir), "--rule", "VanishingGradient", "--param", "threshold=1")
    assert code == 2 and "NAME.KEY=VALUE" in err
    code, _, err = cli(str(tmp_path / "missing"))
    assert code == 2 and "not a directory" in err


def test_watch_follows_a_run_until_its_end_marker(tmp_path):
    recs = healthy_records(12)
    run_dir = write_run(tmp_path / "run", recs, end=False)

    def finish_later() -> None:
        time.sleep(0.4)
        RunLayout(run_dir).end_marker.write_text("1\n")

    threading.Thread(target=finish_later, daemon=True).start()
    code, out, _ = cli(str(run_dir), "--rule", "VanishingGradient", "--watch", "--poll", "0.1")
    assert code == 0
    assert "in progress" in out and "final" in out and "NoIssuesFound" in out


def test_python_dash_m_entry_point(tmp_path):
    recs = [record(i, [tensor("gradient/w", np.full(3, 1e-12), ["gradients"])]) for i in range(3)]
    run_dir = write_run(tmp_path / "run", recs)
    proc = subprocess.run(
        [sys.executable, "-m", "trainspect.rules.cli", str(run_dir), "--rule", "VanishingGradient", "--json"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)[0]["triggers"] == 3
