"""Real third-party-style trainings for the calibration corpus (issue 28): the patterns of code nobody here wrote.

Each training is written in the style of a public project (pytorch/examples dcgan, time_sequence_prediction,
gcn, mnist_forward_forward; a plain SGD MLP; the seed's dead-network showcase; an input-bound DataLoader) and
recorded as a careful user would: weights, biases, gradients and losses, evaluations in EVAL mode where the real
code evaluates. ``SCENARIOS`` maps a name to ``(expected, train)`` as in corpus.py; ``LOADED`` names the
scenarios trained beside a CPU hog (a busy machine). Everything runs on CPU on synthetic data in seconds.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset

import trainspect as ts
from trainspect.config import SaveConfig

torch.set_num_threads(1)

COLLECTIONS = ["weights", "biases", "gradients", "losses"]


def _hook(out: Path, every: int = 10, profiler: bool = False) -> Any:
    kwargs: dict[str, Any] = {}
    if profiler:
        kwargs["profiler_config"] = ts.ProfilerConfig(system_monitor_interval_millis=100)
    return ts.torch.Hook(
        out,
        export_tensorboard=False,
        save_config=SaveConfig(save_interval=every),
        include_collections=COLLECTIONS,
        **kwargs,
    )


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


# --- dcgan: two models, two optimizers, D step then G step -------------------------------------------------------
class Generator(nn.Module):
    def __init__(self, nz: int = 8, ngf: int = 16) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose2d(nz, ngf * 2, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            nn.ConvTranspose2d(ngf * 2, 1, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self, ndf: int = 16) -> None:
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv2d(1, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            nn.Conv2d(ndf, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x).view(-1, 1).squeeze(1)


def _blobs(n: int, seed: int) -> torch.Tensor:
    """8x8 'images' in [-1, 1]: a bright 3x3 square at a random position on a dark background."""
    g = _gen(seed)
    x = torch.full((n, 1, 8, 8), -0.8)
    pos = torch.randint(0, 6, (n, 2), generator=g)
    for i in range(n):
        r, c = int(pos[i, 0]), int(pos[i, 1])
        x[i, 0, r : r + 3, c : c + 3] = 0.8
    return x + 0.05 * torch.randn(x.shape, generator=g)


def dcgan_two_optimizers(out: Path, iters: int = 200, batch: int = 32, nz: int = 8) -> None:
    torch.manual_seed(40)
    data = _blobs(2048, seed=40)
    net_g, net_d = Generator(nz), Discriminator()
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(16, nz, 1, 1)
    optimizer_d = torch.optim.Adam(net_d.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_g = torch.optim.Adam(net_g.parameters(), lr=2e-4, betas=(0.5, 0.999))
    with _hook(out) as hook:
        hook.register_module(net_g)
        hook.register_module(net_d)
        hook.register_loss(criterion)
        for i in range(iters):
            real = data[(i * batch) % 2048 : (i * batch) % 2048 + batch]
            # (1) update D: maximize log(D(x)) + log(1 - D(G(z)))
            net_d.zero_grad()
            label = torch.full((batch,), 1.0)
            err_d_real = criterion(net_d(real), label)
            err_d_real.backward()
            fake = net_g(torch.randn(batch, nz, 1, 1))
            label.fill_(0.0)
            err_d_fake = criterion(net_d(fake.detach()), label)
            err_d_fake.backward()
            optimizer_d.step()
            # (2) update G: maximize log(D(G(z)))
            net_g.zero_grad()
            label.fill_(1.0)
            err_g = criterion(net_d(fake), label)
            err_g.backward()
            optimizer_g.step()
            if i % 100 == 0:
                with torch.no_grad():
                    net_g(fixed_noise)  # the samples dcgan writes to disk


# --- time_sequence_prediction: LBFGS with a closure, a no_grad test forward after each step ----------------------
class Sequence(nn.Module):
    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)
        self.hidden = hidden

    def forward(self, x: torch.Tensor, future: int = 0) -> torch.Tensor:
        n = x.size(0)
        h1 = c1 = h2 = c2 = torch.zeros(n, self.hidden, dtype=x.dtype)
        outputs = []
        output = torch.zeros(n, 1, dtype=x.dtype)
        for x_t in x.split(1, dim=1):
            h1, c1 = self.lstm1(x_t, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        for _ in range(future):  # predict the future from the model's own outputs
            h1, c1 = self.lstm1(output, (h1, c1))
            h2, c2 = self.lstm2(h1, (h2, c2))
            output = self.linear(h2)
            outputs.append(output)
        return torch.cat(outputs, dim=1)


def lbfgs_closure(out: Path, steps: int = 10, future: int = 10) -> None:
    torch.manual_seed(41)
    g = _gen(41)
    t = torch.arange(30, dtype=torch.float64)
    shift = torch.randint(-20, 20, (12, 1), generator=g).double()
    waves = torch.sin((t + shift) / 4.0)
    x, y = waves[3:, :-1], waves[3:, 1:]
    x_test, y_test = waves[:3, :-1], waves[:3, 1:]
    seq = Sequence().double()
    criterion = nn.MSELoss()
    optimizer = torch.optim.LBFGS(seq.parameters(), lr=0.8, max_iter=5)
    with _hook(out, every=1) as hook:
        hook.register_module(seq)
        hook.register_loss(criterion)
        for _ in range(steps):
            hook.set_mode(ts.modes.TRAIN)

            def closure() -> torch.Tensor:
                optimizer.zero_grad()
                loss = criterion(seq(x), y)
                loss.backward()
                return loss

            optimizer.step(closure)
            hook.set_mode(ts.modes.EVAL)
            with torch.no_grad():  # begin to predict: no need to track the gradient here
                pred = seq(x_test, future=future)
                criterion(pred[:, :-future], y_test)


# --- gcn: parameters named kernel and bias, full-graph training, validation every epoch --------------------------
class GraphConv(nn.Module):
    def __init__(self, d_in: int, d_out: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.empty(d_in, d_out))
        self.bias = nn.Parameter(torch.zeros(d_out))
        nn.init.xavier_uniform_(self.kernel)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        return adj @ (x @ self.kernel) + self.bias


class GCN(nn.Module):
    def __init__(self, d_in: int, hidden: int, classes: int, dropout: float = 0.5) -> None:
        super().__init__()
        self.gc1, self.gc2 = GraphConv(d_in, hidden), GraphConv(hidden, classes)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor, adj: torch.Tensor) -> torch.Tensor:
        h = self.dropout(F.relu(self.gc1(self.dropout(x), adj)))
        return F.log_softmax(self.gc2(h, adj), dim=1)


def _graph(nodes: int = 300, classes: int = 4, dim: int = 32, seed: int = 42) -> tuple[torch.Tensor, ...]:
    """A stochastic block model: nodes link within their class far more often; features are noisy class means."""
    g = _gen(seed)
    labels = torch.randint(0, classes, (nodes,), generator=g)
    same = labels[:, None] == labels[None, :]
    p = torch.where(same, torch.tensor(0.04), torch.tensor(0.008))
    a = (torch.rand(nodes, nodes, generator=g) < p).float().triu(1)
    a = a + a.T + torch.eye(nodes)
    d = a.sum(1).rsqrt()
    adj = d[:, None] * a * d[None, :]  # D^-1/2 (A + I) D^-1/2
    means = torch.randn(classes, dim, generator=g)
    features = means[labels] * 0.1 + torch.randn(nodes, dim, generator=g)
    return features, adj, labels


def gcn_custom_names(out: Path, epochs: int = 60) -> None:
    torch.manual_seed(42)
    features, adj, labels = _graph()
    idx_train, idx_val = torch.arange(0, 60), torch.arange(60, 160)
    model = GCN(features.shape[1], 16, 4)
    criterion = nn.NLLLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)
    with _hook(out, every=5) as hook:
        hook.register_module(model)
        hook.register_loss(criterion)
        for _ in range(epochs):
            hook.set_mode(ts.modes.TRAIN)
            model.train()
            optimizer.zero_grad()
            loss_train = criterion(model(features, adj)[idx_train], labels[idx_train])
            loss_train.backward()
            optimizer.step()
            hook.set_mode(ts.modes.EVAL)
            model.eval()
            with torch.no_grad():
                criterion(model(features, adj)[idx_val], labels[idx_val])


# --- mnist_forward_forward: every layer trained by calling layer.forward(x), a local loss per layer --------------
class FFLayer(nn.Linear):
    def __init__(self, d_in: int, d_out: int, threshold: float = 2.0) -> None:
        super().__init__(d_in, d_out)
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)
        self.threshold = threshold

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x_dir = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return F.relu(F.linear(x_dir, self.weight, self.bias))

    def train_layer(self, x_pos: torch.Tensor, x_neg: torch.Tensor, epochs: int) -> tuple[torch.Tensor, ...]:
        for _ in range(epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            loss.backward()  # the derivative is local to the layer: no backprop through the network
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class FFNet(nn.Module):
    def __init__(self, dims: list[int]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(FFLayer(dims[i], dims[i + 1]) for i in range(len(dims) - 1))

    def predict(self, x: torch.Tensor, classes: int) -> torch.Tensor:
        goodness = []
        for label in range(classes):
            h = _overlay(x, torch.full((x.shape[0],), label), classes)
            total = torch.zeros(x.shape[0])
            for layer in self.layers:
                h = layer(h)
                total = total + h.pow(2).mean(1)
            goodness.append(total)
        return torch.stack(goodness, 1).argmax(1)

    def train_net(self, x_pos: torch.Tensor, x_neg: torch.Tensor, epochs: int) -> None:
        h_pos, h_neg = x_pos, x_neg
        for layer in self.layers:
            h_pos, h_neg = cast(FFLayer, layer).train_layer(h_pos, h_neg, epochs)


def _overlay(x: torch.Tensor, y: torch.Tensor, classes: int) -> torch.Tensor:
    """Replace the first ``classes`` features by the one-hot label (forward-forward's positive/negative data)."""
    x = x.clone()
    x[:, :classes] = 0.0
    x[torch.arange(x.shape[0]), y] = x.abs().max()
    return x


def forward_forward(out: Path, epochs: int = 150, classes: int = 4) -> None:
    torch.manual_seed(43)
    g = _gen(43)
    w = torch.randn(32, classes, generator=g)
    x = torch.randn(512, 32, generator=g)
    y = (x @ w).argmax(1)
    y_wrong = (y + torch.randint(1, classes, y.shape, generator=g)) % classes
    net = FFNet([32, 64, 64])
    with _hook(out) as hook:
        hook.register_module(net)
        net.train_net(_overlay(x, y, classes), _overlay(x, y_wrong, classes), epochs)
        with torch.no_grad():
            net.predict(x, classes)  # the real script prints the training error at the end


# --- a plain SGD MLP whose validation loss falls slowly and monotonically; the same, profiled, on a busy machine ---
def _binary_task(seed: int, n: int = 2048) -> tuple[torch.Tensor, ...]:
    g = _gen(seed)
    w = torch.randn(20, generator=g)
    x = torch.randn(n + 512, 20, generator=g)
    y = ((x @ w) > 0).long()
    flip = torch.rand(n + 512, generator=g) < 0.1
    y = torch.where(flip, 1 - y, y)
    return x[:n], y[:n], x[n:], y[n:]


def _sgd_mlp(
    out: Path,
    seed: int,
    lr: float,
    batch: int,
    eval_batch: int,
    profiler: bool = False,
    steps: int = 280,
    eval_every: int = 20,
) -> None:
    torch.manual_seed(seed)
    x, y, x_val, y_val = _binary_task(seed)
    loader = DataLoader(_Samples(x, y), batch_size=batch, shuffle=True, generator=_gen(seed))
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 2))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    with _hook(out, profiler=profiler) as hook:
        hook.register_module(model)
        hook.register_loss(criterion)
        step = 0
        while step < steps:
            for xb, yb in loader:
                hook.set_mode(ts.modes.TRAIN)
                model.train()
                optimizer.zero_grad()
                criterion(model(xb), yb).backward()
                optimizer.step()
                step += 1
                if step % eval_every == 0:
                    hook.set_mode(ts.modes.EVAL)
                    model.eval()
                    with torch.no_grad():
                        for i in range(0, x_val.shape[0], eval_batch):
                            criterion(model(x_val[i : i + eval_batch]), y_val[i : i + eval_batch])
                if step == steps:
                    break


