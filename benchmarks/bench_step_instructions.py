"""Instructions per loss-only step on the training thread, counted by valgrind (issue 33's per-step cost, without noise).

    .venv/bin/python benchmarks/bench_step_instructions.py [--steps 200]     # ~4 min; needs valgrind (Debian package)

``bench_hook.py`` measures the per-step cost in CPU microseconds; on a shared 2-core VM the same configuration prints
figures 2x apart in back-to-back runs, so a change of a few microseconds cannot be seen there. Instructions are
counted exactly: this script runs itself under ``valgrind --tool=callgrind`` and, in one process, trains T10 (10
parameter tensors, as bench_hook's per-step line) ``--steps`` steps with each of, in turn:

* plain: no instrumentation;
* PyTorch's hooking alone (bench_hook's: a no-op forward of the model's own and optimizer hooks, pass-through
  backward and loss wrappers): what any recorder built on PyTorch's hooks pays before doing anything;
* a minimal recorder (:func:`_minimal_recorder`, benchmark-only): the same events doing the same work as the default
  capture's steady step (the step's count and time, the loss read once under two names, one queue item per step),
  and nothing else (no modes, no accumulation, no writer, no guard): a floor, not a design;
* trainspect with its per-step event handlers as no-ops (its patches, loss tap and callbacks);
* trainspect (the default capture);
* plain again (the drift of the count itself: allocator and garbage collector state).

Each is counted between two marker calls (``os.getppid`` zeroes the counters, ``os.getpgrp`` dumps them), after
warm-up steps, a flush of the writers and a garbage collection. The table gives the training thread's instructions
per step and the extra over plain. The writer threads are not counted (bench_hook's "whole process" line has them).
"""

from __future__ import annotations

import argparse
import collections
import gc
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

VARIANTS = ("plain", "hooking", "minimal", "no-op handlers", "trainspect", "plain again")
LABELS = {
    "plain": "plain loop",
    "hooking": "PyTorch's hooking alone",
    "minimal": "a minimal recorder (floor)",
    "no-op handlers": "trainspect, handlers as no-ops",
    "trainspect": "trainspect (default capture)",
    "plain again": "plain loop again (drift)",
}


def _minimal_recorder(model: Any, loss_fn: Any, queue: collections.deque[Any] | None = None) -> Any:
    """Benchmark-only: the default capture's steady-step work in four callbacks; returns the detach.

    Each step queues ``(step, time, {"MSELoss_output_0": loss, "loss": loss})`` on ``queue`` (a new deque if None).
    """
    import bench_hook as bh
    import torch
    import torch.nn.functional as F  # noqa: N812
    from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

    queue = collections.deque() if queue is None else queue
    state: dict[str, Any] = {"open": False, "training": False, "step": 0, "time": 0.0, "values": {}, "last": None}

    def forward_pre(module: Any, args: Any) -> None:
        training = module.training and torch.is_grad_enabled()
        if not (state["open"] and training and state["training"]):  # else: a further micro-batch of the step
            state.update(open=True, training=training, step=state["step"] + 1, time=time.time(), values={})

    def add(name: str, tensor: Any) -> None:
        last = state["last"]
        value = last[1] if last is not None and last[0] is tensor else tensor.item()
        state["last"] = (tensor, value)
        state["values"][name] = value

    backward, mse_loss = torch.autograd.backward, F.mse_loss

    def tapped_backward(tensors: Any, *args: Any, **kwargs: Any) -> Any:
        if state["open"]:
            add("loss", tensors)
        return backward(tensors, *args, **kwargs)

    def tapped_mse_loss(*args: Any, **kwargs: Any) -> Any:
        out = mse_loss(*args, **kwargs)
        if state["open"]:
            add("MSELoss_output_0", out)
        return out

    def optimizer_post(optimizer: Any, args: Any, kwargs: Any) -> None:
        if state["open"]:
            queue.append((state["step"], state["time"], state["values"]))
            state.update(open=False, last=None)

    handles = [
        bh.OwnForward(model, forward_pre),
        register_optimizer_step_pre_hook(lambda optimizer, args, kwargs: None),
        register_optimizer_step_post_hook(optimizer_post),
    ]
    torch.autograd.backward, F.mse_loss = tapped_backward, tapped_mse_loss

    def detach() -> None:
        for handle in handles:
            handle.remove()
        torch.autograd.backward, F.mse_loss = backward, mse_loss

    return detach


