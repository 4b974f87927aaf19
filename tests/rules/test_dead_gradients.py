"""Issue 28: dead gradients, zero-initialised weights, EMA copies and empty weights on small real trainings.

Each training runs on the CPU inside the test, recorded through the torch Hook with the weights, biases,
gradients and losses, then judged offline by VanishingGradient and WeightUpdateRatio at their defaults.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from rules_synth import run, step, tensor
from torch import nn

import trainspect as ts
from trainspect.rules import ExplodingTensor, Status, VanishingGradient, Verdict, WeightUpdateRatio, evaluate

torch.set_num_threads(1)

COLLECTIONS = ["weights", "biases", "gradients", "losses"]


def _images(n: int = 512, seed: int = 1, noise: float = 0.25) -> tuple[torch.Tensor, torch.Tensor]:
    """8x8 images, class = the quadrant holding a bright square; a share ``noise`` of the labels is random."""
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 4, (n,), generator=g)
    x = torch.randn(n, 1, 8, 8, generator=g) * 0.5
    for q in range(4):
        r, c = divmod(q, 2)
        x[y == q, :, r * 4 : r * 4 + 4, c * 4 : c * 4 + 4] += 1.5
    flip = torch.rand(n, generator=g) < noise
    return x, torch.where(flip, torch.randint(0, 4, (n,), generator=g), y)


class ReluCNN(nn.Module):
    """Two ReLU convolutions and a linear head."""

    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.relu1 = nn.Conv2d(1, 8, 3, padding=1), nn.ReLU()
        self.conv2, self.relu2 = nn.Conv2d(8, 8, 3, padding=1), nn.ReLU()
        self.fc = nn.Linear(8 * 16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.relu2(self.conv2(self.relu1(self.conv1(x))))
        return self.fc(nn.functional.max_pool2d(h, 2).flatten(1))


def _train(
    out: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    steps: int,
    every: int = 5,
    after_step: Callable[[int], None] | None = None,
    others: tuple[nn.Module, ...] = (),
) -> list[float]:
    """Train on the image task, recorded every ``every`` steps; return the losses."""
    x, y = _images()
    loss_fn = nn.CrossEntropyLoss()
    losses = []
    config = ts.SaveConfig(save_interval=every)
    with ts.torch.Hook(out, export_tensorboard=False, save_config=config, include_collections=COLLECTIONS) as hook:
        hook.register_module(model)
        for other in others:
            hook.register_module(other)
        hook.register_loss(loss_fn)
        for s in range(steps):
            i = (s * 32) % x.shape[0]
            model.train()
            opt.zero_grad()
            loss = loss_fn(model(x[i : i + 32]), y[i : i + 32])
            loss.backward()
            opt.step()
            losses.append(loss.item())
            if after_step is not None:
                after_step(s)
    return losses


def _judge(out: Path, *rules: object) -> dict[str, Verdict]:
    return {v.rule: v for v in evaluate(ts.create_trial(str(out)), list(rules), write=False)}


def _named(verdict: Verdict, suffix: str) -> bool:
    return any(name.endswith(suffix) for name in verdict.tensors)


# --- a dead network: SGD at a learning rate far too high ------------------------------------------------------
def test_a_network_killed_by_a_too_high_learning_rate_has_dead_gradients(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = ReluCNN()
    losses = _train(tmp_path / "run", model, torch.optim.SGD(model.parameters(), lr=1.0), steps=120)
    assert np.mean(losses[-20:]) > 1.35  # stuck at chance (ln 4 = 1.386)
    assert all(float(p.grad.abs().sum()) == 0 for n, p in model.named_parameters() if n.startswith("conv"))
    got = _judge(tmp_path / "run", VanishingGradient(), WeightUpdateRatio())
    vg, wur = got["VanishingGradient"], got["WeightUpdateRatio"]
    assert vg.status is Status.ISSUES_FOUND, vg.message
    assert all(_named(vg, f"{layer}.weight") for layer in ("conv1", "conv2", "fc")), vg.tensors
    assert "dead (non-zero, then exactly zero)" in vg.message and "non-zero until step" in vg.message
    assert wur.status is Status.ISSUES_FOUND, wur.message
    assert _named(wur, "conv1.weight") and _named(wur, "conv2.weight"), wur.tensors
    assert "stopped updating after their gradient died" in wur.message
    assert vg.first_trigger_step is not None and wur.first_trigger_step is not None
    assert vg.first_trigger_step >= 20 and wur.first_trigger_step >= 20  # after the gradients died, not before


def test_the_same_network_at_a_sane_learning_rate_stays_quiet(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = ReluCNN()
    losses = _train(tmp_path / "run", model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), steps=120)
    assert np.mean(losses[-20:]) < 1.2
    got = _judge(tmp_path / "run", VanishingGradient(), WeightUpdateRatio())
    assert got["VanishingGradient"].status is Status.NO_ISSUES_FOUND, got["VanishingGradient"].message
    assert got["WeightUpdateRatio"].status is Status.NO_ISSUES_FOUND, got["WeightUpdateRatio"].message


class MaskedCNN(ReluCNN):
    """A ReluCNN with a parameter the loss never depends on (masked by zero): its gradient is zero from the start."""

    def __init__(self) -> None:
        super().__init__()
        self.unused = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + 0.0 * self.unused.weight.sum()


def test_gradients_zero_from_the_first_step_stay_structural(tmp_path: Path) -> None:
    torch.manual_seed(1)
    model = MaskedCNN()
    _train(tmp_path / "run", model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), steps=60)
    assert float(model.unused.weight.grad.abs().sum()) == 0
    got = _judge(tmp_path / "run", VanishingGradient(), WeightUpdateRatio())
    vg, wur = got["VanishingGradient"], got["WeightUpdateRatio"]
    assert vg.status is Status.NO_ISSUES_FOUND and "unused.weight (exactly zero since its first record" in vg.message
    assert wur.status is Status.NO_ISSUES_FOUND and "unused.weight" in wur.message, wur.message
    assert _judge(tmp_path / "run", VanishingGradient(literal=True))["VanishingGradient"].triggers > 0  # smdebug's


def test_a_gradient_zero_for_fewer_than_dead_steps_records_is_not_dead() -> None:
    def at(n: int, g: float):  # noqa: ANN202
        return step(n, [tensor("gradient/w", None, ["gradients"], abs_mean=g)])

    blip = [at(0, 0.1), at(1, 0.0), at(2, 0.0), at(3, 0.1)]  # a branch not taken twice
    assert run(VanishingGradient(), blip).status is Status.NO_ISSUES_FOUND
    dead = [at(0, 0.1), at(1, 0.0), at(2, 0.0), at(3, 0.0), at(4, 0.0)]
    v = run(VanishingGradient(), dead)
    assert v.triggers == 2 and v.first_trigger_step == 3 and v.tensors == ("gradient/w",)
    assert run(VanishingGradient(dead_steps=1), dead).triggers == 4


# --- timm's train.py --model-ema: zero-initialised BatchNorm gammas and an EMA copy --------------------------
class ZeroGammaBlock(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv, self.bn = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        nn.init.zeros_(self.bn.weight)  # timm's zero_init_last: each residual block starts as the identity

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.bn(self.conv(x)))


class ResNetTiny(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.block = ZeroGammaBlock(8)
        self.head = nn.Linear(8, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.block(self.stem(x)).mean((2, 3)))


class ModelEma(nn.Module):
    """timm's ModelEmaV2: a deep copy of the model whose weights follow it by exponential moving average."""

    def __init__(self, model: nn.Module, decay: float) -> None:
        super().__init__()
        self.module = copy.deepcopy(model).eval()
        self.decay = decay

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        for ema_v, model_v in zip(self.module.state_dict().values(), model.state_dict().values(), strict=True):
            if ema_v.dtype.is_floating_point:
                ema_v.mul_(self.decay).add_(model_v, alpha=1 - self.decay)
            else:
                ema_v.copy_(model_v)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.module(x)