def mlp_sgd_slow_validation(out: Path) -> None:
    """SGD lr 0.003, the whole validation set in one batch: val 0.707 -> 0.655 over 14 evaluations, monotone."""
    _sgd_mlp(out, seed=44, lr=0.003, batch=64, eval_batch=512)


def mlp_sgd_loaded_machine(out: Path) -> None:
    """The same kind of training, profiled, on a machine a CPU hog keeps busy (see ``LOADED``)."""
    _sgd_mlp(out, seed=45, lr=0.005, batch=32, eval_batch=128, profiler=True)


# --- the seed's dead network: a CNN at SGD lr 0.5, every ReLU dead within ~60 steps ------------------------------
class DeadCNN(nn.Module):
    def __init__(self, classes: int = 10) -> None:
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 16, 3, padding=1)
        self.fc1, self.fc2 = nn.Linear(16 * 3 * 3, 32), nn.Linear(32, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def _template_images(n: int, seed: int, classes: int = 10) -> tuple[torch.Tensor, torch.Tensor]:
    """12x12 'digits' in [0, 2]: one random binary template per class plus uniform noise."""
    g = _gen(seed)
    templates = (torch.rand(classes, 1, 12, 12, generator=g) > 0.7).float()
    y = torch.randint(0, classes, (n,), generator=g)
    return templates[y] + torch.rand(n, 1, 12, 12, generator=g), y


def dead_network(out: Path, steps: int = 200, lr: float = 0.5) -> None:
    """SGD lr 0.5 (momentum 0.9): the loss jumps, every ReLU dies at step 47, the loss stays at chance (ln 10).

    From then on every gradient is exactly zero except the last layer's bias (it fits the label frequencies).
    """
    torch.manual_seed(46)
    x, y = _template_images(1024 + 256, seed=46)
    model = DeadCNN()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
    with _hook(out) as hook:
        hook.register_module(model)
        hook.register_loss(criterion)
        for step in range(steps):
            i = (step * 32) % 1024
            hook.set_mode(ts.modes.TRAIN)
            model.train()
            optimizer.zero_grad()
            criterion(model(x[i : i + 32]), y[i : i + 32]).backward()
            optimizer.step()
            if (step + 1) % 50 == 0:
                hook.set_mode(ts.modes.EVAL)
                model.eval()
                with torch.no_grad():
                    criterion(model(x[1024:]), y[1024:])


# --- an input-bound DataLoader: __getitem__ dominates the step ---------------------------------------------------
class _Samples(Dataset):  # type: ignore[type-arg]
    """In-memory samples; ``cost_s`` of work per sample (the slow decoding of a real input pipeline)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, cost_s: float = 0.0) -> None:
        self.x, self.y, self.cost_s = x, y, cost_s

    def __len__(self) -> int:
        return self.x.shape[0]

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.cost_s:
            time.sleep(self.cost_s)
        return self.x[i], self.y[i]


def input_bound_loader(out: Path, epochs: int = 1) -> None:
    torch.manual_seed(47)
    x, y, _, _ = _binary_task(47, n=256)
    model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    with _hook(out, profiler=True) as hook:
        hook.register_module(model)
        hook.register_loss(criterion)
        for _ in range(epochs):
            for xb, yb in DataLoader(_Samples(x, y, cost_s=0.004), batch_size=8, shuffle=True):
                optimizer.zero_grad()
                criterion(model(xb), yb).backward()
                optimizer.step()


SCENARIOS: dict[str, tuple[str | None, Callable[[Path], None]]] = {
    "dcgan_two_optimizers": (None, dcgan_two_optimizers),
    "lbfgs_closure": (None, lbfgs_closure),
    "gcn_custom_names": (None, gcn_custom_names),
    "forward_forward": (None, forward_forward),
    "mlp_sgd_slow_validation": (None, mlp_sgd_slow_validation),
    "dead_network": ("VanishingGradient", dead_network),
    "input_bound_loaded": ("InputBottleneck", input_bound_loader),
    "mlp_sgd_loaded_machine": (None, mlp_sgd_loaded_machine),
}
LOADED = ("input_bound_loaded", "mlp_sgd_loaded_machine")
"""Trained while a CPU hog (``python -c "while True: pass"``) keeps a core busy."""
EVALUATES = {"lbfgs_closure", "gcn_custom_names", "mlp_sgd_slow_validation", "mlp_sgd_loaded_machine"}
"""Healthy scenarios whose real code evaluates (Overfit and Overtraining have EVAL losses to judge)."""