def _count(steps: int) -> None:
    """In the process valgrind runs: train each variant between the two markers."""
    import _workloads as wl
    import bench_hook as bh
    import torch

    import trainspect as ts

    torch.set_num_threads(1)
    model, opt, loss_fn, batches = wl.make("T10")
    wl.train(model, opt, loss_fn, batches, 20)
    base = tempfile.mkdtemp(prefix="trainspect-instructions-")
    for name in VARIANTS:
        hook = None
        if name in ("no-op handlers", "trainspect"):
            hook = ts.torch.Hook(os.path.join(base, name.replace(" ", "-")))
            attach = bh._hook_attacher(hook, bh._EVENT_HANDLERS if name == "no-op handlers" else {})
        elif name == "hooking":
            attach = bh._hooking_alone
        elif name == "minimal":
            attach = _minimal_recorder
        else:
            attach = lambda model, loss_fn: lambda: None  # noqa: E731
        detach = attach(model, loss_fn)
        wl.train(model, opt, loss_fn, batches, 30)
        if hook is not None:
            hook.flush()
        gc.collect()
        gc.freeze()  # the heap of the imports is not scanned by the collections the steps cause
        os.getppid()  # valgrind: --zero-before=getppid
        wl.train(model, opt, loss_fn, batches, steps)
        os.getpgrp()  # valgrind: --dump-before=getpgrp
        detach()
        if hook is not None:
            hook.disabled = name == "no-op handlers"  # it recorded nothing: no warning saying so
            hook.close()  # its loss tap listener goes with it: later variants do not call it
    shutil.rmtree(base, ignore_errors=True)


def _read_dumps(out: Path) -> list[int]:
    """The training thread's instruction count of each marker window, in order."""
    counts = []
    for path in out.glob("cg.*-01"):
        match = re.fullmatch(r"cg\.(\d+)-01", path.name)
        text = path.read_text(errors="replace")
        if match is None or "getpgrp" not in (re.search(r"^desc: Trigger: (.*)$", text, re.M) or [""])[0]:
            continue
        total = re.search(r"^(?:summary|totals): (\d+)", text, re.M)
        if total:
            counts.append((int(match.group(1)), int(total.group(1))))
    return [count for _, count in sorted(counts)]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--inside", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.inside:
        _count(args.steps)
        os._exit(0)  # no interpreter teardown under valgrind
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind not found (Debian: apt-get install -y valgrind): nothing counted")
        return
    out = Path(tempfile.mkdtemp(prefix="trainspect-callgrind-"))
    try:
        command = [
            valgrind,
            "--tool=callgrind",
            "--separate-threads=yes",
            "--zero-before=getppid",
            "--dump-before=getpgrp",
            f"--callgrind-out-file={out / 'cg'}",
            sys.executable,
            os.path.abspath(__file__),
            "--steps",
            str(args.steps),
            "--inside",
        ]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "0"}
        started = time.monotonic()
        proc = subprocess.run(command, capture_output=True, text=True, env=env)
        counts = _read_dumps(out)
        if proc.returncode or len(counts) != len(VARIANTS):
            print(f"valgrind run failed (rc {proc.returncode}, {len(counts)} windows):\n{proc.stderr[-2000:]}")
            sys.exit(1)
    finally:
        shutil.rmtree(out, ignore_errors=True)
    per_step = dict(zip(VARIANTS, (count / args.steps for count in counts), strict=True))
    plain, hooking = per_step["plain"], per_step["hooking"]
    print(
        f"instructions per loss-only step on the training thread, T10, {args.steps} steps each, counted by "
        f"valgrind ({time.monotonic() - started:.0f} s):"
    )
    print(f"  {'':34s} {'per step':>10s} {'over plain':>11s} {'over hooking alone':>19s}")
    for name in VARIANTS:
        extra = per_step[name] - plain
        beyond = per_step[name] - hooking if name not in ("plain", "plain again", "hooking") else None
        print(
            f"  {LABELS[name]:34s} {per_step[name]:10.0f} {extra:+11.0f} {'' if beyond is None else f'{beyond:+19.0f}'}"
        )
    own = per_step["trainspect"] - hooking
    floor = per_step["minimal"] - hooking
    print(
        f"  trainspect's own work (over PyTorch's hooking) is {own / floor:.1f}x the minimal recorder's; "
        f"its whole cost {(per_step['trainspect'] - plain) / (per_step['minimal'] - plain):.2f}x the floor's"
    )


if __name__ == "__main__":
    main()
