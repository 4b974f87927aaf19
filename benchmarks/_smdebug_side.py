"""smdebug 1.0.34's side of the benchmarks; run with bench-env/smdebug/bin/python (prints one JSON line).

python benchmarks/_smdebug_side.py overhead W1 STEPS PAIRS     -> {"ratio": ..., "ratios": [...]}
python benchmarks/_smdebug_side.py write W1 STEPS OUT          -> writes a save_all run into OUT
python benchmarks/_smdebug_side.py read OUT                    -> {"seconds": ..., "bytes": ..., "values": ...}
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("SMDEBUG_TRAINING_END_DELAY_REFRESH", "0")
os.environ.setdefault("SMDEBUG_LOG_LEVEL", "error")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workloads as wl  # noqa: E402
import smdebug.pytorch as smd  # noqa: E402

logging.getLogger("smdebug").setLevel(logging.ERROR)


def _hooked(out: str) -> object:
    def run(model, opt, loss_fn, batches, steps):  # type: ignore[no-untyped-def]
        hook = smd.Hook(out_dir=out, save_config=smd.SaveConfig(save_interval=1), save_all=True)
        hook.register_module(model)
        hook.register_loss(loss_fn)
        seconds = wl.train(model, opt, loss_fn, batches, steps)
        hook.close()
        return seconds

    return run


def overhead(workload: str, steps: int, pairs: int) -> None:
    base = tempfile.mkdtemp(prefix="smd_bench_")
    runs = iter(range(10_000))

    def inst(model, opt, loss_fn, batches, n):  # type: ignore[no-untyped-def]
        out = os.path.join(base, f"run{next(runs)}")
        try:
            return _hooked(out)(model, opt, loss_fn, batches, n)
        finally:
            shutil.rmtree(out, ignore_errors=True)

    ratio, ratios = wl.paired_ratio(workload, steps, pairs, inst)
    shutil.rmtree(base, ignore_errors=True)
    print(json.dumps({"ratio": ratio, "ratios": ratios}))


def write(workload: str, steps: int, out: str) -> None:
    model, opt, loss_fn, batches = wl.make(workload)
    _hooked(out)(model, opt, loss_fn, batches, steps)


def read(out: str) -> None:
    from smdebug.trials import create_trial

    start = time.perf_counter()
    trial = create_trial(out)
    total, count = 0, 0
    for name in trial.tensor_names():
        tensor = trial.tensor(name)
        for step in tensor.steps():
            total += tensor.value(step).nbytes
            count += 1
    print(json.dumps({"seconds": time.perf_counter() - start, "bytes": total, "values": count}))


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "overhead":
        overhead(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif cmd == "write":
        write(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        read(sys.argv[2])
