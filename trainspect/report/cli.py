"""``trainspect report`` and ``trainspect compare`` subcommands (``mlflow-sync``: ``trainspect.mlflow_plugin.cli``)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from trainspect._progress import Progress

__all__ = ["add_parser", "parse_prices", "parse_pair"]

_T = TypeVar("_T", int, float)
_RAW = argparse.RawDescriptionHelpFormatter

_REPORT_EXAMPLES = """examples:
  trainspect report runs/train-20260101-120000
  trainspect report runs/train-20260101-120000 -o /tmp/ --price-per-hour 3.825"""
_COMPARE_EXAMPLES = """Runs are compared per unit of work (throughput, time and cost per 1,000 steps, per epoch,
all from the training loop; start-up is its own row), so two runs of different lengths compare fairly; the
projected saving is for the same number of steps. A run that diverged or was stopped is ranked in no row, a run
whose rules found issues the other's did not is never marked better (the first line says why the runs are
unlike), and differences within the noise of the step times rank nothing.

examples:
  trainspect compare runs/baseline runs/bigger-batch
  trainspect compare runs/p3-8x runs/g5-2x --price-per-hour A=14.688 B=3.825 --batch-size 64 -o compare.html
  trainspect compare 0f1e...a9 4b7c...d2      (MLflow run ids; the page is also logged to run B)"""


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``report`` and ``compare`` subcommands."""
    p = sub.add_parser(
        "report",
        help="write the self-contained HTML report of a run directory",
        description="Write the HTML report of a run: verdicts first, then the job and its data.",
        epilog=_REPORT_EXAMPLES,
        formatter_class=_RAW,
    )
    p.add_argument("dir", help="run directory")
    p.add_argument(
        "-o", "--output", help="HTML file, or a directory to write report.html into (default: DIR/report.html)"
    )
    p.add_argument("--price-per-hour", type=float, default=None, metavar="P", help="instance price, adds a cost part")
    p.set_defaults(func=_report)

    c = sub.add_parser(
        "compare",
        help="compare two runs per unit of work (directories or MLflow run ids)",
        description=_COMPARE_EXAMPLES.split("\n\n")[0],
        epilog=_COMPARE_EXAMPLES.split("\n\n")[1],
        formatter_class=_RAW,
    )
    c.add_argument("a", help="run A (before): a run directory or an MLflow run id")
    c.add_argument("b", help="run B (after)")
    c.add_argument(
        "--price-per-hour",
        nargs="+",
        default=[],
        metavar="RUN=P",
        help="hourly price per instance: A=14.688 B=3.825, or one number for both",
    )
    c.add_argument(
        "--batch-size",
        nargs="+",
        default=[],
        metavar="RUN=N",
        help="samples per step and worker, for samples/s: A=32 B=64, or one number for both",
    )
    c.add_argument(
        "--steps-per-epoch",
        nargs="+",
        default=[],
        metavar="RUN=N",
        help="training steps per epoch, for the per-epoch rows: A=500 B=250, or one number",
    )
    c.add_argument("-o", "--output", help="also write the comparison as HTML to this file")
    c.add_argument(
        "--no-mlflow-artifact",
        action="store_true",
        help="do not log the HTML page to MLflow run B when both runs are MLflow runs",
    )
    c.set_defaults(func=_compare)


def _report_problem(args: argparse.Namespace, target: Path | None) -> str:
    run_dir = Path(args.dir)
    if not run_dir.is_dir():
        return f"{args.dir!r} is not a directory"
    if not any(run_dir.iterdir()):
        return f"{args.dir!r} is empty: it holds no run (give the run directory the hook wrote)"
    if target is not None and target.exists() and not target.is_file():
        return f"-o {args.output!r}: {str(target)!r} exists and is not a file"
    return ""


def _report(args: argparse.Namespace) -> int:
    from trainspect.exceptions import TrainspectError
    from trainspect.report.context import ReportContext
    from trainspect.report.render import write_report

    target = _report_target(args)
    problem = _report_problem(args, target)
    if problem:
        print(f"trainspect report: {problem}", file=sys.stderr)
        return 2
    try:
        with Progress("report") as bar:
            bar.stage("reading the run")
            ctx = ReportContext.load(args.dir, price_per_hour=args.price_per_hour)
            bar.stage("writing the page")
            out = write_report(Path(args.dir), target, price_per_hour=args.price_per_hour, context=ctx)
    except TrainspectError as exc:  # e.g. the directory holds no run
        print(f"trainspect report: {exc}", file=sys.stderr)
        return 2
    except (OSError, ValueError) as exc:  # damaged or unreadable run files, a full disk, an unwritable -o
        print(f"trainspect report: cannot write the report of {args.dir}: {exc}", file=sys.stderr)
        return 2
    print(f"report: {out}")
    return 0


