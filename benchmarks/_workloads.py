"""The benchmark workloads of spec/peers_measured.md, in plain torch (shared by trainspect's and smdebug's side).

W1: MLP 784-512-256-10, batch 128, SGD. W2: CNN conv(1->16,5)+pool, conv(16->32,5)+pool, fc 512->128->10, batch 64.
Synthetic data: 16 fixed batches with learnable labels. ``T<n>`` (T10, T100, T1000): :class:`Heads`, ``n`` parameter
tensors (n/2 parallel Linear 64->64 heads, outputs averaged), batch 32, SGD with momentum, MSE to fixed targets (the
parameter-count sweep: the per-tensor cost of a saving step). TX: a 2-layer transformer encoder (d_model 64, 4 heads,
feed-forward 128, sequences of 32, batch 16) with a linear head over the mean token, CrossEntropy over 10 classes.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

torch.set_num_threads(1)


class CNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5)
        self.conv2 = nn.Conv2d(16, 32, 5)
        self.pool = nn.MaxPool2d(2)
        self.fc1 = nn.Linear(512, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pool(torch.relu(self.conv1(x)))
        x = self.pool(torch.relu(self.conv2(x)))
        return self.fc2(torch.relu(self.fc1(x.flatten(1))))


class Heads(nn.Module):
    """``n`` parallel Linear heads whose outputs are averaged: 2n parameter tensors, none of them vanishing.

    (A deep stack of as many layers drives its activations into denormals, whose arithmetic is slow on CPUs.)
    """

    def __init__(self, n: int, width: int = 64) -> None:
        super().__init__()
        self.heads = nn.ModuleList(nn.Linear(width, width) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.stack([h(x) for h in self.heads]).mean(0)


def _make_heads(tensors: int) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, list[Any]]:
    model = Heads(tensors // 2)
    batches = [(torch.randn(32, 64), torch.randn(32, 64)) for _ in range(16)]
    return model, torch.optim.SGD(model.parameters(), lr=0.001, momentum=0.9), nn.MSELoss(), batches


class Transformer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        layer = nn.TransformerEncoderLayer(64, 4, dim_feedforward=128, batch_first=True, dropout=0.0)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(x).mean(1))


def _make_transformer() -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, list[Any]]:
    model = Transformer()
    xs = [torch.randn(16, 32, 64) for _ in range(16)]
    batches = [(x, x.sum((1, 2)).gt(0).long() + x[:, 0, :8].argmax(1) % 9) for x in xs]
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), nn.CrossEntropyLoss(), batches


def make(workload: str, seed: int = 0) -> tuple[nn.Module, torch.optim.Optimizer, nn.Module, list[Any]]:
    """Return model, optimizer, loss module and 16 fixed (x, y) batches."""
    torch.manual_seed(seed)
    if workload == "TX":
        return _make_transformer()
    if workload.startswith("T"):
        return _make_heads(int(workload[1:]))
    if workload == "W1":
        model: nn.Module = nn.Sequential(
            nn.Linear(784, 512), nn.ReLU(), nn.Linear(512, 256), nn.ReLU(), nn.Linear(256, 10)
        )
        xs = [torch.randn(128, 784) for _ in range(16)]
    else:
        model = CNN()
        xs = [torch.randn(64, 1, 28, 28) for _ in range(16)]
    proj = torch.randn(xs[0][0].numel(), 10)
    batches = [(x, (x.flatten(1) @ proj).argmax(1)) for x in xs]
    return model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), nn.CrossEntropyLoss(), batches


STEPS = {"W1": 400, "W2": 200}
BLOCK_STEPS = {"W1": 100, "W2": 32, "T10": 400, "T100": 100, "T1000": 100, "TX": 64}
"""Steps per block of :func:`toggled_ratio`: ~0.6 s or more (W1, W2, T10), else 100 (T100, T1000: ~1 s, ~6 s)."""


def train(model: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module, batches: list[Any], steps: int) -> float:
    """Train ``steps`` steps; return the seconds taken."""
    start = time.perf_counter()
    for i in range(steps):
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
    return time.perf_counter() - start


def paired_ratio(
    workload: str,
    steps: int,
    pairs: int,
    instrumented: Callable[[nn.Module, torch.optim.Optimizer, nn.Module, list[Any], int], float],
) -> tuple[float, list[float]]:
    """Median ratio of instrumented/plain over ``pairs`` pairs, each pair fresh, order alternated."""
    ratios = []
    for i in range(pairs):
        times = {}
        for kind in ("plain", "inst") if i % 2 == 0 else ("inst", "plain"):
            model, opt, loss_fn, batches = make(workload)
            train(model, opt, loss_fn, batches, 3)  # warm-up (allocator, first-call costs), not timed
            if kind == "plain":
                times[kind] = train(model, opt, loss_fn, batches, steps)
            else:
                times[kind] = instrumented(model, opt, loss_fn, batches, steps)
        ratios.append(times["inst"] / times["plain"])
    return statistics.median(ratios), ratios


def train_timed(
    model: nn.Module, opt: torch.optim.Optimizer, loss_fn: nn.Module, batches: list[Any], steps: int
) -> list[float]:
    """Train ``steps`` steps; return each step's seconds."""
    times = []
    clock = time.perf_counter
    for i in range(steps):
        start = clock()
        x, y = batches[i % len(batches)]
        opt.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        times.append(clock() - start)
    return times


