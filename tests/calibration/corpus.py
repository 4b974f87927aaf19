"""The calibration corpus: small healthy and broken PyTorch trainings, each recorded as a careful user would.

Every run records weights, biases, gradients and the activation collections every ``SAVE_EVERY`` steps, the
losses every step, and evaluates on held-out data every ``EVAL_EVERY`` steps. ``SCENARIOS`` maps a name to
``(expected, train)``: ``expected`` is None for a healthy run, else the rule that must name the problem.
The input-bound scenario (rule InputBottleneck) is tested with the profiler rules.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

import trainspect as ts
from trainspect.config import SaveConfig

torch.set_num_threads(1)

SAVE_EVERY = 10
EVAL_EVERY = 50
STEPS = 300
BATCH = 32
COLLECTIONS = ("weights", "biases", "gradients", "losses", "relu_input", "relu_output", "tanh_input", "sigmoid_input")


@dataclass
class Task:
    """A supervised task: training and held-out tensors, the loss."""

    x: torch.Tensor
    y: torch.Tensor
    x_eval: torch.Tensor
    y_eval: torch.Tensor
    loss_fn: nn.Module

    def batch(self, step: int, size: int = BATCH) -> tuple[torch.Tensor, torch.Tensor]:
        """The step's minibatch; the order is shuffled every epoch, as a DataLoader with shuffle=True does."""
        n = self.x.shape[0]
        per_epoch = max(1, n // size)
        epoch, i = divmod(step, per_epoch)
        order = torch.randperm(n, generator=_gen(1000 + epoch))
        idx = order[i * size : (i + 1) * size]
        return self.x[idx], self.y[idx]


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def teacher_task(
    dim: int = 16, classes: int = 4, n: int = 2048, noise: float = 0.2, seed: int = 0, scale: float = 1.0
) -> Task:
    """Gaussian inputs labelled by a random linear teacher; a share ``noise`` of the labels is random."""
    g = _gen(seed)
    w = torch.randn(dim, classes, generator=g)
    x = torch.randn(n + 256, dim, generator=g) * scale
    y = (x @ w).argmax(1)
    flip = torch.rand(n + 256, generator=g) < noise
    y = torch.where(flip, torch.randint(0, classes, (n + 256,), generator=g), y)
    return Task(x[:n], y[:n], x[n:], y[n:], nn.CrossEntropyLoss())


def image_task(n: int = 1024, noise: float = 0.1, seed: int = 1) -> Task:
    """12x12 single-channel images; the class is the quadrant holding a bright blob."""
    g = _gen(seed)
    total = n + 256
    y = torch.randint(0, 4, (total,), generator=g)
    x = torch.randn(total, 1, 12, 12, generator=g) * 0.5
    for q in range(4):
        r, c = divmod(q, 2)
        x[y == q, :, r * 6 + 1 : r * 6 + 5, c * 6 + 1 : c * 6 + 5] += 1.5
    flip = torch.rand(total, generator=g) < noise
    y = torch.where(flip, torch.randint(0, 4, (total,), generator=g), y)
    return Task(x[:n], y[:n], x[n:], y[n:], nn.CrossEntropyLoss())


def token_task(n: int = 1024, length: int = 12, vocab: int = 16, seed: int = 2) -> Task:
    """Token sequences; the label says whether token 3 occurs more often than token 5 (10 % label noise)."""
    g = _gen(seed)
    total = n + 256
    x = torch.randint(0, vocab, (total, length), generator=g)
    y = ((x == 3).sum(1) > (x == 5).sum(1)).long()
    flip = torch.rand(total, generator=g) < 0.1
    y = torch.where(flip, 1 - y, y)
    return Task(x[:n], y[:n], x[n:], y[n:], nn.CrossEntropyLoss())


def sequence_task(n: int = 1024, length: int = 10, seed: int = 3) -> Task:
    """Real-valued sequences; the label says whether the first feature's running sum ends positive."""
    g = _gen(seed)
    total = n + 256
    x = torch.randn(total, length, 4, generator=g)
    y = (x[:, :, 0].sum(1) > 0).long()
    flip = torch.rand(total, generator=g) < 0.1
    y = torch.where(flip, 1 - y, y)
    return Task(x[:n], y[:n], x[n:], y[n:], nn.CrossEntropyLoss())


def regression_task(dim: int = 8, n: int = 1024, seed: int = 4, scale: float = 1.0) -> Task:
    """A noise-free linear target: a model can reach (almost) zero loss."""
    g = _gen(seed)
    w = torch.randn(dim, 1, generator=g)
    x = torch.randn(n + 256, dim, generator=g)
    y = (x @ w) * scale
    return Task(x[:n], y[:n], x[n:], y[n:], nn.MSELoss())


def mlp(sizes: list[int], act: Callable[[], nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
    return nn.Sequential(*layers)


def train(
    out: Path,
    model: nn.Module,
    opt: torch.optim.Optimizer,
    task: Task,
    steps: int = STEPS,
    save_all: bool = False,
    batch: int = BATCH,
    per_step: Callable[..., None] | None = None,
    rules: list[Any] | None = None,
) -> None:
    """Train and evaluate as a careful user records it."""
    kwargs: dict[str, Any] = {"save_all": True} if save_all else {"include_collections": list(COLLECTIONS)}
    kwargs["rules"] = rules
    with ts.torch.Hook(
        out, export_tensorboard=False, save_config=SaveConfig(save_interval=SAVE_EVERY), **kwargs
    ) as hook:
        hook.register_module(model)
        hook.register_loss(task.loss_fn)
        for step in range(steps):
            x, y = task.batch(step, batch)
            model.train()
            opt.zero_grad()
            logits = model(x)
            loss = task.loss_fn(logits, y)
            if per_step is not None:
                per_step(hook, logits, y)
            loss.backward()
            opt.step()
            if (step + 1) % EVAL_EVERY == 0:
                evaluate(model, task)


def evaluate(model: nn.Module, task: Task, batch: int = 64) -> None:
    model.eval()
    with torch.no_grad():
        for i in range(0, task.x_eval.shape[0], batch):
            task.loss_fn(model(task.x_eval[i : i + batch]), task.y_eval[i : i + batch])


# --- models ------------------------------------------------------------------------------------------------
class SmallCNN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1),
            nn.BatchNorm2d(8),
            nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1),
            nn.BatchNorm2d(16),
            nn.ReLU(),
            nn.AdaptiveAvgPool2d(2),
        )
        self.head = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x).flatten(1))


