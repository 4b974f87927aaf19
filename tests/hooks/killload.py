"""Kill trainings of 1–4 MB steps with SIGKILL at random times under a small byte budget (docs/format.md, Durability).

Run as a script: ``python killload.py OUT_ROOT KILLS SEED BUDGET HOGS``; prints one JSON object per kill (a list),
with HOGS busy-loop processes loading the machine meanwhile. Torch is imported once and each training is a forked
child that logs, one line per write into a file, every step it completed: its number, its loss, the last element of
the first weight it saved and the bytes the tensor queue accepted for it (0 for a step the writer degraded). What a
kill may lose is stated in bytes, not seconds: a step followed by at least ``BUDGET`` bytes of accepted later
steps must be readable, its loss exact and each of its tensors readable or a recorded gap. The bound holds whatever
the speed of the machine.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from typing import Any

import torch

import trainspect as ts
from trainspect.store import run_writer
from trainspect.store.gaps import read_gaps

torch.set_num_threads(1)
LOSS = "MSELoss_output_0"
WEIGHT = "Sequential_0.weight"
_queued: dict[int, int] = {}  # global step -> bytes the tensor queue accepted for it (0: degraded)
_names: dict[int, list[str]] = {}  # global step -> the tensors its record held before any degrading


def _observe_submit() -> None:
    """Record what each step queued (the bound is counted in the writer's own bytes, ``run_writer._nbytes``)."""
    submit = run_writer.RunWriter.submit

    def observed(self: run_writer.RunWriter, record: Any, histograms: frozenset[str] = frozenset()) -> bool:
        gaps = self.gap_steps
        ok = submit(self, record, histograms)
        _queued[record.global_step] = run_writer._nbytes(record) if ok and self.gap_steps == gaps else 0
        _names.setdefault(record.global_step, sorted(record.tensors))
        return ok

    run_writer.RunWriter.submit = observed  # type: ignore[method-assign]


def _train(out: str, log_path: str, width: int, on_backlog: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(width, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    hook = ts.torch.Hook(
        out,
        include_collections=["weights", "gradients", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
        on_backlog=on_backlog,
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(16, width), torch.randn(16, 1)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    step = 0
    while True:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        last = model[0].weight.detach().reshape(-1)[-1].item()  # the value the step saved (before its update)
        opt.step()
        doc = {"step": step, "bytes": _queued.pop(step, None), "loss": loss.item(), "last": last}
        if step == 0:
            doc["names"] = _names.get(0)
        os.write(fd, (json.dumps(doc) + "\n").encode())  # one write per step: a kill leaves whole lines
        step += 1


def _completed(log_path: str) -> list[dict[str, Any]]:
    out = []
    with open(log_path, encoding="utf-8") as fh:
        for line in fh:
            try:
                out.append(json.loads(line))
            except ValueError:  # not expected (one write per line); a torn last line is a step not logged
                break
    return out


def _one(out: str, rng: random.Random, budget: int, on_backlog: str) -> dict[str, Any]:
    width = rng.choice([128, 256, 480])  # weights + gradients: about 1, 2 and 4 MB per step
    log_path = out + ".log"
    pid = os.fork()
    if pid == 0:
        try:
            _train(out, log_path, width, on_backlog)
        finally:
            os._exit(1)
    t0 = time.monotonic()
    deadline = time.monotonic() + 120
    while not (os.path.exists(log_path) and os.path.getsize(log_path)) and time.monotonic() < deadline:
        time.sleep(0.01)  # the first step completed (the hook's start-up is not what is measured)
    t1 = time.monotonic()
    time.sleep(rng.uniform(0.3, 1.2))
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    t2 = time.monotonic()
    done = _completed(log_path)
    names = done[0]["names"] if done else []
    later, must = 0, []
    for doc in reversed(done):  # bytes accepted for the steps completed after each step
        if later >= budget:
            must.append(doc["step"])
        later += doc["bytes"] or 0
    must.reverse()
    trial = ts.create_trial(out)
    steps = trial.steps()
    saved = {name: set(trial.tensor(name).steps()) for name in trial.tensor_names()}
    gaps = {(g["step"], d[0]) for g in read_gaps(out) for d in g["dropped"]}
    losses = {d["step"]: d["loss"] for d in done}
    wrong = [s for s in steps if s in losses and float(trial.tensor(LOSS).value(s)) != losses[s]]
    lost = [(s, n) for s in must for n in names if s not in saved.get(n, ()) and (s, n) not in gaps]
    full = [s for s in must if all(s in saved.get(n, ()) for n in names)]
    checked = full[-1:] + rng.sample(full, min(3, len(full)))  # raw values read back: the newest and a few others
    lasts = {d["step"]: d["last"] for d in done}
    bad_values = [s for s in checked if float(trial.tensor(WEIGHT).value(s).reshape(-1)[-1]) != lasts[s]]
    return {
        "seconds": [round(t1 - t0, 2), round(t2 - t1, 2), round(time.monotonic() - t2, 2)],  # start, run, read back
        "width": width,
        "on_backlog": on_backlog,
        "completed": len(done),
        "must": len(must),
        "readable": len(steps),
        "missing": sorted(set(must) - set(steps)),
        "lost_tensors": lost[:5],
        "wrong": wrong,
        "bad_values": bad_values,
        "contiguous": steps == list(range(len(steps))),
        "names": len(names),
        "unlogged": sum(1 for d in done if d["bytes"] is None),
        "degraded": sum(1 for d in done if d["bytes"] == 0),
        "gap_steps": len({s for s, _ in gaps}),
        "unreadable_tail_bytes": sum(d["bytes"] or 0 for d in done if d["step"] not in set(steps)),
    }


_HOG = "import os\np = os.getppid()\nwhile os.getppid() == p:\n    for _ in range(100000): pass\n"
"""A busy loop that ends when the process that started it does (also when that one is killed)."""


def main() -> None:
    root, kills, seed, budget, hogs = (sys.argv[1], *map(int, sys.argv[2:6]))
    run_writer.MAX_PENDING_BYTES = budget  # read when the hook opens its run writer (no hook option sets it)
    _observe_submit()
    for name in ("torch._dynamo", "torch.distributed", "trainspect.hooks.torch_hook"):
        importlib.import_module(name)  # what a hook imports when it starts: once here, not in every child
    rng = random.Random(seed)
    busy = [subprocess.Popen([sys.executable, "-c", _HOG]) for _ in range(hogs)]
    results = []
    try:
        for i in range(kills):
            out = os.path.join(root, f"run{i}")
            results.append(_one(out, rng, budget, "block" if i % 2 else "degrade"))
            for dirpath, _, files in os.walk(out):  # up to a few hundred MB per run: keep the disk free
                for name in files:
                    if name.endswith(".bin"):
                        os.remove(os.path.join(dirpath, name))
    finally:
        for proc in busy:
            proc.kill()
            proc.wait()
    print(json.dumps(results))


if __name__ == "__main__":
    main()
