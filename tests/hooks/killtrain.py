"""Kill trainings with SIGKILL at random times and report what each run directory still holds (issue 14).

Run as a script: ``python killtrain.py OUT_ROOT KILLS SEED``; prints one JSON object. Torch is imported once and each
training is a forked child, so a kill costs a fraction of a second.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import signal
import sys
import time

import torch

import trainspect as ts

torch.set_num_threads(1)
BOUND = 0.5  # docs/format.md: every step completed more than this many seconds before a SIGKILL is readable
PAUSE = 0.002  # seconds between steps (data loading): the bound is about the writer's tick, not its throughput


def _train(out: str, fd: int, size: int) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, size), torch.nn.ReLU(), torch.nn.Linear(size, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.MSELoss()
    # the run directory's tensors only (no TensorBoard histograms): the writer's work per step stays small enough to
    # keep up on a loaded machine, where the time bound is promised (the byte bound under load: test_sigkill_load.py)
    hook = ts.torch.Hook(
        out,
        include_collections=["weights", "gradients", "losses"],
        save_config=ts.SaveConfig(save_interval=1),
        export_tensorboard=False,
    )
    hook.register_module(model)
    hook.register_loss(loss_fn)
    x, y = torch.randn(64, 32), torch.randn(64, 1)
    step = 0
    while True:
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        os.write(fd, f"{step} {time.time()!r} {loss.item()!r}\n".encode())
        step += 1
        time.sleep(PAUSE)  # small steps at up to ~500 a second, not a busy loop that starves the writer's thread


def _one(out: str, rng: random.Random) -> dict[str, object]:
    read_fd, write_fd = os.pipe()
    size = rng.choice([16, 256, 1024])
    pid = os.fork()
    if pid == 0:
        os.close(read_fd)
        try:
            _train(out, write_fd, size)
        finally:
            os._exit(1)
    os.close(write_fd)
    reader = os.fdopen(read_fd)
    first = reader.readline()
    time.sleep(rng.uniform(0.05, 0.9))
    os.kill(pid, signal.SIGKILL)
    killed_at = time.time()
    os.waitpid(pid, 0)
    done = [line.split() for line in [first, *reader.read().splitlines()] if line.strip()]
    reader.close()
    losses = {int(s): float(v) for s, _, v in done}
    must = [int(s) for s, t, _ in done if float(t) < killed_at - BOUND]
    trial = ts.create_trial(out)
    steps = trial.steps()
    wrong = [s for s in steps if s in losses and float(trial.tensor("MSELoss_output_0").value(s)) != losses[s]]
    return {
        "size": size,
        "completed": len(done),
        "must": len(must),
        "readable": len(steps),
        "missing": sorted(set(must) - set(steps)),
        "wrong": wrong,
        "contiguous": steps == list(range(len(steps))),
    }


def main() -> None:
    root, kills, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    for name in ("torch._dynamo", "torch.distributed", "trainspect.hooks.torch_hook"):
        importlib.import_module(name)  # what a hook imports when it starts: once here, not in every child
    rng = random.Random(seed)
    print(json.dumps([_one(os.path.join(root, f"run{i}"), rng) for i in range(kills)]))


if __name__ == "__main__":
    main()