class SelfAttention(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.query, self.key, self.value = nn.Linear(dim, dim), nn.Linear(dim, dim), nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        scores = self.query(x) @ self.key(x).transpose(1, 2) / math.sqrt(x.shape[-1])
        return self.out(scores.softmax(-1) @ self.value(x))


class TinyTransformer(nn.Module):
    def __init__(self, vocab: int = 16, dim: int = 32, length: int = 12) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.pos = nn.Parameter(torch.randn(length, dim) * 0.02)
        self.attn, self.norm1 = SelfAttention(dim), nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, dim))
        self.norm2 = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos
        h = self.norm1(h + self.attn(h))
        h = self.norm2(h + self.ff(h))
        return self.head(h.mean(1))


class GRUClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn = nn.GRU(4, 32, batch_first=True)
        self.head = nn.Linear(32, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.rnn(x)
        return self.head(out[:, -1])


class NamedReluNet(nn.Module):
    """An MLP whose ReLU modules are attributes named relu1, relu2."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.relu1 = nn.Linear(16, 64), nn.ReLU()
        self.fc2, self.relu2 = nn.Linear(64, 64), nn.ReLU()
        self.fc3 = nn.Linear(64, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc3(self.relu2(self.fc2(self.relu1(self.fc1(x)))))


# --- healthy -----------------------------------------------------------------------------------------------
def healthy_mlp_sgd(out: Path) -> None:
    torch.manual_seed(0)
    model = mlp([16, 64, 64, 4])
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), teacher_task(noise=0.2))


def healthy_cnn_adam(out: Path) -> None:
    torch.manual_seed(1)
    model = SmallCNN()
    train(out, model, torch.optim.Adam(model.parameters(), lr=3e-3), image_task())


def healthy_cnn_sgd_save_all(out: Path) -> None:
    torch.manual_seed(2)
    model = SmallCNN()
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), image_task(seed=5), save_all=True)


def healthy_transformer_adamw(out: Path) -> None:
    torch.manual_seed(3)
    model = TinyTransformer()
    train(out, model, torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01), token_task())


def healthy_rnn_adam(out: Path) -> None:
    torch.manual_seed(4)
    model = GRUClassifier()
    train(out, model, torch.optim.Adam(model.parameters(), lr=3e-3), sequence_task())


def healthy_regression_to_zero(out: Path) -> None:
    torch.manual_seed(5)
    model = nn.Sequential(nn.Linear(8, 16), nn.Linear(16, 1))  # fits the linear target exactly: loss -> 1e-12
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.02, momentum=0.9), regression_task(), steps=400)


def healthy_tanh_sigmoid_sgd(out: Path) -> None:
    torch.manual_seed(6)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Sigmoid(), nn.Linear(64, 4))
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), teacher_task(noise=0.3, seed=7))


def healthy_plateau_adam(out: Path) -> None:
    torch.manual_seed(7)
    model = mlp([16, 32, 4])
    train(out, model, torch.optim.Adam(model.parameters(), lr=1e-2), teacher_task(noise=0.4, seed=8), steps=400)


# --- broken ------------------------------------------------------------------------------------------------
def broken_lr_nan(out: Path) -> None:
    torch.manual_seed(10)
    model = mlp([8, 32, 1])
    train(out, model, torch.optim.SGD(model.parameters(), lr=5.0), regression_task(scale=10.0), steps=100)


def broken_lr_high(out: Path) -> None:
    torch.manual_seed(11)
    model = mlp([16, 64, 64, 4], nn.Tanh)
    train(out, model, torch.optim.SGD(model.parameters(), lr=1.0, momentum=0.9), teacher_task(seed=11))


def broken_deep_sigmoid(out: Path) -> None:
    torch.manual_seed(12)
    model = mlp([16] + [32] * 9 + [4], nn.Sigmoid)
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9), teacher_task(seed=12))


def _kill_relus(model: nn.Module) -> None:
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    with torch.no_grad():
        for lin in linears[:-1]:
            lin.bias.fill_(-20.0)


def broken_dead_relu_named(out: Path) -> None:
    torch.manual_seed(13)
    model = NamedReluNet()
    _kill_relus(model)
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), teacher_task(seed=13), steps=200)


def broken_dead_relu_sequential(out: Path) -> None:
    torch.manual_seed(14)
    model = mlp([16, 64, 64, 4])
    _kill_relus(model)
    train(out, model, torch.optim.Adam(model.parameters(), lr=1e-3), teacher_task(seed=14), steps=200)


def broken_dead_relu_save_all(out: Path) -> None:
    torch.manual_seed(15)
    model = mlp([16, 64, 64, 4])
    _kill_relus(model)
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.05), teacher_task(seed=15), steps=200, save_all=True)


def broken_tiny_init(out: Path) -> None:
    torch.manual_seed(16)
    model = mlp([16, 64, 64, 64, 4])
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Linear):
                m.weight.normal_(0, 1e-2)
                m.bias.zero_()
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9), teacher_task(seed=16), steps=200)


def broken_overfit(out: Path) -> None:
    torch.manual_seed(17)
    model = mlp([16, 256, 256, 4])
    task = teacher_task(n=48, noise=0.3, seed=17)
    train(out, model, torch.optim.Adam(model.parameters(), lr=1e-3), task, batch=16)


def broken_frozen_layer(out: Path) -> None:
    torch.manual_seed(18)
    model = mlp([16, 64, 64, 4])
    model[2].requires_grad_(False)  # meant to fine-tune everything, froze the middle layer by mistake
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9), teacher_task(seed=18), steps=200)


def broken_saturated(out: Path) -> None:
    torch.manual_seed(19)
    model = nn.Sequential(nn.Linear(16, 64), nn.Tanh(), nn.Linear(64, 64), nn.Sigmoid(), nn.Linear(64, 4))
    task = teacher_task(seed=19, scale=2000.0)  # raw sensor readings in the thousands, never normalised
    train(out, model, torch.optim.SGD(model.parameters(), lr=0.01), task, steps=200)


def _save_labels(hook: Any, logits: torch.Tensor, y: torch.Tensor) -> None:
    hook.save_tensor("labels", y, "labels")
    hook.save_tensor("predictions", logits.argmax(1), "predictions")


def broken_imbalanced(out: Path) -> None:
    torch.manual_seed(20)
    task = teacher_task(seed=20)
    g = _gen(21)
    for attr in ("y", "y_eval"):
        y = getattr(task, attr)
        setattr(task, attr, torch.where(torch.rand(y.shape[0], generator=g) < 0.97, torch.zeros_like(y), y))
    model = mlp([16, 64, 4])
    train(out, model, torch.optim.Adam(model.parameters(), lr=1e-3), task, steps=200, per_step=_save_labels)


SCENARIOS: dict[str, tuple[str | None, Callable[[Path], None]]] = {
    "mlp_sgd_momentum": (None, healthy_mlp_sgd),
    "cnn_adam": (None, healthy_cnn_adam),
    "cnn_sgd_save_all": (None, healthy_cnn_sgd_save_all),
    "transformer_adamw": (None, healthy_transformer_adamw),
    "rnn_adam": (None, healthy_rnn_adam),
    "regression_to_zero": (None, healthy_regression_to_zero),
    "tanh_sigmoid_sgd": (None, healthy_tanh_sigmoid_sgd),
    "label_noise_plateau": (None, healthy_plateau_adam),
    "lr_nan": ("ExplodingTensor", broken_lr_nan),
    "lr_high_finite": ("LossNotDecreasing", broken_lr_high),
    "deep_sigmoid": ("VanishingGradient", broken_deep_sigmoid),
    "dead_relu_named": ("DeadRelu", broken_dead_relu_named),
    "dead_relu_sequential": ("DeadRelu", broken_dead_relu_sequential),
    "dead_relu_save_all": ("DeadRelu", broken_dead_relu_save_all),
    "tiny_init": ("PoorWeightInitialization", broken_tiny_init),
    "overfit_48_samples": ("Overfit", broken_overfit),
    "frozen_layer": ("WeightUpdateRatio", broken_frozen_layer),
    "saturated_tanh_sigmoid": ("SaturatedActivation", broken_saturated),
    "imbalanced_labels": ("ClassImbalance", broken_imbalanced),
}
