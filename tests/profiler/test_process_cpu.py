"""The training job's own CPU (its process tree, DataLoader workers included) beside the host's (issue 13, point 4)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import psutil
import pytest

torch = pytest.importorskip("torch")

from torch.utils.data import DataLoader, Dataset  # noqa: E402

from trainspect.hooks.system_monitor import PROCS_DIR, SystemMonitor  # noqa: E402
from trainspect.profiler import ProfilerConfig, load_profiler_data  # noqa: E402
from trainspect.rules.profiler import OverallSystemUsage  # noqa: E402

BUSY = "import time\nt = time.time()\nwhile time.time() - t < {s}: pass\n"


class Busy(Dataset):  # type: ignore[type-arg]
    """Samples that cost CPU to make (decoding, augmentation) — in the DataLoader's worker processes."""

    def __len__(self) -> int:
        return 48

    def __getitem__(self, i: int) -> torch.Tensor:
        t = time.process_time()
        while time.process_time() - t < 0.01:
            pass
        return torch.full((4,), float(i))


def _cpu_seconds(arr, key: str) -> float:
    """Integrate a utilisation column (% of all cores) over the samples into CPU seconds."""
    col = arr.column(key).astype(np.float64)
    dt = np.diff(arr.timestamps, prepend=arr.timestamps[0] - 0.1)
    return float(np.nansum(col / 100.0 * (psutil.cpu_count() or 1) * dt))


def test_job_cpu_counts_dataloader_workers_but_not_other_processes(tmp_path: Path) -> None:
    mon = SystemMonitor(tmp_path, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100))
    # another job on the machine: a busy process that is not in our tree (orphaned by its shell)
    shell = subprocess.run(
        ["sh", "-c", f"{sys.executable} -c '{BUSY.format(s=30)}' >/dev/null 2>&1 & echo $!"],
        capture_output=True,
        text=True,
        check=True,
    )
    other = psutil.Process(int(shell.stdout.strip()))
    try:
        assert os.getpid() not in [p.pid for p in other.parents()]
        assert mon.start()
        me, kids = psutil.Process().cpu_times(), resource.getrusage(resource.RUSAGE_CHILDREN)
        other_before = sum(other.cpu_times()[:2])
        for _ in range(2):
            for _batch in DataLoader(Busy(), batch_size=4, num_workers=2):
                pass
        time.sleep(0.3)
        mon.close()
        other_used = sum(other.cpu_times()[:2]) - other_before
    finally:
        other.kill()
    kids_after, me_after = resource.getrusage(resource.RUSAGE_CHILDREN), psutil.Process().cpu_times()
    workers = (kids_after.ru_utime + kids_after.ru_stime) - (kids.ru_utime + kids.ru_stime)
    own = (me_after.user + me_after.system) - (me.user + me.system)
    arr = load_profiler_data(tmp_path).system["n0"]
    assert {"process_cpu_utilization_percent", "process_memory_used_bytes", "process_count"} <= set(arr.keys)
    job = _cpu_seconds(arr, "process_cpu_utilization_percent")
    host = _cpu_seconds(arr, "cpu_utilization_percent")
    assert workers > 0.3  # the samples were made in worker processes
    assert job >= 0.6 * workers  # the DataLoader workers count as the job's
    assert job <= 1.3 * (workers + own) + 0.2  # the other busy process does not
    assert host >= job + 0.5 * other_used  # the host-wide figure does include it
    assert np.nanmax(arr.column("process_count")) >= 3  # the main process and two workers

    v = OverallSystemUsage().evaluate(load_profiler_data(tmp_path))
    assert "Host CPU" in v.details and "the whole host" in v.message


def test_job_pids_are_the_registered_live_processes(tmp_path: Path) -> None:
    mon = SystemMonitor(tmp_path, node="n0", config=ProfilerConfig(system_monitor_interval_millis=100))
    folder = mon.directory / PROCS_DIR
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        folder.mkdir(parents=True)
        host = os.uname().nodename
        for pid, created in (
            (child.pid, psutil.Process(child.pid).create_time()),
            (child.pid + 10**6, 0.0),
            (os.getppid(), 1.0),
        ):
            (folder / f"{host}-{pid}.json").write_text(json.dumps({"pid": pid, "create_time": created, "host": host}))
        assert mon.job_pids() == sorted({os.getpid(), child.pid})  # the dead pid and the reused one are left out
        assert mon.start()
        assert (folder / f"{host}-{os.getpid()}.json").exists()
        mon.close()
        assert not (folder / f"{host}-{os.getpid()}.json").exists()
    finally:
        child.kill()
        child.wait()
