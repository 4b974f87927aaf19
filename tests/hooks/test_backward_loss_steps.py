"""Issue 15 points 4-5: the backpropagated loss, gradient accumulation, loops without an optimizer, late saves."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import trainspect as ts
from trainspect.modes import ModeKeys
from trainspect.rules.engine import evaluate

torch.set_num_threads(1)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))


def _batches(n: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(6, 4, generator=gen), torch.randn(6, 1, generator=gen)) for _ in range(n)]


def test_gradient_accumulation_is_one_step_per_optimizer_step_from_the_first(tmp_path) -> None:
    model = _model()
    hook = ts.torch.Hook(
        tmp_path, include_collections=["losses", "gradients"], save_config=ts.SaveConfig(save_interval=1)
    )
    hook.register_module(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    micro, grads = [], []
    batches = iter(_batches(6))
    for _ in range(3):
        values = []
        for _ in range(2):
            x, y = next(batches)
            loss = F.mse_loss(model(x), y)  # functional loss, manual hook, no register_loss
            values.append(loss.item())
            loss.backward()
        micro.append(values)
        grads.append(model[0].weight.grad.clone().numpy())
        opt.step()
        opt.zero_grad()
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert "loss" in trial.tensor_names(collection="losses")
    assert "loss_micro_batches" not in trial.tensor_names(collection="losses")
    for step, values in enumerate(micro):
        assert float(trial.tensor("loss").value(step)) == pytest.approx(np.mean(values), rel=1e-6)
        np.testing.assert_allclose(trial.tensor("loss_micro_batches").value(step), values, rtol=1e-6)
        # the gradient as accumulated over both micro-batches, as optimizer.step() used it
        np.testing.assert_allclose(trial.tensor("gradient/Sequential_0.weight").value(step), grads[step], rtol=1e-6)


def test_vae_style_loss_records_the_sum_that_is_backpropagated(tmp_path) -> None:
    torch.manual_seed(0)
    enc, dec = nn.Linear(8, 4), nn.Linear(2, 8)
    model = nn.ModuleDict({"enc": enc, "dec": dec})
    bce_fn = nn.BCELoss(reduction="sum")
    hook = ts.torch.Hook(tmp_path)
    hook.register_module(enc)
    hook.register_loss(bce_fn)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(5, 8)
    totals, bces = [], []
    for _ in range(3):
        opt.zero_grad()
        mu, logvar = enc(x).chunk(2, dim=1)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        bce = bce_fn(torch.sigmoid(dec(z)), x)
        kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
        loss = bce + kld
        loss.backward()
        opt.step()
        totals.append(loss.item())
        bces.append(bce.item())
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert sorted(trial.tensor_names(collection="losses")) == ["BCELoss_output_0", "loss"]
    assert [float(v) for v in trial.tensor("loss").values().values()] == pytest.approx(totals, rel=1e-6)
    assert [float(v) for v in trial.tensor("BCELoss_output_0").values().values()] == pytest.approx(bces, rel=1e-6)
    assert totals != pytest.approx(bces)


def test_a_loop_without_an_optimizer_counts_one_step_per_forward(tmp_path) -> None:
    # as pytorch/examples' word_language_model: manual SGD on p.data, no torch.optim object for this model
    other = nn.Linear(2, 2)
    other_opt = torch.optim.SGD(other.parameters(), lr=0.1)  # an optimizer exists in the process, not for this model
    model = _model()
    hook = ts.torch.Hook(tmp_path, save_config=ts.SaveConfig(save_interval=1))
    hook.register_module(model)
    seen = []
    for x, y in _batches(5):
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-0.05)
        seen.append(loss.item())
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3, 4]
    assert [float(v) for v in trial.tensor("loss").values().values()] == pytest.approx(seen, rel=1e-6)
    assert "loss_micro_batches" not in trial.tensor_names()
    assert other_opt.param_groups[0]["params"][0] is other.weight  # it was alive the whole time


def test_save_scalar_between_steps_joins_the_last_step(tmp_path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    hook = ts.torch.Hook(tmp_path)
    hook.register_module(model)
    hook.save_scalar("before_training", 1.0)  # before any step: saved at the first
    for epoch in range(3):
        for x, y in _batches(4):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()
            opt.step()
        hook.save_scalar("epoch", epoch)
        hook.save_tensor("epoch_marker", torch.tensor([epoch, epoch]))
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(12))  # 12 batches, 12 steps
    assert trial.tensor("scalar/epoch").steps() == [3, 7, 11]
    assert {s: float(v) for s, v in trial.tensor("scalar/epoch").values().items()} == {3: 0.0, 7: 1.0, 11: 2.0}
    assert trial.tensor("epoch_marker").value(11).tolist() == [2, 2]
    assert trial.tensor("scalar/before_training").steps() == [0]
    assert trial.tensor("loss").steps() == list(range(12))


def test_grad_scaler_records_the_unscaled_loss_and_skipped_steps_still_end(tmp_path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    hook = ts.torch.Hook(tmp_path)
    hook.register_module(model)
    seen = []
    for i, (x, y) in enumerate(_batches(8)):
        loss = F.mse_loss(model(x), y) / 2
        if i == 2:
            loss = loss * float("inf")  # this optimizer step is skipped by the scaler
        seen.append(loss.item())
        scaler.scale(loss).backward()
        if i % 2 == 1:
            scaler.step(opt)
            scaler.update()
            opt.zero_grad()
    hook.close()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3]
    got = [trial.tensor("loss_micro_batches").value(s).tolist() for s in range(4)]
    assert got == [pytest.approx(seen[i : i + 2], rel=1e-6) for i in range(0, 8, 2)]


def test_loss_not_decreasing_judges_the_backpropagated_loss_without_a_registered_loss(tmp_path) -> None:
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.0)  # nothing learns: the loss cannot decrease
    x, y = _batches(1)[0]
    with ts.torch.Hook(tmp_path) as hook:
        hook.register_module(model)
        for _ in range(80):  # the rule judges a stall after five windows of num_steps (10) steps
            opt.zero_grad()
            (model(x) - y).abs().mean().backward()  # no loss module, no functional loss
            opt.step()
    verdict = evaluate(ts.create_trial(tmp_path), [ts.rules.LossNotDecreasing()], write=False)[0]
    assert verdict.tensors == ("loss",)
    assert verdict.status.value == "IssuesFound"


def test_the_tap_is_removed_when_the_last_hook_closes(tmp_path) -> None:
    original = torch.autograd.backward
    hook = ts.torch.Hook(tmp_path)
    hook.register_module(_model())
    assert torch.autograd.backward is not original
    hook.close()
    assert torch.autograd.backward is original


def test_an_internal_failure_in_the_tap_never_reaches_training(tmp_path, monkeypatch, caplog) -> None:
    from trainspect.hooks import torch_backward

    def broken(tensor):
        raise RuntimeError("boom")

    monkeypatch.setenv("TRAINSPECT_TESTING", "0")
    monkeypatch.setattr(torch_backward.LossTap, "notify", lambda self, tensors: broken(tensors))
    model = _model()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = model[0].weight.detach().clone()
    with ts.torch.Hook(tmp_path) as hook:
        hook.register_module(model)
        for x, y in _batches(3):
            opt.zero_grad()
            F.mse_loss(model(x), y).backward()  # training goes on; the gradients are computed
            opt.step()
    assert not torch.equal(before, model[0].weight)
    assert sum("recording losses failed in backward" in r.getMessage() for r in caplog.records) == 1
    trial = ts.create_trial(tmp_path)
    # the tap stopped listening at the first failure (after step 0's functional loss); the hook itself goes on
    assert trial.tensor("MSELoss_output_0").steps() == [0] and "loss" not in trial.tensor_names()
    assert not hook.disabled


def test_a_loss_first_recorded_mid_run_is_listed_before_the_hook_closes(tmp_path) -> None:
    """Steps that save only known losses skip the membership check; a new loss name still reaches the file."""
    import json

    model, out = _model(), tmp_path / "run"
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    hook = ts.torch.Hook(str(out))
    hook.register_module(model)
    for i, (x, y) in enumerate(_batches(10)):
        opt.zero_grad()
        pred = model(x)
        loss = F.mse_loss(pred, y) if i >= 5 else (pred - y).pow(2).mean()  # a functional loss from step 5
        loss.backward()
        opt.step()
    assert hook.flush(30)
    files = list(out.rglob("collections.json"))
    assert len(files) == 1
    members = json.loads(files[0].read_text())["collections"]["losses"]["tensor_names"]
    assert {"loss", "MSELoss_output_0"} <= set(members)  # written while the hook is still open
    hook.close()
    trial = ts.create_trial(str(out))
    assert trial.tensor("MSELoss_output_0").steps() == [5, 6, 7, 8, 9]
    assert trial.tensor("loss").steps() == list(range(10))
