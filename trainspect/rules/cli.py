"""``trainspect rules DIR``: evaluate a finished run, or watch one in progress until it ends.

Without an end marker a run is in progress (verdicts that found nothing say ``InProgress``) until its newest
data is older than ``--stale-after`` seconds (default one hour), or at once with ``--final``.

Exit codes: 0 no issues, 1 issues found, 2 usage or data errors (unknown rule or parameter, unreadable
run directory, a rule that failed).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from trainspect._progress import Progress
from trainspect.exceptions import ConfigError, TrainspectError
from trainspect.rules.applicable import applicable_rules
from trainspect.rules.base import Rule
from trainspect.rules.counts import RuleCounts
from trainspect.rules.engine import evaluate, open_trial, recorded_besides, run_finished
from trainspect.rules.registry import RuleRegistry, default_registry
from trainspect.rules.trial_view import TrialView
from trainspect.rules.verdict import Status, Verdict

__all__ = ["add_parser", "run", "main"]

EXIT_OK, EXIT_ISSUES, EXIT_ERROR = 0, 1, 2
_EXAMPLES = """examples:
  trainspect rules runs/train-20260101-120000
  trainspect rules runs/train-20260101-120000 --rule ExplodingTensor --param ExplodingTensor.only_nan=true
  trainspect rules runs/in-progress --watch            (follow a running job until it ends)
  trainspect rules sagemaker-job/ --final --json"""


def _configure(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("dir", help="the run directory (trainspect's or smdebug's)")
    parser.add_argument("--rule", action="append", default=[], metavar="NAME", help="a rule to run (repeatable)")
    parser.add_argument(
        "--param", action="append", default=[], metavar="NAME.KEY=VALUE", help="a rule parameter (repeatable)"
    )
    parser.add_argument("--json", action="store_true", help="print the verdicts as a JSON list")
    parser.add_argument("--watch", action="store_true", help="follow a run in progress until it is over")
    parser.add_argument("--poll", type=float, default=2.0, metavar="SECONDS", help="seconds between looks (--watch)")
    parser.add_argument("--start-step", type=int, default=None, help="first global step evaluated")
    parser.add_argument("--end-step", type=int, default=None, help="global step where evaluation stops (exclusive)")
    parser.add_argument(
        "--final",
        action="store_true",
        help="the job is over: give final verdicts even without an end marker (e.g. a SageMaker job's folder)",
    )
    parser.add_argument(
        "--stale-after",
        type=float,
        default=None,
        metavar="SECONDS",
        help="without an end marker, the run is over once its newest data is this old (default 3600)",
    )
    parser.set_defaults(func=run)


def add_parser(subparsers: Any) -> None:
    """Add the ``rules`` subcommand to an argparse subparsers object."""
    parser = subparsers.add_parser(
        "rules",
        help="evaluate debugger rules over a run directory",
        description="Evaluate rules over a run. Without --rule, every built-in rule whose inputs the run "
        "recorded runs, and the others are listed as skipped. Exit 0: no issues, 1: issues, 2: errors.",
        epilog=_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _configure(parser)


def _parse_params(items: Sequence[str], registry: RuleRegistry) -> dict[str, dict[str, str]]:
    params: dict[str, dict[str, str]] = {}
    for item in items:
        head, sep, value = item.partition("=")
        name, dot, key = head.partition(".")
        if not sep or not dot or not key:
            raise ConfigError(f"--param {item!r}: expected NAME.KEY=VALUE, e.g. VanishingGradient.threshold=1e-6")
        cls = registry.get(name.strip())
        _check_param(cls, key.strip(), value)
        params.setdefault(cls.__name__, {})[key.strip()] = value
    return params


def _check_param(cls: type[Rule], key: str, value: str) -> None:
    """Validate one ``--param`` against the rule's declaration, before the run is read.

    Raises:
        ConfigError: an unknown parameter, or a value of the wrong type or range (``1e999``: not finite).
    """
    declared = {p.name: p for p in cls.parameters}
    if key not in declared:
        allowed = ", ".join(declared) or "(none)"
        raise ConfigError(f"--param {cls.__name__}.{key}: unknown parameter; allowed: {allowed}")
    try:
        declared[key].parse(value)
    except ConfigError as exc:
        text, prefix = str(exc), f"parameter {key}={value!r}"
        rest = text[len(prefix) :] if text.startswith(prefix) else f": {text}"
        raise ConfigError(f"--param {cls.__name__}.{key}={value!r}{rest}") from None


def _explicit_rules(names: Sequence[str], params: dict[str, dict[str, str]], registry: RuleRegistry) -> list[Rule]:
    classes = [registry.get(n) for n in names]
    chosen = {c.__name__ for c in classes}
    stray = sorted(set(params) - chosen)
    if stray:
        raise ConfigError(f"--param names rule(s) {', '.join(stray)} not chosen with --rule")
    return [cls(**params.get(cls.__name__, {})) for cls in classes]


def _print_human(verdicts: list[Verdict], out: TextIO) -> None:
    width = max((len(v.rule) for v in verdicts), default=4)
    for v in verdicts:
        print(f"{v.rule:<{width}}  {v.status.value:<13}  {v.triggers:>5}/{v.datapoints:<6} {v.message}", file=out)
        if v.status is Status.ISSUES_FOUND and v.recommendation:
            print(f"{'':<{width}}  -> {v.recommendation}", file=out)


def _print(verdicts: list[Verdict], as_json: bool, out: TextIO) -> None:
    if as_json:
        print(json.dumps([v.to_dict() for v in verdicts], indent=1), file=out)
    else:
        _print_human(verdicts, out)


def _exit_code(verdicts: list[Verdict]) -> int:
    if any(v.status is Status.ISSUES_FOUND for v in verdicts):
        return EXIT_ISSUES
    if any(v.status is Status.ERROR for v in verdicts):
        return EXIT_ERROR
    return EXIT_OK


def _rules_for(
    trial: TrialView, args: argparse.Namespace, registry: RuleRegistry, err: TextIO, quiet: bool
) -> list[Rule]:
    params = _parse_params(args.param, registry)
    if args.rule:
        return _explicit_rules(args.rule, params, registry)
    rules, skipped = applicable_rules(trial, params, registry, strict=not quiet and not args.watch)
    if not quiet:
        for name, reason in skipped:
            print(f"skipped {name}: {reason}", file=err)
    return rules


def _input_problem(args: argparse.Namespace) -> str:
    """What is wrong with the directory or the step range, in one line ("" when nothing is)."""
    path = Path(args.dir)
    if not path.is_dir():
        return f"{args.dir} is not a directory"
    if not any(path.iterdir()):
        return f"{args.dir} is empty: it holds no run (give the run directory the hook wrote)"
    for key in ("start_step", "end_step"):
        value = getattr(args, key)
        if value is not None and value < 0:
            return f"--{key.replace('_', '-')} {value}: expected a step >= 0"
    if args.stale_after is not None and not args.stale_after > 0:
        return f"--stale-after {args.stale_after:g}: expected a number of seconds > 0"
    if args.start_step is not None and args.end_step is not None and args.end_step <= args.start_step:
        return (
            f"--start-step {args.start_step} --end-step {args.end_step}: the range is empty; --end-step "
            "(exclusive) must be greater than --start-step"
        )
    return ""


def run(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the ``rules`` subcommand; return the exit code."""
    out, err = out or sys.stdout, err or sys.stderr
    registry = default_registry()
    problem = _input_problem(args)
    if problem:
        print(f"trainspect rules: {problem}", file=err)
        return EXIT_ERROR
    try:
        trial = open_trial(args.dir)
        rules = _rules_for(trial, args, registry, err, quiet=False)
        if args.watch:
            return _watch(trial, rules, args, registry, out, err)
        with Progress("rules") as bar:
            bar.stage(f"evaluating {len(rules)} rules over {len(trial.steps())} steps")
            verdicts = evaluate(trial, rules, args.start_step, args.end_step, **_ending(args))
    except TrainspectError as exc:  # ConfigError, a directory that holds no run
        print(f"trainspect rules: {exc}", file=err)
        return EXIT_ERROR
    except (OSError, ValueError) as exc:  # damaged or unreadable files
        print(f"trainspect rules: cannot read {args.dir}: {exc}", file=err)
        return EXIT_ERROR
    _print(verdicts, args.json, out)
    _print_recorded(args, verdicts, out)
    return _exit_code(verdicts)