def _hooked_block(
    hook: Any,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    loss_fn: nn.Module,
    batches: list[Any],
    steps: int,
    every: int | None,
    saves: list[float],
) -> None:
    """One instrumented block; with ``every``, the extra seconds of its saving steps (over the block's median step)
    are appended to ``saves`` (the training thread's cost of those steps; trainspect's step counter, benchmark-only)."""
    if every is None:
        train(model, opt, loss_fn, batches, steps)
        return
    first = hook.collector.global_step + 1
    times = train_timed(model, opt, loss_fn, batches, steps)
    median = statistics.median(times)
    saves.extend(times[at] - median for at in range(-first % every, steps, every))


def reattach(hook: Any, model: nn.Module, loss_fn: nn.Module) -> None:
    """Register ``model`` and ``loss_fn`` with a trainspect hook again after ``hook._remove_handles()``.

    Benchmark-only use of the hook's internals: the toggled benchmarks attach and detach one hook many times.
    """
    from trainspect.hooks.step_state import NO_CAPTURES  # here: the smdebug side runs without trainspect

    hook._top.clear()
    hook._params.clear()
    hook._submodules.clear()
    hook._step.captures = NO_CAPTURES
    hook._globals_installed = False
    hook.register_module(model)
    hook.register_loss(loss_fn)


def toggled_ratio(
    workload: str,
    hook_factory: Callable[[], Any],
    rounds: int,
    block_steps: int,
    every: int | None = None,
    saves: list[float] | None = None,
    cpu: dict[str, list[float]] | None = None,
) -> tuple[float, list[float], float]:
    """Instrumented/plain step-time ratio of ONE model, the hook attached and detached in turn.

    A 2-core VM drifts by ±10-25 % over seconds and two model instances (or processes) differ by 1-5 % in speed
    (memory placement), which swamps a 1-3 % overhead. Here one model trains in short blocks with the hook's PyTorch
    hooks attached or removed (same weights, same memory, adjacent in time). A round is four blocks in the order
    plain, hooked, hooked, plain (or the mirror image, alternating), which cancels a drift that is linear over the
    round; the median of the per-round ratios is reported. Each instrumented block ends with ``hook.flush()`` (its
    steps written to disk), so the background writer's work is counted, serialised, in the block that caused it.
    ``every`` (a trainspect hook saving every ``every`` steps): the training thread's extra seconds of each saving
    step are appended to ``saves``. ``cpu``: each round's extra CPU seconds per step of the hooked blocks, of the
    training thread (``"thread"``, ``time.thread_time``) and of the whole process (``"process"``: the writer threads
    too), are appended. Returns (median ratio, per-round ratios, plain ms/step).
    """
    model, opt, loss_fn, batches = make(workload)
    train(model, opt, loss_fn, batches, 5)
    hook = hook_factory()

    def attach() -> None:
        reattach(hook, model, loss_fn)

    attach()
    train(model, opt, loss_fn, batches, 5)
    hook.flush()
    hook._remove_handles()
    ratios, plain, save_times = [], [], [] if saves is None else saves
    for r in range(rounds):
        times = {"plain": 0.0, "hooked": 0.0}
        thread = {"plain": 0.0, "hooked": 0.0}
        process = {"plain": 0.0, "hooked": 0.0}
        for kind in ("plain", "hooked", "hooked", "plain") if r % 2 == 0 else ("hooked", "plain", "plain", "hooked"):
            if kind == "hooked":
                attach()
            start, t0, p0 = time.perf_counter(), time.thread_time(), time.process_time()
            if kind == "hooked":
                _hooked_block(hook, model, opt, loss_fn, batches, block_steps, every, save_times)
                hook.flush()
            else:
                train(model, opt, loss_fn, batches, block_steps)
            times[kind] += time.perf_counter() - start
            thread[kind] += time.thread_time() - t0
            process[kind] += time.process_time() - p0
            if kind == "hooked":
                hook._remove_handles()
        ratios.append(times["hooked"] / times["plain"])
        plain.append(times["plain"] / (2 * block_steps))
        if cpu is not None:
            cpu.setdefault("thread", []).append((thread["hooked"] - thread["plain"]) / (2 * block_steps))
            cpu.setdefault("process", []).append((process["hooked"] - process["plain"]) / (2 * block_steps))
    hook.close()
    return statistics.median(ratios), ratios, statistics.median(plain) * 1000


def toggled_thread_cost(
    workload: str,
    attachers: dict[str, Callable[[nn.Module, nn.Module], Callable[[], None]]],
    rounds: int,
    block_steps: int,
) -> dict[str, float]:
    """Extra training-thread CPU microseconds per step of each attacher, toggled against plain as in ``toggled_ratio``.

    ``attachers``: name -> ``attach(model, loss_fn)``, which instruments the one model and returns its ``detach``
    (called after the block; it also waits for what the block wrote). Every attacher runs in every round, each with
    its own plain blocks (plain, attached, attached, plain, or the mirror image). Returns the medians of the rounds.
    """
    model, opt, loss_fn, batches = make(workload)
    train(model, opt, loss_fn, batches, 5)
    costs: dict[str, list[float]] = {name: [] for name in attachers}
    for r in range(rounds):
        for name, attach in attachers.items():
            thread = {"plain": 0.0, "attached": 0.0}
            order = (
                ("plain", "attached", "attached", "plain") if r % 2 == 0 else ("attached", "plain", "plain", "attached")
            )
            for kind in order:
                detach = attach(model, loss_fn) if kind == "attached" else None
                t0 = time.thread_time()
                train(model, opt, loss_fn, batches, block_steps)
                if detach is not None:
                    detach()
                thread[kind] += time.thread_time() - t0
            costs[name].append((thread["attached"] - thread["plain"]) / (2 * block_steps) * 1e6)
    return {name: statistics.median(values) for name, values in costs.items()}
