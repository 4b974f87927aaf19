"""Issue 28, captures: what the PyTorch hook records of training code written the way real projects write it.

Each test trains a tiny model on CPU the way a third-party script does (pytorch/examples' mnist_forward_forward,
dcgan and gcn; an encoder/decoder kept in an ``nn.ModuleDict``; a layer replaced after registration) and reads the
run back through the Trial API.
"""

from __future__ import annotations

import logging

import numpy as np
import pytest
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

import trainspect as ts
from trainspect.modes import ModeKeys

torch.set_num_threads(1)

EVERY_STEP = ts.SaveConfig(save_interval=1)


def _data(n: int, seed: int = 1, features: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    gen = torch.Generator().manual_seed(seed)
    return [(torch.randn(8, features, generator=gen), torch.randn(8, 1, generator=gen)) for _ in range(n)]


# --- 1. forward() called directly (pytorch/examples mnist_forward_forward) ----------------------------------------
class _FFLayer(nn.Linear):
    """mnist_forward_forward's ``Layer``: trains itself, calling ``self.forward`` (no module hooks run)."""

    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__(n_in, n_out)
        self.relu = nn.ReLU()
        self.opt = torch.optim.Adam(self.parameters(), lr=0.03)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(direction, self.weight.T) + self.bias.unsqueeze(0))

    def train_layer(self, x_pos: torch.Tensor, x_neg: torch.Tensor, epochs: int, losses: list[float]) -> None:
        for _ in range(epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([-g_pos + 2.0, g_neg - 2.0]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            losses.append(loss.item())


def test_steps_driven_by_direct_forward_calls_are_recorded(tmp_path) -> None:
    torch.manual_seed(0)
    layer = _FFLayer(6, 5)
    x_pos, x_neg = torch.randn(16, 6), torch.randn(16, 6)
    losses: list[float] = []
    with ts.torch.Hook(
        tmp_path, include_collections=["losses", "gradients", "weights"], save_config=EVERY_STEP
    ) as hook:
        hook.register_module(layer)
        layer.train_layer(x_pos, x_neg, 4, losses)
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2, 3]
    np.testing.assert_allclose([float(trial.tensor("loss").value(s)) for s in range(4)], losses, rtol=1e-6)
    assert trial.tensor("gradient/_FFLayer_weight").steps() == [0, 1, 2, 3]
    assert "_FFLayer_weight" in trial.tensor_names(collection="weights")


def test_another_models_backward_pass_opens_no_step(tmp_path) -> None:
    """A backward pass opens a step only when it reaches the registered model's parameters (a second hook's or an
    unregistered model's training is not this hook's)."""
    torch.manual_seed(0)
    registered, other = nn.Linear(4, 2), nn.Linear(4, 2)
    opt = torch.optim.SGD(other.parameters(), lr=0.1)
    with ts.torch.Hook(tmp_path, include_collections=["losses"], save_config=EVERY_STEP) as hook:
        hook.register_module(registered)
        for _ in range(3):
            opt.zero_grad()
            other(torch.ones(2, 4)).pow(2).mean().backward()
            opt.step()
        registered.forward(torch.ones(2, 4)).sum().backward()  # this one is the registered model's
    assert ts.create_trial(tmp_path).steps() == [0]


def test_backward_passes_no_registered_model_records_warns_once_what_to_register(tmp_path, caplog) -> None:
    torch.manual_seed(0)
    layer = _FFLayer(6, 5)  # no model registered: as under autolog, where a model is found at its first call
    with caplog.at_level(logging.WARNING, logger="trainspect"):
        with ts.torch.Hook(tmp_path):
            layer.train_layer(torch.randn(4, 6), torch.randn(4, 6), 3, [])
    warnings = [r.getMessage() for r in caplog.records if "no registered model" in r.getMessage()]
    assert len(warnings) == 1
    assert "register_module" in warnings[0] and "model(x)" in warnings[0]


def test_forward_forward_layers_each_with_its_optimizer_have_a_loss_series_each(tmp_path) -> None:
    torch.manual_seed(0)

    class Net(nn.Module):  # mnist_forward_forward's Net: no forward of its own, layers trained one after the other
        def __init__(self) -> None:
            super().__init__()
            self.layers = nn.ModuleList([_FFLayer(6, 5), _FFLayer(5, 4)])

    net, x_pos, x_neg = Net(), torch.randn(16, 6), torch.randn(16, 6)
    losses: list[float] = []
    with ts.torch.Hook(tmp_path, save_config=EVERY_STEP) as hook:
        hook.register_module(net)
        for layer in net.layers:
            layer.train_layer(x_pos, x_neg, 3, losses)
            x_pos, x_neg = layer(x_pos).detach(), layer(x_neg).detach()
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(6))
    for name, expected in (("loss/layers.0", losses[:3]), ("loss/layers.1", losses[3:])):
        got = trial.tensor(name).values(mode=ModeKeys.TRAIN)
        np.testing.assert_allclose([float(v) for _, v in sorted(got.items())], expected, rtol=1e-6)


