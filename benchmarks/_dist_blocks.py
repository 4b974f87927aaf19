"""One distributed job (run under torchrun) for benchmarks/bench_distributed.py: blocks with and without trainspect.

    torchrun --standalone --nproc_per_node N benchmarks/_dist_blocks.py --engine {ddp,fsdp2} --hidden H --out DIR

Every rank trains ONE model (DDP, or FSDP2 ``fully_shard`` per layer) in blocks of ``--steps`` steps: plain, with the
default capture (losses every step), or with weights, gradients and losses every 100 steps (``include_workers="all"``:
every rank records its pieces of the sharded parameters). All ranks run the same block order, a round being
plain, default, wg, wg, default, plain (or the mirror image), so that a drift linear over the round cancels. A hooked
block gets a new hook, opened before the block and closed after it (outside the timing); the block's time includes
``hook.flush()`` (its steps written), so the writer's work counts where it happens. Each rank reports the median over
rounds of its own ratios, and the collectives the job called per step in each kind of block (counted at
``torch.distributed``'s Python functions; DDP's bucketed all-reduces run in C++ and are the same either way).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections import Counter
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import trainspect as ts

_COLLECTIVES = (
    "all_reduce",
    "all_gather",
    "all_gather_into_tensor",
    "reduce_scatter_tensor",
    "reduce_scatter",
    "broadcast",
    "barrier",
    "gather",
    "scatter",
    "all_to_all",
    "all_to_all_single",
    "reduce",
    "all_gather_object",
    "broadcast_object_list",
    "all_gather_single",
    "reduce_scatter_single",
    "all_reduce_coalesced",
    "all_gather_coalesced",
    "send",
    "recv",
    "isend",
    "irecv",
    "batch_isend_irecv",
)
COUNTS: Counter[str] = Counter()


def _count_collectives() -> None:
    c10d = dist.distributed_c10d
    for name in _COLLECTIVES:
        original = getattr(dist, name, None) or getattr(c10d, name, None)
        if original is None:
            continue

        def counted(*args: Any, _name: str = name, _original: Any = original, **kwargs: Any) -> Any:
            COUNTS[_name] += 1
            return _original(*args, **kwargs)

        for module in (dist, c10d):
            if getattr(module, name, None) is original:
                setattr(module, name, counted)


def _model(engine: str, hidden: int) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Linear(256, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10)
    )
    if engine == "ddp":
        return nn.parallel.DistributedDataParallel(model)
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    for layer in model:
        if isinstance(layer, nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


_KINDS: dict[str, dict[str, Any] | None] = {
    "plain": None,
    "default": {},
    "wg": {
        "include_collections": ["weights", "biases", "gradients", "losses"],
        "save_config": ts.SaveConfig(save_interval=100),
        "include_workers": "all",
    },
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--engine", default="ddp", choices=["ddp", "fsdp2"])
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--out", default=tempfile.mkdtemp(prefix="bench-dist-"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    end_of_job = dist.new_group(backend="gloo")  # see examples/ddp_train.py: no barrier on the training group at exit
    rank = dist.get_rank()
    model = _model(args.engine, args.hidden)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(rank)
    batches = [(torch.randn(64, 256, generator=gen), torch.randint(0, 10, (64,), generator=gen)) for _ in range(8)]

    def block(kind: str, index: int) -> float:
        hook = None
        settings = _KINDS[kind]
        if settings is not None:
            hook = ts.torch.Hook(os.path.join(args.out, f"{index}-{kind}"), **settings)
            hook.register_module(model)
            hook.register_loss(loss_fn)
            hook.collector.open(final=True)  # the run's files are claimed before the timing starts
        dist.barrier(group=end_of_job)
        start = time.perf_counter()
        for i in range(args.steps):
            x, y = batches[i % len(batches)]
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        if hook is not None:
            hook.flush()
        seconds = time.perf_counter() - start
        if hook is not None:
            hook.close()
        return seconds / args.steps

    _count_collectives()
    block("plain", -1)
    block("default", -2)  # warm both paths up
    ratios: dict[str, list[float]] = {"default": [], "wg": []}
    plain_ms: list[float] = []
    calls: dict[str, Counter[str]] = {kind: Counter() for kind in _KINDS}
    index = 0
    for r in range(args.rounds):
        order = ("plain", "default", "wg", "wg", "default", "plain")
        times: dict[str, float] = {kind: 0.0 for kind in _KINDS}
        for kind in order if r % 2 == 0 else order[::-1]:
            COUNTS.clear()
            times[kind] += block(kind, index)
            calls[kind] += COUNTS
            index += 1
        plain_ms.append(times["plain"] / 2 * 1e3)
        for kind in ratios:
            ratios[kind].append(times[kind] / times["plain"])
    per_step = {kind: sum(c.values()) / (2 * args.rounds * args.steps) for kind, c in calls.items()}
    mine = {
        "rank": rank,
        "plain_ms": statistics.median(plain_ms),
        "per_step_collectives": per_step,
        **{kind: statistics.median(values) for kind, values in ratios.items()},
    }
    gathered: list[Any] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine, group=end_of_job)
    if rank == 0:
        print("RANKS " + json.dumps(gathered))
    dist.barrier(group=end_of_job)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
