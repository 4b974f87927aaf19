"""The parameters of a registered model as trainspect records them: names, and how to read weight and gradient.

A parameter is recorded as ``<ModelClass>_<path>``, with the wrappers around the user's model looked through (DDP,
DataParallel, classic FSDP, DeepSpeed's engine, ``torch.compile``) and their path components dropped
(``_fsdp_wrapped_module.``, ``_checkpoint_wrapped_module.``, ``_orig_mod.``). Each :class:`ParamView` reads the
current weight and gradient as a *piece*: this rank's local tensor and its :class:`~trainspect.shard.Shard` (None:
the whole tensor). Kinds:

* plain parameters (also DDP's, and ZeRO-1/2's weights, which every rank holds whole);
* DTensors (FSDP2 ``fully_shard``, tensor parallelism): ``to_local()`` and its placements
  (:mod:`~trainspect.hooks.torch_placements`);
* classic FSDP's ``FlatParameter`` (``use_orig_params`` False or True): this rank's flat shard split back into the
  original parameters by the flat parameter's metadata, each a ``flat`` piece under its original name;
* DeepSpeed ZeRO-3 (``ds_tensor``): the local partition, padding removed, and its gradient through
  ``deepspeed.utils.safe_get_local_grad``; ZeRO-1/2 gradients: this rank's fragment of the reduced flat partition.

Every read is local: no collective, no gather. Private FSDP and DeepSpeed attributes are read here only; a missing
one raises AttributeError, which the caller turns into one warning naming the parameter (the parameter is skipped,
so rules report NoData rather than judge an empty array).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from trainspect.hooks.torch_placements import Unrecordable, dtensor_piece, is_dtensor
from trainspect.shard import Shard

__all__ = [
    "ParamView",
    "Piece",
    "parameter_views",
    "model_name",
    "unwrap",
    "clean_path",
    "fingerprint",
    "warn_one_worker",
]

log = logging.getLogger(__name__)

Piece = tuple[torch.Tensor, "Shard | None"]
"""A rank's local tensor and where it sits in the full one (None: it is the full tensor)."""

_DROPPED = ("_fsdp_wrapped_module", "_checkpoint_wrapped_module", "_orig_mod")
_ENGINES = ("DeepSpeedEngine", "PipelineEngine")


class ParamView:
    """One recorded parameter: its name, the module's parameter object, and how to read it.

    Attributes:
        name: the recorded name (``Net_fc1.weight``; its gradient is ``gradient/<name>``, ``grad_name``).
        param: the parameter object the model holds (the one optimizers and gradient hooks see).
        sharded: its gradient is read at ``optimizer.step()`` even with ``local_gradients`` (a sharded engine's
            per-rank gradient before the reduction is transient and is no piece of any full tensor).
        hookable: a post-accumulate-grad hook on ``param`` sees the gradient recorded (loops without an optimizer).
    """

    sharded = False
    hookable = True

    def __init__(self, name: str, param: nn.Parameter) -> None:
        self.name = name
        self.grad_name = f"gradient/{name}"
        """The name its gradient is recorded under."""
        self.param = param

    def weight(self) -> Piece | None:
        """The current weight.

        Raises:
            Unrecordable: the parameter holds no data on this rank (an engine trainspect does not know freed it).
        """
        if self.param.numel() == 0:
            raise Unrecordable("the parameter holds no data on this rank (freed or sharded by its engine)")
        return self.param, None

    def grad(self) -> Piece | None:
        """The current gradient (None: there is none)."""
        g = self.param.grad
        return None if g is None else (g, None)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class _DTensorView(ParamView):
    sharded = True

    def weight(self) -> Piece | None:
        return dtensor_piece(self.param)

    def grad(self) -> Piece | None:
        g = self.param.grad
        if g is None:
            return None
        return dtensor_piece(g) if is_dtensor(g) else (g, None)