# --- 2. a registered container never called itself ----------------------------------------------------------------
def test_submodules_of_a_registered_container_drive_the_step(tmp_path) -> None:
    torch.manual_seed(0)
    parts = nn.ModuleDict({"encoder": nn.Sequential(nn.Linear(4, 3), nn.Tanh()), "decoder": nn.Linear(3, 4)})
    opt = torch.optim.SGD(parts.parameters(), lr=0.1)
    losses, grads = [], []
    with ts.torch.Hook(
        tmp_path, include_collections=["losses", "gradients", "outputs"], save_config=EVERY_STEP
    ) as hook:
        hook.register_module(parts)
        hook.get_collection("outputs").add_module_tensors(parts["decoder"])
        for x, _ in _data(3):
            loss = F.mse_loss(parts["decoder"](parts["encoder"](x)), x)
            opt.zero_grad()
            loss.backward()
            grads.append(parts["decoder"].weight.grad.clone())
            opt.step()
            losses.append(loss.item())
        parts.eval()
        with torch.no_grad():
            for x, _ in _data(2, seed=5):  # one EVAL step per batch, not one per submodule call
                F.mse_loss(parts["decoder"](parts["encoder"](x)), x)
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert trial.steps(mode=ModeKeys.EVAL) == [0, 1]
    np.testing.assert_allclose([float(trial.tensor("loss").value(s)) for s in range(3)], losses, rtol=1e-6)
    for step, grad in enumerate(grads):
        np.testing.assert_array_equal(trial.tensor("gradient/ModuleDict_decoder.weight").value(step), grad.numpy())
    assert trial.tensor("decoder_output_0").steps() == [0, 1, 2, 3, 4]  # TRAIN steps 0-2, EVAL steps 0-1


# --- 3. two models of one class, or with the same submodule paths (dcgan) ------------------------------------------
def test_two_models_of_one_class_have_names_of_their_own(tmp_path) -> None:
    torch.manual_seed(0)
    first, second = nn.Sequential(nn.Linear(4, 3)), nn.Sequential(nn.Linear(3, 1))
    opt = torch.optim.SGD([*first.parameters(), *second.parameters()], lr=0.1)
    with ts.torch.Hook(tmp_path, include_collections=["weights", "losses"], save_config=EVERY_STEP) as hook:
        hook.register_module(first)
        hook.register_module(second)
        for x, y in _data(2):
            loss = F.mse_loss(second(first(x)), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    trial = ts.create_trial(tmp_path)
    weights = trial.tensor_names(collection="weights")
    assert "Sequential_0.weight" in weights and "Sequential2_0.weight" in weights
    assert trial.tensor("Sequential_0.weight").value(0).shape == (3, 4)
    assert trial.tensor("Sequential2_0.weight").value(0).shape == (1, 3)


class _Generator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 4))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.main(z)


class _Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.main(x)


def test_models_with_the_same_submodule_paths_have_module_outputs_of_their_own(tmp_path) -> None:
    torch.manual_seed(0)
    net_g, net_d = _Generator(), _Discriminator()
    opt = torch.optim.SGD([*net_g.parameters(), *net_d.parameters()], lr=0.01)
    with ts.torch.Hook(tmp_path, include_regex=[r"main\.1_output"], save_config=EVERY_STEP) as hook:
        hook.register_module(net_g)
        hook.register_module(net_d)
        for _ in range(2):
            loss = net_d(net_g(torch.randn(5, 2))).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    trial = ts.create_trial(tmp_path)
    assert trial.tensor("main.1_output_0").value(0).shape == (5, 6)  # the first model keeps today's names
    assert trial.tensor("_Discriminator.main.1_output_0").value(0).shape == (5, 6)
    assert trial.tensor("main.1_output_0").steps() == [0, 1]