def _timm_like(out: Path, freeze_stem: bool = False) -> Verdict:
    torch.manual_seed(0)
    model = ResNetTiny()
    if freeze_stem:
        model.stem[0].requires_grad_(False)  # a mistake: the stem never trains
    ema = ModelEma(model, decay=0.99999)
    opt = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.05, momentum=0.9)
    warmup = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / 50))

    def after(_: int) -> None:
        warmup.step()
        ema.update(model)

    _train(out, model, opt, steps=60, every=2, after_step=after, others=(ema,))
    return _judge(out, WeightUpdateRatio())["WeightUpdateRatio"]


def test_zero_initialised_gammas_and_an_ema_copy_are_no_weight_update_issue(tmp_path: Path) -> None:
    v = _timm_like(tmp_path / "run")
    assert v.status is Status.NO_ISSUES_FOUND, v.message
    assert "block.bn.weight (zero-initialised" in v.message
    assert "without a gradient of its own" in v.message and "ModelEma" in v.message
    literal = _judge(tmp_path / "run", WeightUpdateRatio(literal=True))["WeightUpdateRatio"]
    assert literal.status is Status.ISSUES_FOUND  # smdebug's: the gamma's first update is infinitely large
    assert _named(literal, "block.bn.weight")


def test_a_frozen_layer_still_fails_beside_an_ema_copy(tmp_path: Path) -> None:
    v = _timm_like(tmp_path / "run", freeze_stem=True)
    assert v.status is Status.ISSUES_FOUND, v.message
    assert v.tensors and all(name.endswith("stem.0.weight") for name in v.tensors), v.tensors


