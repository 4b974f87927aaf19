"""4 CPU ranks under torchrun (gloo): step time with trainspect's default config vs without, side by side.

    .venv/bin/python benchmarks/bench_distributed.py [--pairs 3] [--ranks 4]

Target (issue 8): at most 1.05x. Pairs alternate which variant runs first; the median ratio is printed.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
TORCHRUN = str(Path(sys.executable).parent / "torchrun")


def _job(ranks: int, out: str | None, steps: int) -> float:
    cmd = [
        TORCHRUN,
        "--standalone",
        "--nproc_per_node",
        str(ranks),
        str(HERE / "_ddp_step_time.py"),
        "--steps",
        str(steps),
    ]
    if out:
        cmd += ["--out", out]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=900)
    match = re.search(r"STEP_MEDIAN ([0-9.]+)", proc.stdout)
    assert match, proc.stdout + proc.stderr
    return float(match.group(1))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--ranks", type=int, default=4)
    parser.add_argument("--steps", type=int, default=150)
    args = parser.parse_args()
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            out = str(Path(tmp) / f"run{i}")
            if i % 2 == 0:
                plain, inst = _job(args.ranks, None, args.steps), _job(args.ranks, out, args.steps)
            else:
                inst, plain = _job(args.ranks, out, args.steps), _job(args.ranks, None, args.steps)
            ratios.append(inst / plain)
            print(
                f"pair {i}: plain {plain * 1e3:.2f} ms/step, trainspect {inst * 1e3:.2f} ms/step, ratio {inst / plain:.3f}"
            )
    ratio = statistics.median(ratios)
    verdict = "OK" if ratio <= 1.05 else "MISSED"
    print(
        f"{args.ranks} CPU ranks, default config (losses every step): {ratio:.3f}x step time (target <= 1.05x) {verdict}"
    )


if __name__ == "__main__":
    main()