def test_one_model_keeps_todays_names(tmp_path) -> None:
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with ts.torch.Hook(tmp_path, include_collections=["weights"], include_regex=["1_output"]) as hook:
        hook.register_module(model)
        for x, y in _data(1):
            F.mse_loss(model(x), y).backward()
            opt.step()
    names = ts.create_trial(tmp_path).tensor_names()
    assert {"Sequential_0.weight", "Sequential_2.weight", "1_output_0"} <= set(names)


# --- 4. parameters named neither weight nor bias (gcn's kernel, pos_embed) -----------------------------------------
class _GraphConv(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(n_in, n_out) * 0.3)
        self.pos_embed = nn.Parameter(torch.zeros(1, n_out))
        self.bias = nn.Parameter(torch.zeros(n_out))
        self.register_buffer("adj", torch.eye(8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.adj @ (x @ self.kernel) + self.pos_embed + self.bias


def test_every_floating_parameter_is_a_weight_whatever_its_name(tmp_path) -> None:
    torch.manual_seed(0)
    model = _GraphConv(4, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.01)
    with ts.torch.Hook(tmp_path, include_collections=["weights", "biases"], save_config=EVERY_STEP) as hook:
        hook.register_module(model)
        for x, y in _data(2):
            kernel = model.kernel.detach().clone()
            F.mse_loss(model(x), y).backward()
            opt.step()
            opt.zero_grad()
    trial = ts.create_trial(tmp_path)
    assert set(trial.tensor_names(collection="weights")) == {"_GraphConv_kernel", "_GraphConv_pos_embed"}
    assert trial.tensor_names(collection="biases") == ["_GraphConv_bias"]
    np.testing.assert_array_equal(trial.tensor("_GraphConv_kernel").value(1), kernel.numpy())


# --- 5. a layer replaced after register_module ---------------------------------------------------------------------
def test_a_layer_replaced_after_registration_is_recorded_as_the_new_layer(tmp_path) -> None:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 3), nn.ReLU(), nn.Linear(3, 2))
    hook = ts.torch.Hook(
        tmp_path, include_collections=["weights", "gradients"], include_regex=["2_output"], save_config=EVERY_STEP
    )
    hook.register_module(model)
    model[2] = nn.Linear(3, 1)  # a new head, as fine-tuning scripts do after building (and registering) the model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    heads = []
    for x, y in _data(3):
        heads.append(model[2].weight.detach().clone())
        F.mse_loss(model(x), y).backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    trial = ts.create_trial(tmp_path)
    for step, head in enumerate(heads):
        np.testing.assert_array_equal(trial.tensor("Sequential_2.weight").value(step), head.numpy())
    assert trial.tensor("gradient/Sequential_2.weight").steps() == [0, 1, 2]
    assert trial.tensor("2_output_0").value(0).shape == (8, 1)


# --- 6. closure-based optimizers (LBFGS, time_sequence_prediction); evaluations under no_grad or of eval copies -----
def test_lbfgs_records_the_first_closure_loss_and_no_grad_tests_are_eval_steps(tmp_path) -> None:
    torch.manual_seed(0)
    model, criterion = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1)), nn.MSELoss()
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    (x, y), (tx, ty) = _data(1, features=3)[0], _data(1, seed=7, features=3)[0]
    first, tests = [], []
    with ts.torch.Hook(tmp_path, save_config=EVERY_STEP) as hook:
        hook.register_module(model)
        hook.register_loss(criterion)
        for _ in range(3):
            calls: list[float] = []

            def closure(calls: list[float] = calls) -> torch.Tensor:
                opt.zero_grad()
                loss = criterion(model(x), y)
                calls.append(loss.item())
                loss.backward()
                return loss

            opt.step(closure)
            assert len(calls) > 1
            first.append(calls[0])
            with torch.no_grad():  # time_sequence_prediction's test forward after each step
                tests.append(criterion(model(tx), ty).item())
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert trial.steps(mode=ModeKeys.EVAL) == [0, 1, 2]  # no phantom TRAIN step from the last test forward
    for name in ("loss", "MSELoss_output_0"):
        train = trial.tensor(name).values(mode=ModeKeys.TRAIN)
        np.testing.assert_allclose([float(train[s]) for s in range(3)], first, rtol=1e-6)
    evals = trial.tensor("MSELoss_output_0").values(mode=ModeKeys.EVAL)
    np.testing.assert_allclose([float(evals[s]) for s in range(3)], tests, rtol=1e-6)
    assert "MSELoss_micro_batches" not in trial.tensor_names()