class Greedy(nn.Module):
    """Greedy layer-wise training (forward-forward, stacked autoencoders): stage k trains layer k and its head."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(64, 32), nn.Linear(32, 32)])
        self.heads = nn.ModuleList([nn.Linear(32, 4), nn.Linear(32, 4)])

    def forward(self, x: torch.Tensor, stage: int) -> torch.Tensor:
        h = x.flatten(1)
        with torch.no_grad():
            for layer in self.layers[:stage]:
                h = torch.relu(layer(h))
        return self.heads[stage](torch.relu(self.layers[stage](h)))


def test_layers_trained_one_after_the_other_are_not_frozen(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model, (x, y), loss_fn = Greedy(), _images(), nn.CrossEntropyLoss()
    opts = [torch.optim.SGD([*model.layers[k].parameters(), *model.heads[k].parameters()], lr=0.1) for k in (0, 1)]
    config = ts.SaveConfig(save_interval=5)
    with ts.torch.Hook(
        tmp_path / "run", export_tensorboard=False, save_config=config, include_collections=COLLECTIONS
    ) as hook:
        hook.register_module(model)
        hook.register_loss(loss_fn)
        for stage, s in [(k, s) for k in (0, 1) for s in range(40)]:
            i = (s * 32) % x.shape[0]
            opts[stage].zero_grad()
            loss_fn(model(x[i : i + 32], stage), y[i : i + 32]).backward()
            opts[stage].step()
    v = _judge(tmp_path / "run", WeightUpdateRatio())["WeightUpdateRatio"]
    assert v.status is Status.NO_ISSUES_FOUND, v.message
    assert "layers.1.weight" in v.message  # still in stage 0, named as not counted


# --- empty weights (DeepSpeed ZeRO-3 partitions not held by this rank) ----------------------------------------
class WithEmptyShard(ReluCNN):
    def __init__(self) -> None:
        super().__init__()
        self.shard = nn.Parameter(torch.empty(0))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x) + self.shard.sum()


def _with_empty_shard(out: Path) -> None:
    torch.manual_seed(1)
    model = WithEmptyShard()
    _train(out, model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), steps=30)


def test_empty_weights_never_trigger_weight_update_ratio(tmp_path: Path) -> None:
    _with_empty_shard(tmp_path / "run")
    for rule in (WeightUpdateRatio(), WeightUpdateRatio(literal=True)):
        verdict = _judge(tmp_path / "run", rule)["WeightUpdateRatio"]
        assert verdict.status is Status.NO_ISSUES_FOUND and verdict.triggers == 0, verdict.message


def test_empty_gradients_never_trigger_exploding_tensor(tmp_path: Path) -> None:
    _with_empty_shard(tmp_path / "run")
    verdict = _judge(tmp_path / "run", ExplodingTensor())["ExplodingTensor"]
    assert verdict.status is Status.NO_ISSUES_FOUND, verdict.message


@pytest.mark.parametrize("literal", [False, True])
def test_empty_weights_alone_give_no_data(literal: bool) -> None:
    empty = [step(n, [tensor("shard", np.zeros((0,), np.float32), ["weights"])]) for n in range(3)]
    assert run(WeightUpdateRatio(literal=literal), empty).status is Status.NO_DATA
    assert run(ExplodingTensor(), empty).triggers == 0


# --- the same distinctions on synthetic steps -------------------------------------------------------------------
def _wstep(n: int, weights: dict[str, np.ndarray], grads: dict[str, float]) -> object:
    main = [tensor(name, value, ["weights"]) for name, value in weights.items()]
    grad = [tensor(f"gradient/{name}", None, ["gradients"], abs_mean=g) for name, g in grads.items()]
    return step(n, {"main": main, "grad": grad})


def test_a_frozen_weight_is_named_once_at_the_end_and_a_late_starter_is_not() -> None:
    def data(late_start: int | None) -> list:
        out = []
        for n in range(6):
            grads = {"fc.weight": 0.1 + n}
            if late_start is not None and n >= late_start:
                grads["frozen.weight"] = 0.2 + n
            moved = 0 if late_start is None else max(0, n - late_start)  # it moves once its gradient flows
            out.append(_wstep(n, {"fc.weight": np.full(4, 1.0 + n), "frozen.weight": np.full(4, 1.0 + moved)}, grads))
        return out

    frozen = run(WeightUpdateRatio(), data(None))
    assert frozen.status is Status.ISSUES_FOUND and frozen.triggers == 1 and frozen.first_trigger_step == 5
    assert frozen.tensors == ("frozen.weight",) and "never had a gradient recorded" in frozen.message
    assert run(WeightUpdateRatio(), data(3)).status is Status.NO_ISSUES_FOUND  # unfrozen later: not frozen
    assert run(WeightUpdateRatio(literal=True), data(None)).triggers == 5  # smdebug's: every still step


def test_a_repeated_gradient_means_not_trained_now_unless_nothing_changes() -> None:
    def data(other_changes: bool) -> list:
        return [
            _wstep(
                n,
                {"a.weight": np.ones(4), "b.weight": np.full(4, 1.0 + (n if other_changes else 0))},
                {"a.weight": 0.3, "b.weight": 0.5 + (n if other_changes else 0)},
            )
            for n in range(4)
        ]

    assert run(WeightUpdateRatio(), data(True)).status is Status.NO_ISSUES_FOUND  # a finished stage
    assert run(WeightUpdateRatio(), data(False)).triggers == 3  # nothing trains (lr ~ 0, full batch): counted