def _report_target(args: argparse.Namespace) -> Path | None:
    """The HTML file: ``-o`` itself, or ``report.html`` inside it when it names a directory."""
    if not args.output:
        return None
    target = Path(args.output)
    if target.is_dir() or args.output.endswith(("/", os.sep)):
        return target / "report.html"
    return target


def parse_pair(items: list[str], flag: str, cast: Callable[[str], _T], what: str) -> tuple[_T | None, _T | None]:
    """Parse ``A=x B=y`` (or one value for both) into (value for A, value for B).

    Raises:
        ValueError: an item is not ``A=<value>``, ``B=<value>`` or a value, or a value is not positive.

    Example:
        >>> parse_pair(["A=32", "B=64"], "--batch-size", int, "size")
        (32, 64)
    """
    values: dict[str, _T] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            if not sep:
                values["A"] = values["B"] = cast(key)
            elif key.upper() in ("A", "B"):
                values[key.upper()] = cast(value)
            else:
                raise ValueError
            if min(values.values()) <= 0:
                raise ValueError
        except ValueError:
            raise ValueError(f"{flag} {item!r}: expected A=<{what}>, B=<{what}> or one {what} (> 0)") from None
    return values.get("A"), values.get("B")


def parse_prices(items: list[str]) -> tuple[float | None, float | None]:
    """Parse ``A=14.688 B=3.825`` (or one number for both) into (price A, price B).

    Raises:
        ValueError: an item is not ``A=<float>``, ``B=<float>`` or a float.

    Example:
        >>> parse_prices(["A=14.688", "B=3.825"])
        (14.688, 3.825)
    """
    return parse_pair(items, "--price-per-hour", float, "price")


def _summaries(args: argparse.Namespace) -> tuple[Any, Any]:
    from trainspect.report.compare import summary_for

    prices = parse_prices(args.price_per_hour)
    batches = parse_pair(args.batch_size, "--batch-size", int, "size")
    epochs = parse_pair(args.steps_per_epoch, "--steps-per-epoch", int, "steps")
    with Progress("compare") as bar:
        out = []
        for i, run in enumerate((args.a, args.b)):
            bar.stage(f"reading {run}")
            out.append(summary_for(run, prices[i], batch_size=batches[i], steps_per_epoch=epochs[i]))
    if out[0].name == out[1].name:  # two runs of one name (e.g. the same script's folders): tell them apart
        out[0].name, out[1].name = f"{out[0].name} ({args.a})", f"{out[1].name} ({args.b})"
    return out[0], out[1]


def _compare(args: argparse.Namespace) -> int:
    from trainspect.report.compare import compare_table, is_mlflow_run_id, render_compare

    try:
        a, b = _summaries(args)
    except (ValueError, FileNotFoundError) as exc:
        print(f"trainspect compare: {exc}", file=sys.stderr)
        return 2
    print(compare_table(a, b))
    html = render_compare(a, b, out=args.output)
    if args.output:
        Path(args.output).write_text(html, encoding="utf-8")
        print(f"comparison: {args.output}")
    if is_mlflow_run_id(args.a) and is_mlflow_run_id(args.b) and not args.no_mlflow_artifact:
        _log_to_mlflow(args.b, html, f"compare-{a.name}-vs-{b.name}.html")
    return 0


def _log_to_mlflow(run_id: str, html: str, name: str) -> None:
    """Log the page to MLflow run ``run_id`` under ``trainspect/compare/`` (a refusal is a warning, not a failure)."""
    name = re.sub(r"[^A-Za-z0-9_.-]+", "_", name)
    try:
        from mlflow.tracking import MlflowClient

        with tempfile.TemporaryDirectory(prefix="trainspect-compare-") as tmp:
            page = Path(tmp) / name
            page.write_text(html, encoding="utf-8")
            MlflowClient().log_artifact(run_id, str(page), "trainspect/compare")
    except Exception as exc:  # MLflow's own errors: the table is printed already
        print(f"trainspect compare: could not log the page to MLflow run {run_id}: {exc}", file=sys.stderr)
        return
    print(f"comparison: logged to MLflow run {run_id} as trainspect/compare/{name}")
