"""GPU check of the system monitor: sample for a few seconds while a CUDA matmul loop runs, print GPU metrics.

Run on a CUDA machine: ``python benchmarks/gpu_check_profiler.py``. On a CPU-only machine it prints
"no GPU" and exits 0.
"""

from __future__ import annotations

import sys
import tempfile
import threading
import time

import numpy as np


def main() -> int:
    try:
        import torch
    except ImportError:
        print("no GPU (torch is not installed)")
        return 0
    if not torch.cuda.is_available():
        print("no GPU")
        return 0
    from trainspect.hooks.system_monitor import SystemMonitor
    from trainspect.profiler import ProfilerConfig, SystemMetricsReader

    stop = threading.Event()

    def burn() -> None:
        a = torch.randn(4096, 4096, device="cuda")
        while not stop.is_set():
            a = (a @ a).clamp_(-1, 1)
            torch.cuda.synchronize()

    with tempfile.TemporaryDirectory() as root:
        mon = SystemMonitor(root, node="gpu-node", config=ProfilerConfig(system_monitor_interval_millis=100))
        if not mon.start():
            print("monitor did not start")
            return 1
        time.sleep(1.0)
        worker = threading.Thread(target=burn, daemon=True)
        worker.start()
        time.sleep(4.0)
        stop.set()
        worker.join()
        time.sleep(0.5)
        mon.close()
        arrays = SystemMetricsReader(root).read_arrays()["gpu-node"]
    print(f"{len(arrays)} samples; GPUs seen: {arrays.gpus}")
    ok = bool(arrays.gpus)
    for g in arrays.gpus:
        for what in ("utilization_percent", "memory_used_percent", "memory_used_bytes", "power_watts",
                     "temperature_celsius"):  # fmt: skip
            col = arrays.column(f"gpu{g}_{what}")
            if col is None:
                print(f"gpu{g}_{what}: not recorded")
                continue
            print(f"gpu{g}_{what}: min {np.nanmin(col):.1f} max {np.nanmax(col):.1f} mean {np.nanmean(col):.1f}")
        util = arrays.column(f"gpu{g}_utilization_percent")
        ok = ok and util is not None and float(np.nanmax(util)) > 50.0
    print("GPU CHECK", "PASSED" if ok else "FAILED (utilisation never exceeded 50% during the matmul loop)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
