"""The ``trainspect`` command read in ten seconds: the command list, --version, help with examples, ``info`` on a
directory that is no run, ``run --rules``, the closing summary (rules with issues, report, run; a failed script
says so), progress only on a terminal, mode names in messages."""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from _support.jobs import record_two_rank_job
from _support.package import PACKAGE_ROOT

from trainspect import __version__
from trainspect._progress import Progress
from trainspect.cli import build_parser, main
from trainspect.exceptions import StepUnavailable, TensorUnavailableForStep
from trainspect.modes import ModeKeys

ROOT = Path(__file__).resolve().parent.parent

# Real training that diverges: the loss is NaN from step 6 on (weights poisoned), then the script exits 3.
NAN_SCRIPT = textwrap.dedent("""
    import sys, torch
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 2); opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
    for step in range(12):
        if step == 6:
            with torch.no_grad():
                model.weight.fill_(float("nan"))
        opt.zero_grad(); torch.nn.functional.cross_entropy(model(x), y).backward(); opt.step()
    sys.exit(int(sys.argv[1]))
""")


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def test_bare_trainspect_lists_every_command_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 0
    out = capsys.readouterr().out
    for name in _subcommands():
        lines = [line for line in out.splitlines() if line.strip().startswith(name + " ")]
        assert len(lines) == 1 and len(lines[0].split(None, 1)[1]) > 10, (name, out)
    assert "required" not in out


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stop:
        main(["--version"])
    assert stop.value.code == 0 and capsys.readouterr().out.strip() == f"trainspect {__version__}"


def test_every_subcommand_has_a_help_line_and_examples() -> None:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    helps = {c.dest: c.help for c in sub._choices_actions}
    for name, command in _subcommands().items():
        assert helps.get(name), name
        text = command.format_help()
        assert "examples:" in text and f"trainspect {name} " in text.split("examples:", 1)[1], name


def test_info_refuses_a_directory_that_holds_no_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "notes.txt").write_text("not a run")
    (tmp_path / "data").mkdir()
    assert main(["info", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("trainspect info: ") and "holds no run" in err[0]


def test_info_counts_the_ranks_of_a_job_whose_rank_0_alone_records_tensors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    record_two_rank_job(tmp_path / "run", monkeypatch)
    assert main(["info", str(tmp_path / "run"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["workers"] == ["worker_0"] and doc["ranks"] == 2  # tensors from rank 0; the job had two ranks
    assert main(["info", str(tmp_path / "run")]) == 0
    assert "ranks: 2" in capsys.readouterr().out.splitlines()


def _run(tmp_path: Path, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
    script = tmp_path / "train.py"
    script.write_text(NAN_SCRIPT)
    env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "trainspect.cli",
            "run",
            "--out",
            str(tmp_path / "run"),
            *args,
            "--",
            sys.executable,
            str(script),
            str(code),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_run_with_rules_prints_the_rules_with_issues_the_report_and_the_failure(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--rules", "ExplodingTensor,LossNotDecreasing", code=3)
    assert proc.returncode == 3, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.startswith("trainspect: ")]
    assert "trainspect: the script failed with exit status 3" in lines
    exploding = [line for line in lines if line.startswith("trainspect: ExplodingTensor found issues from step ")]
    assert len(exploding) == 1, proc.stderr
    assert f"trainspect: report {tmp_path / 'run' / 'report.html'}" in lines
    assert f"trainspect: run directory {tmp_path / 'run'}" in lines
    assert not any("view it with" in line for line in lines)  # the script failed: no invitation to look at it
    assert sum("run directory" in line for line in proc.stderr.splitlines()) == 1  # the wrapper's lines only


def test_run_refuses_an_unknown_rule_before_starting(tmp_path: Path) -> None:
    proc = _run(tmp_path, "--rules", "ExplodingTensor,NoSuchRule")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--rules" in lines[0] and "NoSuchRule" in lines[0] and "VanishingGradient" in lines[0]
    assert not (tmp_path / "run").exists()


def test_the_hook_prints_the_summary_at_close(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    import torch

    import trainspect as ts
    from trainspect.rules import ExplodingTensor

    model, loss_fn = torch.nn.Linear(4, 2), torch.nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    hook = ts.torch.Hook(str(tmp_path / "run"), rules=[ExplodingTensor()])
    with hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        x, y = torch.randn(8, 4), torch.randint(0, 2, (8,))
        for step in range(6):
            if step == 3:
                with torch.no_grad():
                    model.weight.fill_(float("inf"))
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
    err = capfd.readouterr().err
    assert "trainspect: ExplodingTensor found issues from step 3" in err, err
    assert f"trainspect: report {tmp_path / 'run' / 'report.html'}" in err
    assert f"trainspect: run directory {tmp_path / 'run'}" in err


def test_messages_name_modes() -> None:
    assert "(mode GLOBAL)" in str(TensorUnavailableForStep("w", 3, ModeKeys.GLOBAL))
    assert "(mode EVAL)" in str(StepUnavailable(3, 2)) and "4" not in str(StepUnavailable(3, 4)).split("mode")[1]


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_is_drawn_on_a_terminal_only() -> None:
    pytest.importorskip("tqdm", reason="progress bars need tqdm")
    tty, pipe = _Terminal(), io.StringIO()
    for stream in (tty, pipe):
        with Progress("report", stream=stream) as bar:
            bar.stage("writing the page")
    with Progress("rules", total=3, stream=tty) as counted:
        counted.update(3)
    assert "report: writing the page" in tty.getvalue() and "0/3" in tty.getvalue()
    assert pipe.getvalue() == ""
