"""A hooked model, optimizer or loss can be saved, deep-copied and pickled; the copy carries no hook (issue 14)."""

from __future__ import annotations

import copy
import io
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch
from hooktrain import LOSS, Tiny

import trainspect as ts
from trainspect.hooks.torch_callbacks import ForwardTap

COPIERS = {
    "torch.save": lambda obj: torch.load(_saved(obj), weights_only=False),
    "deepcopy": copy.deepcopy,
    "pickle": lambda obj: pickle.loads(pickle.dumps(obj)),
}


class CountCalls:
    """A user's own forward hook (picklable, so it travels with the copies)."""

    calls = 0

    def __call__(self, module: object, args: object, output: object) -> None:
        CountCalls.calls += 1


def _saved(obj: object) -> io.BytesIO:
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("how", list(COPIERS))
def test_hooked_objects_copy_without_the_hook_and_training_goes_on(out_dir, how):
    tiny = Tiny()
    hook = ts.torch.Hook(str(out_dir), include_collections=["weights", "gradients", "losses"])
    tiny.register(hook)
    tiny.model.register_forward_hook(CountCalls())  # the user's own hook survives copies
    tiny.train(2)
    model, opt, loss_fn = (COPIERS[how](o) for o in (tiny.model, tiny.opt, tiny.loss_fn))
    assert [type(h) for h in model._forward_hooks.values()] == [CountCalls]
    assert len(model._forward_pre_hooks) == 0 and len(loss_fn._forward_hooks) == 0
    assert opt.param_groups[0]["lr"] == tiny.opt.param_groups[0]["lr"]
    before = CountCalls.calls
    model(tiny.x)  # the copy runs, with the user's hook and none of trainspect's
    assert CountCalls.calls == before + 1
    tiny.train(2)  # the original goes on recording
    hook.close()
    trial = ts.create_trial(str(out_dir))
    assert trial.steps() == [0, 1, 2, 3]
    assert trial.tensor(LOSS).steps() == [0, 1, 2, 3]


def test_a_model_with_user_hooks_registered_first_still_copies(out_dir):
    tiny = Tiny()
    handle = tiny.model.register_forward_pre_hook(lambda m, a: None)
    hook = ts.torch.Hook(str(out_dir), include_collections=["losses"])
    tiny.register(hook)
    tiny.train(1)
    clone = copy.deepcopy(tiny.model)
    for _ in range(3):
        clone(tiny.x)  # trainspect's callbacks are inert in the copy: no step is opened by it
    assert "forward" not in vars(clone) or not isinstance(vars(clone)["forward"], ForwardTap)
    handle.remove()  # the user's handle still removes the user's hook
    assert len(tiny.model._forward_pre_hooks) == 0  # trainspect's own call is the model's forward (ForwardTap)
    assert isinstance(vars(tiny.model)["forward"], ForwardTap)
    tiny.train(1)
    hook.close()
    assert ts.create_trial(str(out_dir)).steps() == [0, 1]


def test_torch_compile_still_works_with_a_hook(out_dir):
    tiny = Tiny()
    hook = ts.torch.Hook(str(out_dir), include_collections=["losses"])
    tiny.register(hook)
    compiled = torch.compile(tiny.model, backend="eager")
    for _ in range(3):
        tiny.opt.zero_grad()
        tiny.loss_fn(compiled(tiny.x), tiny.y).backward()
        tiny.opt.step()
    hook.close()
    assert ts.create_trial(str(out_dir)).tensor(LOSS).steps() == [0, 1, 2]


def test_torch_save_of_the_model_under_trainspect_run(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            """
            import torch
            import torch.nn.functional as F
            torch.set_num_threads(1)
            model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
            opt = torch.optim.SGD(model.parameters(), lr=0.01)
            x, y = torch.randn(16, 4), torch.randn(16, 1)
            for step in range(5):
                opt.zero_grad()
                F.mse_loss(model(x), y).backward()
                opt.step()
                with open("model.pt", "wb") as f:
                    torch.save(model, f)   # as pytorch/examples/word_language_model does
            print(type(torch.load("model.pt", weights_only=False)).__name__)
            """
        )
    )
    out = tmp_path / "run"
    proc = subprocess.run(
        [sys.executable, "-m", "trainspect.cli", "run", "--out", str(out), "--", sys.executable, str(script)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    assert "Sequential" in proc.stdout
    assert ts.create_trial(str(out)).tensor("MSELoss_output_0").steps() == [0, 1, 2, 3, 4]