def test_validation_of_the_model_and_of_its_ema_copy_is_eval(tmp_path) -> None:
    import copy

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
    ema = copy.deepcopy(model).eval().requires_grad_(False)  # timm's ModelEmaV2: a separate module
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    train_losses = []
    with ts.torch.Hook(tmp_path, save_config=EVERY_STEP) as hook:
        hook.register_module(model)
        hook.register_module(ema)
        for epoch in range(2):
            model.train()
            for x, y in _data(3, seed=epoch):
                loss = F.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
                train_losses.append(loss.item())
                with torch.no_grad():
                    for e, m in zip(ema.parameters(), model.parameters(), strict=True):
                        e.mul_(0.9).add_(m, alpha=0.1)
            for net in (model, ema):  # timm validates the model, then its EMA copy
                net.eval()
                with torch.no_grad():
                    for x, y in _data(2, seed=9):
                        F.mse_loss(net(x), y)
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(6))
    train = trial.tensor("MSELoss_output_0").values(mode=ModeKeys.TRAIN)
    np.testing.assert_allclose([float(train[s]) for s in range(6)], train_losses, rtol=1e-6)
    assert trial.steps(mode=ModeKeys.EVAL) == list(range(8))
    assert "MSELoss_micro_batches" not in trial.tensor_names()


# --- 7. smdebug-idiom scripts under `trainspect run`: register_loss beside the job's own capture ---------------------
def test_a_registered_loss_module_under_autolog_is_recorded_once_per_call(tmp_path) -> None:
    torch.manual_seed(0)
    model, criterion = nn.Sequential(nn.Linear(4, 3)), nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    logger = ts.autolog(out_dir=tmp_path / "run")  # what `trainspect run` starts
    assert logger is not None
    losses = []
    try:
        hook = ts.torch.Hook("unused", include_collections=["losses"])  # the script's own (smdebug-style) hook
        hook.register_module(model)
        hook.register_loss(criterion)
        for x, _ in _data(3):
            loss = criterion(model(x), (x[:, 0] > 0).long())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
    finally:
        logger.close()
    trial = ts.create_trial(tmp_path / "run")
    assert trial.steps(mode=ModeKeys.TRAIN) == [0, 1, 2]
    assert "CrossEntropyLoss_micro_batches" not in trial.tensor_names()
    got = trial.tensor("CrossEntropyLoss_output_0").values(mode=ModeKeys.TRAIN)
    np.testing.assert_allclose([float(got[s]) for s in range(3)], losses, rtol=1e-6)


# --- 8. GANs: one loss series per optimizer ------------------------------------------------------------------------
def test_a_gan_records_one_loss_series_per_optimizer(tmp_path) -> None:
    torch.manual_seed(0)
    net_g, net_d, criterion = _Generator(), _Discriminator(), nn.BCEWithLogitsLoss()
    opt_d = torch.optim.Adam(net_d.parameters(), lr=0.01)
    opt_g = torch.optim.Adam(net_g.parameters(), lr=0.01)
    real_data = torch.randn(16, 4) + 2.0
    d_losses, g_losses = [], []
    with ts.torch.Hook(tmp_path, save_config=EVERY_STEP) as hook:
        hook.register_module(net_g)
        hook.register_module(net_d)
        hook.register_loss(criterion)
        for _ in range(3):  # dcgan's loop
            net_d.zero_grad()
            err_real = criterion(net_d(real_data), torch.ones(16, 1))
            err_real.backward()
            fake = net_g(torch.randn(16, 2))
            err_fake = criterion(net_d(fake.detach()), torch.zeros(16, 1))
            err_fake.backward()
            opt_d.step()
            d_losses.append((err_real.item() + err_fake.item()) / 2)
            net_g.zero_grad()
            err_g = criterion(net_d(fake), torch.ones(16, 1))
            err_g.backward()
            opt_g.step()
            g_losses.append(err_g.item())
    trial = ts.create_trial(tmp_path)
    losses = set(trial.tensor_names(collection="losses"))
    assert {"loss/_Discriminator", "loss/_Generator", "BCEWithLogitsLoss/_Generator_output_0"} <= losses
    assert "loss" not in trial.tensor_names()
    for name, expected in (("loss/_Discriminator", d_losses), ("loss/_Generator", g_losses)):
        got = trial.tensor(name).values(mode=ModeKeys.TRAIN)
        np.testing.assert_allclose([float(v) for _, v in sorted(got.items())], expected, rtol=1e-6)
    generator = trial.tensor("BCEWithLogitsLoss/_Generator_output_0").values(mode=ModeKeys.TRAIN)
    np.testing.assert_allclose([float(v) for _, v in sorted(generator.items())], g_losses, rtol=1e-6)


