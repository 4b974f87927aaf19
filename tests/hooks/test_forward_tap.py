"""The registered model's forward tap (``ForwardTap``): the step starts it announces, and everything a forward
pre-hook did for free that a forward of the model's own must do itself: copies and replicas that run their own
parameters, the forward's signature, other libraries that swap a model's forward, removal."""

from __future__ import annotations

import copy
import inspect
import io
import pickle
from pathlib import Path

import torch
from torch import nn

import trainspect as ts
from trainspect.hooks.torch_callbacks import ForwardTap, tappable
from trainspect.modes import ModeKeys


class Net(nn.Module):
    """A model whose forward has its own signature (Hugging Face's ``Trainer`` reads the input columns off it)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 2)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """The net's forward."""
        out = self.fc(x)
        return out if mask is None else out * mask


def _hook(path: Path) -> ts.torch.Hook:
    return ts.torch.Hook(str(path), include_collections=["losses"], save_config=ts.SaveConfig(save_interval=1))


def _train(model: nn.Module, steps: int) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(steps):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(i))
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _steps(path: Path) -> list[int]:
    return ts.create_trial(str(path)).tensor("loss").steps()


def test_the_tap_keeps_the_forward_s_name_documentation_and_signature(tmp_path: Path) -> None:
    model = Net()
    hook = _hook(tmp_path)
    hook.register_module(model)
    assert isinstance(vars(model)["forward"], ForwardTap)
    assert list(inspect.signature(model.forward).parameters) == ["x", "mask"]
    assert model.forward.__name__ == "forward" and model.forward.__doc__ == "The net's forward."
    x = torch.ones(3, 4)
    assert torch.equal(model(x, mask=torch.zeros(3, 2)), torch.zeros(3, 2))  # keyword arguments reach the forward
    hook.close()


def test_copies_and_pickles_of_a_tapped_model_run_their_own_parameters_and_record_nothing(tmp_path: Path) -> None:
    model = Net()
    hook = _hook(tmp_path)
    hook.register_module(model)
    _train(model, 2)
    x = torch.ones(3, 4)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    copies = [copy.deepcopy(model), pickle.loads(pickle.dumps(model)), torch.load(buf, weights_only=False)]
    for clone in copies:
        assert not any(isinstance(v, ForwardTap) for v in vars(clone).values())
        with torch.no_grad():
            clone.fc.weight.zero_()
            clone.fc.bias.fill_(7.0)
        assert torch.equal(clone(x), torch.full((3, 2), 7.0))  # the copy's parameters, not the original's
    assert not torch.equal(nn.functional.linear(x, model.fc.weight, model.fc.bias), torch.full((3, 2), 7.0))
    _train(copies[0], 2)  # a copy trains unrecorded
    assert hook.collector.global_step == 1
    _train(model, 1)
    hook.close()
    assert _steps(tmp_path) == [0, 1, 2]


def test_a_data_parallel_replica_runs_its_own_parameters_and_its_passes_reach_the_hook(tmp_path: Path) -> None:
    """``DataParallel`` copies a module's ``__dict__`` to a replica per device (``_replicate_for_data_parallel``, as
    ``torch.nn.parallel.replicate`` calls it): the replica's forward must run on the replica's parameters."""
    model = nn.Linear(4, 2)
    hook = _hook(tmp_path)
    hook.register_module(model)
    seen: list[nn.Module] = []
    tap = vars(model)["forward"]
    original = tap.callback
    tap.callback = lambda module, args: seen.append(module) or original(module, args)
    replica = model._replicate_for_data_parallel()
    replica.weight = torch.zeros(2, 4)  # what replicate() sets: the device's copy of each parameter
    replica.bias = torch.full((2,), 3.0)
    assert torch.equal(replica(torch.ones(1, 4)), torch.full((1, 2), 3.0))
    assert seen == [replica]
    assert vars(model)["forward"] is tap and tap.module is model
    hook.close()
    assert "forward" not in vars(model) and "_replicate_for_data_parallel" not in vars(model)


def test_a_model_with_a_forward_of_its_own_keeps_it_in_copies_and_replicas(tmp_path: Path) -> None:
    """A forward the instance had before the hook (a wrapper of the user's, accelerate's) is what copies and
    ``DataParallel`` replicas call, not the class's."""
    model = nn.Linear(4, 2)
    own = model.forward = lambda x: torch.full((x.shape[0], 2), 5.0)
    hook = _hook(tmp_path)
    hook.register_module(model)
    x = torch.ones(3, 4)
    clone = copy.deepcopy(model)
    assert vars(clone)["forward"] is own and torch.equal(clone(x), torch.full((3, 2), 5.0))
    replica = model._replicate_for_data_parallel()
    assert torch.equal(replica(x), torch.full((3, 2), 5.0))
    hook.close()
    assert vars(model)["forward"] is own


