"""Classic FSDP (``FullyShardedDataParallel``) on 2 ranks, ``--option orig`` for ``use_orig_params=True``.

Layer ``a`` is wrapped on its own (a nested FSDP instance); ``b`` and ``c`` share the root's flat parameter, split
across the ranks in the middle of ``b.weight``. The expected gradient is the mean of the ranks' local gradients,
computed on an unsharded copy of the model with the weights ``summon_full_params`` gives.
"""

from __future__ import annotations

import copy

import torch
import torch.distributed as dist
from _common import STEPS, Expected, Net, args, batch, finish, hook
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP  # noqa: N817


def main() -> None:
    opts = args()
    dist.init_process_group("gloo")
    torch.manual_seed(0)
    net = Net()
    orig = opts.option == "orig"
    cpu = torch.device("cpu")
    net.a = FSDP(net.a, use_orig_params=orig, device_id=cpu)
    model = FSDP(net, use_orig_params=orig, device_id=cpu)
    h = hook(opts.out)
    h.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    expected = Expected()
    for step in range(STEPS):
        with FSDP.summon_full_params(model, writeback=False):
            weights = {n.replace("_fsdp_wrapped_module.", ""): p.detach().clone() for n, p in model.named_parameters()}
        expected.add("w", step, weights)
        x = batch(step)
        loss = model(x).pow(2).mean()
        loss.backward()
        expected.add("g", step, _mean_local_gradient(weights, x))
        opt.step()
        opt.zero_grad()
    finish(h, expected, opts.out)


def _mean_local_gradient(weights: dict[str, torch.Tensor], x: torch.Tensor) -> dict[str, torch.Tensor]:
    plain = Net()
    plain.load_state_dict(copy.deepcopy(weights))
    grads = torch.autograd.grad(plain(x).pow(2).mean(), list(plain.parameters()))
    out = {}
    for (name, _), g in zip(plain.named_parameters(), grads, strict=True):
        dist.all_reduce(g)
        out[name] = g / dist.get_world_size()
    return out


if __name__ == "__main__":
    main()
