"""``trainspect report``, ``trainspect compare`` and ``trainspect mlflow-sync`` subcommands."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

__all__ = ["add_parser", "parse_prices"]


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    """Add the ``report``, ``compare`` and ``mlflow-sync`` subcommands."""
    p = sub.add_parser("report", help="write the self-contained HTML report of a run directory")
    p.add_argument("dir", help="run directory")
    p.add_argument(
        "-o", "--output", help="HTML file, or a directory to write report.html into (default: DIR/report.html)"
    )
    p.add_argument("--price-per-hour", type=float, default=None, metavar="P", help="instance price, adds a cost part")
    p.set_defaults(func=_report)

    c = sub.add_parser("compare", help="compare two runs (directories or MLflow run ids), before/after")
    c.add_argument("a", help="run A (before): a run directory or an MLflow run id")
    c.add_argument("b", help="run B (after)")
    c.add_argument("--price-per-hour", nargs="+", default=[], metavar="RUN=P",
                   help="hourly price per instance: A=14.688 B=3.825, or one number for both")  # fmt: skip
    c.add_argument("-o", "--output", help="also write the comparison as HTML to this file")
    c.set_defaults(func=_compare)

    s = sub.add_parser("mlflow-sync", help="upload a run directory to an MLflow run (after an outage)")
    s.add_argument("dir", help="run directory")
    s.add_argument("--run-id", help="the MLflow run (default: the one recorded in DIR/mlflow/run.json)")
    s.add_argument("--tracking-uri", help="MLflow tracking URI (default: MLFLOW_TRACKING_URI / mlflow's default)")
    s.add_argument("--price-per-hour", type=float, default=None, metavar="P")
    s.add_argument("--artifacts", action="store_true", help="also upload the whole run directory as artifacts")
    s.set_defaults(func=_sync)


def _report(args: argparse.Namespace) -> int:
    from trainspect.exceptions import TrainspectError
    from trainspect.report.render import write_report

    run_dir = Path(args.dir)
    target = _report_target(args)
    if not run_dir.is_dir():
        problem = f"{args.dir!r} is not a directory"
    elif not any(run_dir.iterdir()):
        problem = f"{args.dir!r} is empty: it holds no run (give the run directory the hook wrote)"
    elif target is not None and target.exists() and not target.is_file():
        problem = f"-o {args.output!r}: {str(target)!r} exists and is not a file"
    else:
        problem = ""
    if problem:
        print(f"trainspect report: {problem}", file=sys.stderr)
        return 2
    try:
        out = write_report(run_dir, target, price_per_hour=args.price_per_hour)
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


def parse_prices(items: list[str]) -> tuple[float | None, float | None]:
    """Parse ``A=14.688 B=3.825`` (or one number for both) into (price A, price B).

    Raises:
        ValueError: an item is not ``A=<float>``, ``B=<float>`` or a float.

    Example:
        >>> parse_prices(["A=14.688", "B=3.825"])
        (14.688, 3.825)
    """
    prices: dict[str, float] = {}
    for item in items:
        key, sep, value = item.partition("=")
        try:
            if not sep:
                prices["A"] = prices["B"] = float(key)
            elif key.upper() in ("A", "B"):
                prices[key.upper()] = float(value)
            else:
                raise ValueError
        except ValueError:
            raise ValueError(f"--price-per-hour {item!r}: expected A=<price>, B=<price> or one price") from None
    return prices.get("A"), prices.get("B")


def _compare(args: argparse.Namespace) -> int:
    from trainspect.report.compare import compare_table, render_compare, summary_for

    try:
        price_a, price_b = parse_prices(args.price_per_hour)
        a, b = summary_for(args.a, price_a), summary_for(args.b, price_b)
    except (ValueError, FileNotFoundError) as exc:
        print(f"trainspect compare: {exc}", file=sys.stderr)
        return 2
    print(compare_table(a, b))
    if args.output:
        Path(args.output).write_text(render_compare(a, b), encoding="utf-8")
        print(f"comparison: {args.output}")
    return 0


def _sync(args: argparse.Namespace) -> int:
    try:
        from trainspect.mlflow_plugin.sync import sync_run
    except ImportError as exc:
        print(f"trainspect mlflow-sync: MLflow is not installed ({exc}); pip install trainspect[mlflow]",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        run_id = sync_run(args.dir, run_id=args.run_id, tracking_uri=args.tracking_uri,
                          price_per_hour=args.price_per_hour, artifacts=args.artifacts)  # fmt: skip
    except (ValueError, FileNotFoundError) as exc:
        print(f"trainspect mlflow-sync: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # MLflow's own errors (unknown run, server refusing): a message, not a traceback
        print(f"trainspect mlflow-sync: MLflow refused the upload: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"uploaded {args.dir} to MLflow run {run_id}")
    return 0