def test_a_library_that_wraps_the_forward_after_the_hook_keeps_it_and_steps_are_still_recorded(tmp_path: Path) -> None:
    """accelerate's mixed precision wraps ``model.forward`` for good; Lightning's strategies swap it for a call and
    put it back. Either way the tap stays in the chain: the steps are recorded, and after ``close`` it passes
    through."""
    model = Net()
    hook = _hook(tmp_path)
    hook.register_module(model)
    calls = []
    inner = model.forward

    def wrapped(*args, **kwargs):
        calls.append(1)
        return inner(*args, **kwargs)

    model.forward = wrapped  # accelerate: model.forward = convert_outputs_to_fp32(autocast(model.forward))
    _train(model, 2)
    swapped, model.forward = model.forward, lambda *a, **k: None  # Lightning's _forward_redirection
    model.forward = swapped
    _train(model, 1)
    hook.close()
    assert len(calls) == 3 and _steps(tmp_path) == [0, 1, 2]
    assert vars(model)["forward"] is wrapped and inner.callback is None  # left in place, inert
    _train(model, 2)
    assert len(calls) == 5 and _steps(tmp_path) == [0, 1, 2]


def test_two_hooks_tap_one_model_and_closing_them_in_either_order_gives_the_forward_back(tmp_path: Path) -> None:
    for order in ((0, 1), (1, 0)):
        model = Net()
        own = model.forward = lambda x: x.sum(dim=1, keepdim=True)  # a forward of the instance's own (kept)
        hooks = [_hook(tmp_path / f"{order}{i}") for i in range(2)]
        for hook in hooks:
            hook.register_module(model)
        x = torch.ones(2, 4)
        with torch.no_grad():
            assert torch.equal(model(x), torch.full((2, 1), 4.0))
        assert all(hook.collector.mode_steps[ModeKeys.EVAL] == 0 for hook in hooks)  # both saw the pass
        hooks[order[0]].close()
        assert "_replicate_for_data_parallel" in vars(model)  # the other hook's tap still needs its replicas
        hooks[order[1]].close()
        assert vars(model)["forward"] is own and "_replicate_for_data_parallel" not in vars(model)


def test_a_compiled_scripted_or_lightning_model_keeps_a_forward_pre_hook(tmp_path: Path) -> None:
    """A LightningModule's training step reaches it through its call with ``forward`` swapped out (Lightning's
    strategies): only a module hook sees it (tests/distributed: ``ddp_spawn`` with the model registered first)."""
    import lightning as L

    class Lit(L.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(2, 2)

    assert tappable(nn.Linear(2, 2))
    assert not tappable(torch.compile(nn.Linear(2, 2)))
    assert not tappable(torch.jit.script(nn.Linear(2, 2)))
    lit = Lit()
    assert not tappable(lit)
    hook = _hook(tmp_path)
    hook.register_module(lit)
    assert len(lit._forward_pre_hooks) == 1 and "forward" not in vars(lit)
    hook.close()
    assert len(lit._forward_pre_hooks) == 0


_SPAWNED = """
import sys
import torch
import torch.multiprocessing as mp
import trainspect as ts


def train(rank, model):
    torch.set_num_threads(1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for i in range(3):
        x = torch.randn(8, 4, generator=torch.Generator().manual_seed(i))
        loss = model(x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    print(type(vars(model)["forward"]).__name__)


if __name__ == "__main__":
    torch.set_num_threads(1)
    model = torch.nn.Linear(4, 2)
    hook = ts.torch.Hook(sys.argv[1], include_collections=["losses"])
    hook.register_module(model)
    mp.spawn(train, args=(model,), nprocs=1)
"""


def test_a_model_registered_before_mp_spawn_is_recorded_by_the_spawned_process(tmp_path: Path) -> None:
    """The tap travels to a spawned process as its hook's ticket (``torch.multiprocessing.spawn`` pickles the model):
    the child's hook registers the model at its first forward pass and records its steps."""
    import subprocess
    import sys

    script = tmp_path / "spawned.py"
    script.write_text(_SPAWNED)
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, str(script), str(out)], capture_output=True, text=True, cwd=tmp_path, timeout=180
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["ForwardTap"]
    assert _steps(out) == [0, 1, 2]