class _ZeroFragmentView(ParamView):
    """ZeRO-1/2 (and DeepSpeed's bf16 optimizer): whole weights; the gradient from the reduced flat partition."""

    def grad(self) -> Piece | None:
        param: Any = self.param
        if param.grad is not None:  # before DeepSpeed reduced it: the local gradient
            return param.grad, None
        mapping = param._hp_mapping  # None: no fragment of this parameter on this rank
        if mapping is None:
            return None
        fragment = mapping.hp_fragment
        base = fragment._base
        if base is None or base.grad is None:
            return None
        start = fragment.storage_offset() - base.storage_offset()
        piece = base.grad.reshape(-1).narrow(0, start, fragment.numel())
        start_in_param = int(mapping.lp_fragment_address.start)
        return piece, Shard(tuple(param.shape), (start_in_param,), "flat", False, "ZeRO partition")


class _Zero3View(ParamView):
    """DeepSpeed ZeRO-3: the rank's partition ``ds_tensor`` (``start``: where it begins, ``valid``: unpadded)."""

    sharded = True
    hookable = False

    def __init__(self, name: str, param: Any, start: int, valid: int) -> None:
        super().__init__(name, param)
        self.ds_param: Any = param
        self.start, self.valid = start, valid
        self.shard = Shard(tuple(int(s) for s in param.ds_shape), (start,), "flat", False, "ZeRO-3 partition")

    def weight(self) -> Piece | None:
        local = self.ds_param.ds_tensor
        if local.numel() < self.valid:
            raise Unrecordable("its ZeRO-3 partition is not in memory (offloaded)")
        return local.reshape(-1).narrow(0, 0, self.valid), self.shard

    def grad(self) -> Piece | None:
        from deepspeed.utils import safe_get_local_grad

        g = safe_get_local_grad(self.param)
        return None if g is None else (g.reshape(-1).narrow(0, 0, self.valid), self.shard)


class _FlatPieceView(ParamView):
    """Classic FSDP: original parameter ``index`` of a ``FlatParameter``, a slice of this rank's flat shard."""

    sharded = True
    hookable = False

    def __init__(self, name: str, param: nn.Parameter, flat: Any, index: int, replica: bool) -> None:
        super().__init__(name, param)
        info = flat._shard_param_infos[index]
        self.flat, self.offset, self.numel = flat, int(info.offset_in_shard), int(info.numel_in_shard)
        self.sharded_numel = int(flat._sharded_size.numel())
        shape = tuple(int(s) for s in flat._shapes[index])
        self.shard = Shard(shape, (int(info.intra_param_start_idx),), "flat", replica, "FSDP FlatParameter")

    def weight(self) -> Piece | None:
        flat = self.flat
        local = flat if flat.numel() == self.sharded_numel else getattr(flat, "_local_shard", None)
        if local is None or local.numel() != self.sharded_numel:
            raise Unrecordable("its FSDP flat shard is not in place (unsharded outside a forward pass)")
        return local.detach().narrow(0, self.offset, self.numel), self.shard

    def grad(self) -> Piece | None:
        g = self.flat.grad
        if g is None:
            return None
        if g.numel() != self.sharded_numel:
            raise Unrecordable("its FSDP gradient is not the sharded one (read outside optimizer.step())")
        return g.narrow(0, self.offset, self.numel), self.shard


