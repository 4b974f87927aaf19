"""Issue 2: TensorBoard shows the captured losses, reductions and histograms, under the run directory's name."""

from __future__ import annotations

import numpy as np
import pytest
from hooktrain import LOSS, Tiny, tname
from tensorboard.backend.event_processing import event_accumulator, plugin_event_multiplexer

import trainspect as ts
from trainspect.modes import ModeKeys

W0, G0 = tname("0.weight"), f"gradient/{tname('0.weight')}"


@pytest.fixture
def run(tmp_path):
    out_dir = tmp_path / "logs" / "exp_mlp"
    tiny = Tiny()
    weights = ts.Collection("weights", save_config=ts.SaveConfig(save_interval=2))
    grads = ts.Collection("gradients", reduction_config=ts.ReductionConfig(reductions=["mean"], norms=["l2"]))
    hook = ts.torch.Hook(
        out_dir, include_collections=[weights, grads, "losses"], save_config=ts.SaveConfig(save_interval=1)
    )
    tiny.register(hook)
    hook.set_mode(ModeKeys.TRAIN)
    tiny.train(4)
    hook.set_mode(ModeKeys.EVAL)
    tiny.evaluate(2)
    hook.close()
    acc = event_accumulator.EventAccumulator(
        str(out_dir), size_guidance={event_accumulator.SCALARS: 0, event_accumulator.HISTOGRAMS: 0}
    )
    acc.Reload()
    return tmp_path / "logs", tiny, acc


def test_losses_and_reductions_are_scalars(run):
    _, tiny, acc = run
    tags = acc.Tags()
    assert LOSS in tags["scalars"]
    losses = acc.Scalars(LOSS)
    assert [e.step for e in losses] == [0, 1, 2, 3]
    np.testing.assert_allclose([e.value for e in losses], [r.loss for r in tiny.log[:4]], rtol=1e-6)
    eval_losses = acc.Scalars(f"eval/{LOSS}")
    assert [e.step for e in eval_losses] == [4, 5]  # TensorBoard's x axis is the global step
    np.testing.assert_allclose([e.value for e in eval_losses], [r.loss for r in tiny.log[4:]], rtol=1e-6)
    means = acc.Scalars(f"{G0}/mean")
    assert [e.step for e in means] == [0, 1, 2, 3]
    np.testing.assert_allclose(
        [e.value for e in means], [r.grads["0.weight"].astype(np.float64).mean() for r in tiny.log[:4]], rtol=1e-5
    )
    l2 = acc.Scalars(f"{G0}/l2")
    np.testing.assert_allclose(l2[2].value, np.linalg.norm(tiny.log[2].grads["0.weight"]), rtol=1e-5)


def test_weights_histograms(run):
    _, tiny, acc = run
    histos = acc.Histograms(W0)
    assert [h.step for h in histos] == [0, 2]
    h = histos[1].histogram_value
    w = tiny.log[2].weights["0.weight"].astype(np.float64)
    assert h.num == w.size
    np.testing.assert_allclose([h.min, h.max, h.sum], [w.min(), w.max(), w.sum()], rtol=1e-6)
    assert sum(h.bucket) == w.size
    # the gradients were saved as reductions only: no histogram for them
    assert G0 not in acc.Tags()["histograms"]


def test_gradient_histograms_when_raw(tmp_path):
    out_dir = tmp_path / "g"
    tiny = Tiny()
    hook = ts.torch.Hook(out_dir, include_collections=["gradients"], save_config=ts.SaveConfig(save_interval=1))
    tiny.register(hook)
    tiny.train(2)
    hook.close()
    acc = event_accumulator.EventAccumulator(str(out_dir), size_guidance={event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    h = acc.Histograms(G0)[1].histogram_value
    np.testing.assert_allclose(h.sum, tiny.log[1].grads["0.weight"].astype(np.float64).sum(), rtol=1e-5, atol=1e-7)


def test_no_histograms_when_save_histogram_is_off(tmp_path):
    out_dir = tmp_path / "nohist"
    tiny = Tiny()
    hook = ts.torch.Hook(
        out_dir,
        include_collections=[ts.Collection("weights", save_histogram=False)],
        save_config=ts.SaveConfig(save_interval=1),
    )
    tiny.register(hook)
    tiny.train(2)
    hook.close()
    acc = event_accumulator.EventAccumulator(str(out_dir))
    acc.Reload()
    assert acc.Tags()["histograms"] == []
    assert LOSS in acc.Tags()["scalars"]


def test_run_directory_name_is_the_run_name(run):
    logs, _, _ = run
    mux = plugin_event_multiplexer.EventMultiplexer().AddRunsFromDirectory(str(logs))
    mux.Reload()
    assert list(mux.Runs()) == ["exp_mlp"]


def test_every_tensor_of_more_than_one_element_gets_a_histogram(tmp_path):
    """A two-element bias is a distribution (a histogram); a one-element one is a scalar (none)."""
    import torch

    out_dir = tmp_path / "h"
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.Linear(2, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    colls = ["weights", "biases"]
    hook = ts.torch.Hook(out_dir, include_collections=colls, save_config=ts.SaveConfig(save_interval=1))
    hook.register_module(model)
    for _ in range(2):
        model(torch.ones(4, 3)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
    hook.close()
    acc = event_accumulator.EventAccumulator(str(out_dir), size_guidance={event_accumulator.HISTOGRAMS: 0})
    acc.Reload()
    histograms = acc.Tags()["histograms"]
    assert tname("0.bias") in histograms and [h.step for h in acc.Histograms(tname("0.bias"))] == [0, 1]
    assert tname("0.weight") in histograms and tname("1.weight") in histograms
    assert tname("1.bias") not in histograms
