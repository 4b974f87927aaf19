"""WorkerStraggler on real synchronous DDP jobs (torchrun, CPU/gloo): the slow rank is named, whatever its slowness.

Each job (tests/profiler/straggler_job.py) waits 20 ms per step in every rank's forward pass; the slow rank adds
150 ms per step (a sleep in its forward pass, real extra compute, or a dataset that sleeps). The assertions name the
rank and the part only, never a time: they hold beside a CPU hog.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from _support.package import PACKAGE_ROOT

from trainspect.profiler import load_profiler_data  # noqa: E402
from trainspect.rules.profiler import WorkerStraggler  # noqa: E402
from trainspect.rules.verdict import Status, Verdict  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
JOB = Path(__file__).resolve().parent / "straggler_job.py"
STEPS = 24

pytestmark = pytest.mark.slow


def _job(out: Path, ranks: int, *args: str) -> Verdict:
    env = {
        "PATH": f"{BIN}:/usr/bin:/bin",
        "OMP_NUM_THREADS": "1",
        "TRAINSPECT_TESTING": "1",
        "PYTHONPATH": str(PACKAGE_ROOT),
    }
    proc = subprocess.run(
        [
            str(BIN / "torchrun"),
            "--standalone",
            "--nproc_per_node",
            str(ranks),
            str(JOB),
            "--out",
            str(out),
            "--steps",
            str(STEPS),
            *args,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    data = load_profiler_data(out, final=True)
    assert sorted(data.framework) == [f"worker_{r}" for r in range(ranks)]
    for tab in data.framework.values():  # every rank timed the wait at the end of each backward pass
        sync = tab.spans["kind"] == 5
        assert tab.spans["global_step"][sync].tolist() == list(range(STEPS))
    return WorkerStraggler().evaluate(data)


@pytest.mark.parametrize(
    ("ranks", "slow", "rank", "part"),
    [
        (2, "sleep", 1, "compute"),
        (4, "sleep", 2, "compute"),
        (4, "compute", 3, "compute"),
        (4, "loader", 2, "loader"),
    ],
)
def test_the_slow_rank_is_named(tmp_path: Path, ranks: int, slow: str, rank: int, part: str) -> None:
    verdict = _job(tmp_path / "run", ranks, "--slow", slow, "--slow-rank", str(rank))
    assert verdict.status is Status.ISSUES_FOUND, verdict.message
    assert verdict.workers == (f"worker_{rank}",), verdict.message
    assert verdict.details["parts"] == {f"worker_{rank}": part}
    assert verdict.message.startswith(f"worker_{rank} computes" if part == "compute" else f"worker_{rank} waits")
    others = [w for w in verdict.details["by_worker"] if w != f"worker_{rank}"]
    by = verdict.details["by_worker"]
    assert all(by[w]["sync_s"] > by[f"worker_{rank}"]["sync_s"] for w in others)  # they wait for it


def test_a_slow_loader_is_named_when_the_others_wait_in_the_forward_pass(tmp_path: Path) -> None:
    # BatchNorm: DDP broadcasts rank 0's buffers in every forward pass, so rank 1 waits there for rank 0's loader
    verdict = _job(tmp_path / "run", 2, "--slow", "loader", "--slow-rank", "0", "--batchnorm")
    assert verdict.workers == ("worker_0",), verdict.message
    assert verdict.details["parts"] == {"worker_0": "loader"}


def test_a_healthy_job_has_no_straggler(tmp_path: Path) -> None:
    verdict = _job(tmp_path / "run", 2, "--slow", "none")
    assert verdict.status is Status.NO_ISSUES_FOUND, verdict.message
    compute = [v["compute_s"] for v in verdict.details["by_worker"].values()]
    assert np.isfinite(compute).all()