def unwrap(module: nn.Module) -> nn.Module:
    """The user's model inside DDP, DataParallel, classic FSDP, DeepSpeed's engine and ``torch.compile``."""
    for _ in range(16):
        inner = None
        if isinstance(module, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            inner = module.module
        elif type(module).__name__ in _ENGINES or type(module).__name__ == "FullyShardedDataParallel":
            inner = getattr(module, "_fsdp_wrapped_module", None) or getattr(module, "module", None)
        elif type(module).__name__ == "OptimizedModule":
            inner = getattr(module, "_orig_mod", None)
        if not isinstance(inner, nn.Module):
            return module
        module = inner
    return module


def model_name(module: nn.Module) -> str:
    """The model's class name, looking through the class FSDP2's ``fully_shard`` makes (``FSDPNet`` → ``Net``)."""
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without torch.distributed
        return type(module).__name__
    for cls in type(module).__mro__:
        if not issubclass(cls, FSDPModule):
            return cls.__name__
    return type(module).__name__  # pragma: no cover - FSDPModule itself


def clean_path(path: str) -> str:
    """A module or parameter path without wrapper components (``_fsdp_wrapped_module.a.weight`` → ``a.weight``)."""
    return ".".join(p for p in path.split(".") if p not in _DROPPED)


def fingerprint(models: list[nn.Module]) -> tuple[int, ...]:
    """Identities of the models' parameter objects.

    ``fully_shard`` after registration replaces them; inside a forward pass FSDP2 swaps in its unsharded ones.
    """
    return tuple(id(p) for m in models for p in m.parameters())


def _fsdp2_sharded(model: nn.Module, warn: Callable[[str, str], None]) -> dict[tuple[int, str], nn.Parameter]:
    """FSDP2: each managed parameter's sharded DTensor, by (id of its module, attribute name).

    Inside a forward pass FSDP2 swaps the modules' attributes for the unsharded parameters (plain tensors whose
    storage it frees after the backward pass); the sharded ones are the parameters that optimizers hold.
    """
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # pragma: no cover - torch without torch.distributed
        return {}
    found: dict[tuple[int, str], nn.Parameter] = {}
    for module in model.modules():
        if not isinstance(module, FSDPModule):
            continue
        try:
            for group in module._get_fsdp_state()._fsdp_param_groups:
                for fsdp_param in group.fsdp_params:
                    info = fsdp_param._module_info
                    for owner, attr in [
                        (info.module, info.param_name),
                        *zip(info.shared_modules, info.shared_param_names, strict=True),
                    ]:
                        found[(id(owner), attr)] = fsdp_param.sharded_param
        except AttributeError as exc:
            warn(type(module).__name__, f"its FSDP2 state cannot be read ({exc}); its parameters are read as held")
    return found


def _named_parameters(inner: nn.Module, sharded: dict[tuple[int, str], nn.Parameter]) -> Iterator[tuple[str, Any]]:
    """``inner.named_parameters()``, with FSDP2's sharded parameters in place of those a forward pass swapped in."""
    if not sharded:
        yield from inner.named_parameters()
        return
    seen: set[int] = set()
    for path, module in inner.named_modules():
        for attr, param in module._parameters.items():
            param = sharded.get((id(module), attr), param)
            if param is not None and id(param) not in seen:
                seen.add(id(param))
                yield (f"{path}.{attr}" if path else attr), param


def _fsdp1_orig_params(model: nn.Module, warn: Callable[[str, str], None]) -> dict[int, tuple[Any, int, bool]]:
    """Classic FSDP with ``use_orig_params=True``: each original parameter's (flat parameter, index, replica)."""
    found: dict[int, tuple[Any, int, bool]] = {}
    for module in model.modules():
        handle = getattr(module, "_handle", None)
        if handle is None or type(module).__name__ != "FullyShardedDataParallel":
            continue
        try:
            if handle._use_orig_params:
                replica = _fsdp1_replica(module, handle)
                for i, p in enumerate(handle.flat_param._params):
                    found[id(p)] = (handle.flat_param, i, replica)
        except AttributeError as exc:
            warn(type(module).__name__, f"its FSDP metadata cannot be read ({exc})")
    return found


def _fsdp1_replica(fsdp: nn.Module, handle: Any) -> bool:
    """Whether this rank's FSDP shard is a copy another rank also holds (NO_SHARD, HYBRID_SHARD's replicas)."""
    if not handle.uses_sharded_strategy:
        return bool(handle.rank != 0)
    inter = getattr(fsdp, "_inter_node_pg", None)
    return inter is not None and torch.distributed.get_rank(inter) != 0


def _flat_views(prefix: str, path: str, flat: Any, owner: nn.Module) -> Iterator[ParamView]:
    """Classic FSDP, ``use_orig_params=False``: the original parameters in this rank's shard of ``flat``."""
    fsdp = _fsdp_of(owner, flat)
    replica = _fsdp1_replica(fsdp, fsdp._handle) if fsdp is not None else False
    base = clean_path(path.rsplit(".", 1)[0]) if "." in path else ""
    for i, (fqn, info) in enumerate(zip(flat._fqns, flat._shard_param_infos, strict=True)):
        if info.in_shard and info.numel_in_shard:
            name = ".".join(p for p in (base, clean_path(fqn)) if p)
            yield _FlatPieceView(f"{prefix}_{name}", flat, flat, i, replica)


def _fsdp_of(model: nn.Module, flat: nn.Parameter) -> Any:
    for module in model.modules():
        handle = getattr(module, "_handle", None)
        if handle is not None and getattr(handle, "flat_param", None) is flat:
            return module
    return None


def _zero3_view(name: str, param: Any) -> ParamView | None:
    """DeepSpeed ZeRO-3: the view of this rank's partition (None: the partition is padding only)."""
    group = getattr(param, "ds_process_group", None)
    rank = torch.distributed.get_rank(group) if group is not None else torch.distributed.get_rank()
    size = int(param.ds_tensor.ds_numel)
    start = size * rank
    valid = max(0, min(size, int(param.ds_numel) - start))
    return _Zero3View(name, param, start, valid) if valid else None


def _view(name: str, param: Any, orig: dict[int, tuple[Any, int, bool]]) -> ParamView | None:
    if id(param) in orig:
        flat, index, replica = orig[id(param)]
        if not flat._shard_param_infos[index].in_shard:
            return None  # none of it on this rank
        return _FlatPieceView(name, param, flat, index, replica)
    if hasattr(param, "ds_tensor"):
        return _zero3_view(name, param)
    if is_dtensor(param):
        return _DTensorView(name, param)
    if hasattr(param, "_hp_mapping"):
        return _ZeroFragmentView(name, param)
    return ParamView(name, param)


def parameter_views(model: nn.Module, warn: Callable[[str, str], None], prefix: str | None = None) -> list[ParamView]:
    """The parameters of a registered model (wrappers included) to record on this rank.

    A parameter of which this rank holds nothing (another rank's FSDP shard, ZeRO-3 padding) has no view here; one
    whose engine metadata cannot be read is left out with ``warn(name, why)``. ``prefix``: of the names (default: the
    model's class name).
    """
    inner = unwrap(model)
    prefix = prefix or model_name(inner)
    orig = _fsdp1_orig_params(model, warn)
    views: list[ParamView] = []
    for path, param in _named_parameters(inner, _fsdp2_sharded(model, warn)):
        name = f"{prefix}_{clean_path(path)}"
        try:
            if getattr(param, "_is_flat_param", False) and id(param) not in orig:
                views.extend(_flat_views(prefix, path, param, model))
                continue
            view = _view(name, param, orig)
        except (AttributeError, RuntimeError, ValueError) as exc:
            warn(name, f"its engine's metadata cannot be read ({type(exc).__name__}: {exc})")
            continue
        if view is not None:
            views.append(view)
    return views


def warn_one_worker(views: list[ParamView]) -> bool:
    """Warn that only rank 0 records its pieces of parameters sharded after this rank's run opened.

    Returns whether there was anything to warn about (the caller warns once).
    """
    sharded = [v.name for v in views if v.sharded]
    if sharded:
        log.warning(
            "trainspect: %s and %d other parameters were sharded after recording began, and with "
            'include_workers="one" only rank 0 records its pieces: the full tensors cannot be assembled; shard '
            'the model before its first step, or pass include_workers="all"',
            sharded[0],
            len(sharded) - 1,
        )
    return bool(sharded)
