"""One loss series per optimizer when training steps alternate optimizers (GANs, actor-critic, per-layer training).

A training step ends at ``optimizer.step()``. When two or more optimizers update the registered models (found once,
by a heap scan at the end of the first training step), the losses of a step go under the name of the optimizer that
ends it: ``loss/<owner>`` for the backpropagated loss, ``<LossModule>/<owner>_output_0`` for a loss module's output
(``BCELoss/Discriminator_output_0``), each in the ``losses`` collection, so that the rules judge each optimizer's losses
as a series of their own (a GAN's discriminator and generator losses are no one series). ``<owner>`` is, in
this order: the registered model whose parameters the optimizer alone updates (dcgan's ``Generator``), the deepest
submodule that holds them all (Lightning's ``generator``, forward-forward's ``layers.0``), else ``optimizer_<i>`` (by
the order of their parameters). With one optimizer (the common case) the names stay ``loss`` and
``<LossModule>_output_0``.
"""

from __future__ import annotations

from typing import Any

from trainspect.hooks.torch_backward import optimizers_of

__all__ = ["OptimizerLosses", "owner_names", "series_name"]


def series_name(name: str, owner: str) -> str:
    """A loss's name in ``owner``'s series (``loss`` → ``loss/G``, ``BCELoss_output_0`` → ``BCELoss/G_output_0``)."""
    if name.endswith("_output_0"):
        return f"{name[: -len('_output_0')]}/{owner}_output_0"
    return f"{name}/{owner}"


def _unique(sets: list[set[str]]) -> list[str] | None:
    """One name per optimizer when each names exactly one thing and no two the same one (else None)."""
    if all(len(s) == 1 for s in sets):
        names = [next(iter(s)) for s in sets]
        if len(set(names)) == len(names):
            return names
    return None


def _common_module(paths: list[str]) -> str:
    """The deepest module holding every parameter path (``["layers.0.weight", "layers.0.bias"]`` → ``layers.0``)."""
    parts = [path.split(".")[:-1] for path in paths]
    common: list[str] = []
    for level in zip(*parts, strict=False):
        if any(p != level[0] for p in level):
            break
        common.append(level[0])
    return ".".join(common)


def owner_names(groups: list[list[tuple[str, str]]]) -> list[str]:
    """Each optimizer's owner name from the (model, parameter path) of each parameter it updates."""
    by_model = _unique([{model for model, _ in group} for group in groups])
    if by_model is not None:
        return by_model
    by_child = _unique([{_common_module([path for _, path in group])} - {""} for group in groups])
    if by_child is not None:
        return by_child
    return [f"optimizer_{i}" for i in range(len(groups))]


class OptimizerLosses:
    """Which series the losses of a step ended by an optimizer belong to (decided at the first training step).

    Attributes:
        owners: the owner name of each optimizer by ``id`` (empty: one optimizer, plain names).
    """

    def __init__(self) -> None:
        self.owners: dict[int, str] = {}
        self.decided = False

    def decide(self, params: list[Any], owner_of: dict[int, tuple[int, str, str]]) -> None:
        """Find the optimizers of the registered ``params`` (one heap scan) and name them.

        ``owner_of``: each parameter's (order, model, path), by ``id``.
        """
        self.decided = True
        found: dict[int, tuple[int, list[int], list[tuple[str, str]]]] = {}
        for opt in optimizers_of(params):
            entry = found.get(id(opt.param_groups))  # a wrapper (LightningOptimizer) shares its optimizer's groups
            if entry is not None:
                entry[1].append(id(opt))
                continue
            group = [owner_of[id(p)] for g in opt.param_groups for p in g["params"] if id(p) in owner_of]
            if group:
                found[id(opt.param_groups)] = (min(o for o, _, _ in group), [id(opt)], [(m, p) for _, m, p in group])
        if len(found) < 2:
            return
        ordered = sorted(found.values(), key=lambda entry: entry[0])
        names = owner_names([group for _, _, group in ordered])
        self.owners = {key: name for (_, keys, _), name in zip(ordered, names, strict=True) for key in keys}

    def name_step(self, losses: Any, optimizer: Any, registry: Any, collections: Any) -> None:
        """A training step ends at ``optimizer.step()``: its losses join the optimizer's series (if there are several).

        ``losses``: the step's :class:`~trainspect.hooks.torch_staging.StepLosses`; ``registry``: the hook's
        :class:`~trainspect.hooks.torch_models.ModelRegistry`; ``collections``: the hook's collections.
        """
        if not self.decided:
            self.decide([view.param for view in registry.params], registry.owner_of())
        if self.owners and losses.values:
            members = collections.get("losses").tensor_names
            for name in losses.rename(self.owner(optimizer)):
                if name not in members:
                    members.add(name)

    def owner(self, optimizer: Any) -> str:
        """The owner name of an optimizer that ends a step (one found only now: ``optimizer_<i>``)."""
        name = self.owners.get(id(optimizer))
        if name is None:
            name = self.owners[id(optimizer)] = f"optimizer_{len(set(self.owners.values()))}"
        return name