def test_a_lightning_gan_with_manual_optimization_records_each_optimizer_s_losses(tmp_path) -> None:
    lightning = pytest.importorskip("lightning")
    from torch.utils.data import DataLoader, TensorDataset

    class GAN(lightning.LightningModule):  # Lightning's basic GAN example, tiny
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False
            self.generator = nn.Sequential(nn.Linear(2, 6), nn.ReLU(), nn.Linear(6, 4))
            self.discriminator = nn.Sequential(nn.Linear(4, 6), nn.ReLU(), nn.Linear(6, 1))
            self.d_losses: list[float] = []
            self.g_losses: list[float] = []

        def forward(self, z: torch.Tensor) -> torch.Tensor:
            return self.generator(z)

        def training_step(self, batch: list[torch.Tensor], batch_idx: int) -> None:
            (real,) = batch
            opt_g, opt_d = self.optimizers()
            z, valid, fake = torch.randn(len(real), 2), torch.ones(len(real), 1), torch.zeros(len(real), 1)
            self.toggle_optimizer(opt_g)
            g_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z)), valid)
            self.manual_backward(g_loss)
            opt_g.step()
            opt_g.zero_grad()
            self.untoggle_optimizer(opt_g)
            self.g_losses.append(g_loss.item())
            self.toggle_optimizer(opt_d)  # the real-data loss comes before the model's forward pass
            real_loss = F.binary_cross_entropy_with_logits(self.discriminator(real), valid)
            fake_loss = F.binary_cross_entropy_with_logits(self.discriminator(self(z).detach()), fake)
            d_loss = (real_loss + fake_loss) / 2
            self.manual_backward(d_loss)
            opt_d.step()
            opt_d.zero_grad()
            self.untoggle_optimizer(opt_d)
            self.d_losses.append(d_loss.item())

        def configure_optimizers(self) -> list[torch.optim.Optimizer]:
            return [
                torch.optim.Adam(self.generator.parameters(), lr=0.01),
                torch.optim.Adam(self.discriminator.parameters(), lr=0.01),
            ]

    torch.manual_seed(0)
    model = GAN()
    trainer = lightning.Trainer(
        max_epochs=1,
        limit_train_batches=3,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        accelerator="cpu",
        num_sanity_val_steps=0,
    )
    with ts.torch.Hook(tmp_path, save_config=EVERY_STEP) as hook:
        hook.register_module(model)
        trainer.fit(model, DataLoader(TensorDataset(torch.randn(12, 4) + 2), batch_size=4))
    trial = ts.create_trial(tmp_path)
    assert trial.steps(mode=ModeKeys.TRAIN) == list(range(6))
    for name, expected in (
        ("loss/generator", model.g_losses),
        ("loss/discriminator", model.d_losses),
        ("BCEWithLogitsLoss/discriminator_output_0", model.d_losses),
    ):
        got = trial.tensor(name).values(mode=ModeKeys.TRAIN)
        np.testing.assert_allclose([float(v) for _, v in sorted(got.items())], expected, rtol=1e-6)


@pytest.fixture(autouse=True)
def _no_stale_hooks():
    yield
    from trainspect.hooks.torch_backward import LossTap

    assert LossTap.current() is None  # the last hook's close removed the patches