def _print_recorded(args: argparse.Namespace, verdicts: list[Verdict], out: TextIO) -> None:
    """The record's other current verdicts (evaluated earlier: live, or offline with other rules), for reference.

    Then the count of the whole set: the one the report, TensorBoard and MLflow show.
    """
    if args.json:
        return
    others = recorded_besides(args.dir, verdicts)
    if others:
        print("also current in the run's record (not evaluated now):", file=out)
        for v in others:
            print(f"  {v.rule:<24}  {v.status.value:<13}  ({v.source or 'earlier'}) {v.message[:100]}", file=out)
    if verdicts or others:
        print(RuleCounts.of([*verdicts, *others]).line(), file=out)


def _ending(args: argparse.Namespace) -> dict[str, Any]:
    return {"final": bool(getattr(args, "final", False)), "stale_after_s": getattr(args, "stale_after", None)}


def _watch(
    trial: TrialView, rules: list[Rule], args: argparse.Namespace, registry: RuleRegistry, out: TextIO, err: TextIO
) -> int:
    last: list[tuple[str, str, int, int]] | None = None
    verdicts: list[Verdict] = []
    try:
        while True:
            finished = run_finished(trial, **_ending(args))
            if not args.rule:
                rules = _rules_for(trial, args, registry, err, quiet=not finished)
            verdicts = evaluate(trial, rules, args.start_step, args.end_step, **_ending(args))
            summary = [(v.rule, v.status.value, v.triggers, v.datapoints) for v in verdicts]
            if summary != last and (not args.json or finished):
                if not args.json:
                    print(f"--- {time.strftime('%H:%M:%S')} {'final' if finished else 'in progress'}", file=out)
                _print(verdicts, args.json, out)
                last = summary
            if finished:
                return _exit_code(verdicts)
            time.sleep(max(0.05, args.poll))
    except KeyboardInterrupt:
        return _exit_code(verdicts)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m trainspect.rules.cli DIR ...``."""
    parser = argparse.ArgumentParser(prog="trainspect rules")
    _configure(parser)
    from trainspect._pipes import quiet_broken_pipe

    return quiet_broken_pipe(lambda: run(parser.parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
