"""Where a NaN/Inf came from: the first module whose output became non-finite, and the first non-finite gradient.

Active while ExplodingTensor is among a PyTorch hook's live rules (``ExplodingTensor(origin=False)`` turns it off).

* **Forward origin.** A forward hook on every submodule of the registered models checks each floating-point output
  as its module ends (one ``sum`` per output: NaN and ±Inf propagate into it; a sum that is not finite is confirmed
  with ``isfinite``, so a finite output whose sum overflows is not blamed); nothing is held past that. Hooks fire as
  modules *end*, so the first non-finite output in a step belongs to the innermost module that made it: it is the
  **producer** if its inputs were finite; if its inputs were already non-finite, the code of the module that called
  it made the value (its parent in the module tree, or, for a registered model, the code outside the models:
  ``where="input"``). A loss
  that is not finite while every module output was finite was made by the loss computation (``where="loss"``).
  Modules that only passed the value on are listed after the producer (``propagated_by``), and the producer's
  inputs and outputs at that step are saved (collection ``nan_origin``).
* **Backward origin.** At ``optimizer.step()`` (and ``GradScaler.step()``), one ``torch._foreach_norm`` over the
  parameters' gradients, one host read; when a norm is not finite, the first non-finite gradient in autograd's
  order (the reverse of the order in which the modules ran) is named, with whether the step's loss was finite
  (an overflow in the backward pass) and whether GradScaler skipped the step.
* **Devices.** CPU values are read as they are made (a CPU read is not a synchronisation). On an accelerator, the
  flags of a step are stacked on the device and copied to the host in one non-blocking transfer, read when the
  copy has arrived (at a later step, or at close); the producer's tensors are then saved at its next call.
* **Compiled modules.** A ``torch.compile`` model is checked as one module (the compiled region is named, not the
  op inside it): hooks inside a compiled graph would break it.

After the first forward origin is found the forward hooks are removed (training goes on at full speed); the first
backward origin ends the gradient checks. Findings go to ``tensors/<worker>/nan_origins.jsonl``
(:mod:`trainspect.store.nan_origins`) and to the live rules.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from trainspect.hooks.torch_callbacks import Callback, own_hook_dicts
from trainspect.store.nan_origins import ORIGINS_FILE, origin_line

__all__ = ["NanOrigin", "nan_wanted"]

_log = logging.getLogger(__name__)
_WIDE = {torch.float16: torch.float32, torch.bfloat16: torch.float32}
MAX_PROPAGATORS = 8
"""Modules listed as having passed the value on, after its producer."""
FEW_GRADIENTS = 64
"""Up to this many gradients (on the CPU) are checked with a sum each; more with one ``_foreach_norm``."""
_MAX_PARTS = 16  # tensors looked at per output (a tuple's or dict's first ones), two levels deep


def nan_wanted(rules: list[Any]) -> bool:
    """Whether a hook with these live rules looks for NaN origins: an ExplodingTensor with ``origin`` on."""
    return any(type(r).__name__ == "ExplodingTensor" and r.params.get("origin", True) for r in rules)


def _parts(value: Any, path: str, depth: int = 0) -> Iterator[tuple[str, torch.Tensor]]:
    """The floating-point tensors in a module's output (or inputs), each with its path (``output_1``, ``output['x']``).

    A bare tensor is ``output_0``, as trainspect names module outputs.
    """
    if depth == 0 and isinstance(value, torch.Tensor):
        path = f"{path}_0"
    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            yield path, value
    elif depth < 2 and isinstance(value, (tuple, list)):
        for i, item in enumerate(value[:_MAX_PARTS]):
            yield from _parts(item, f"{path}_{i}", depth + 1)
    elif depth < 2 and isinstance(value, dict):
        for i, (key, item) in enumerate(value.items()):
            if i < _MAX_PARTS:
                yield from _parts(item, f"{path}[{key!r}]", depth + 1)


def _local(t: torch.Tensor) -> torch.Tensor:
    """The rank's own values of a DTensor (no collective), or the tensor itself."""
    to_local = getattr(t, "to_local", None)
    return to_local() if to_local is not None and type(t) is not torch.Tensor else t


def _flag(t: torch.Tensor) -> torch.Tensor:
    """A 0-d tensor on ``t``'s device that is finite when (and, but for an overflowing sum, only when) ``t`` is."""
    t = _local(t).detach()
    wide = _WIDE.get(t.dtype)
    return t.sum(dtype=wide) if wide is not None else t.sum()


def _finite(t: torch.Tensor) -> bool:
    """Whether a CPU tensor holds only finite values (its sum first: one cheap reduction in the common case)."""
    value = _flag(t).item()
    return value - value == 0.0 or bool(torch.isfinite(_local(t).detach()).all())


def _counts(t: torch.Tensor) -> dict[str, Any]:
    t = _local(t).detach()
    nan, inf = int(torch.isnan(t).sum()), int(torch.isinf(t).sum())
    return {"nan": nan, "inf": inf, "shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}


def _parent(name: str, names: set[str]) -> str | None:
    while "." in name:
        name = name.rsplit(".", 1)[0]
        if name in names:
            return name
    return None


class NanOrigin:
    """One hook's NaN/Inf origin finder (see the module docstring).

    Args:
        hook: the PyTorch hook (its collector, staging, registry and loss values are read).
        report: called with each finding (the live rules' list of origins).
        active: False makes every method a no-op (no ExplodingTensor among the live rules).
        immediate: read each flag as it is made (None: for CPU tensors); False keeps flags on their device until the
            step ends (the accelerator path, also usable on CPU).
    """

    def __init__(
        self, hook: Any, report: Callable[[dict[str, Any]], None], active: bool = True, immediate: bool | None = None
    ) -> None:
        self.hook, self.report, self.active, self.immediate = hook, report, active, immediate
        self.handles: list[Any] = []
        self.forward_found: dict[str, Any] | None = None
        self.backward_found: dict[str, Any] | None = None
        self.amp_skip_found = False
        self._modules: dict[str, nn.Module] = {}
        self._types: dict[str, str] = {}
        self._order: list[str] = []  # modules in the order they ended, this step
        self._finding: dict[str, Any] | None = None  # the open step's forward finding
        self._flags: list[tuple[str, str, bool, torch.Tensor]] = []  # (module, path, is_input, flag) on a device
        self._late: list[tuple[Any, list[tuple[str, str, bool]], torch.Tensor, Any]] = []  # copies on their way
        self._capture_next: str | None = None  # a module whose tensors are saved at its next call
        self._late_grads: list[tuple[Any, ...]] = []  # gradient norms on their way to the host
        self._all: set[str] = set()  # the hooked modules' names
        self._owner: dict[int, str] = {}  # parameter id -> the module that holds it
        self._sentinels: set[int] = set()  # per module, its smallest parameter: its gradient is checked every step

    # --- hooks ------------------------------------------------------------------------------------------
    def attach(self, registry: Any) -> NanOrigin:
        """Hook every submodule of a ``ModelRegistry``'s models (a compiled model: itself only).

        Returns self, whose ``remove()`` unhooks them.
        """
        self.detach()
        if not self.active or self.forward_found is not None:
            return self
        models, submodules = registry.models, registry.submodules
        inside: set[int] = set()
        for model in models:
            for module in model.modules():
                orig = getattr(module, "_orig_mod", None)
                if isinstance(orig, nn.Module):
                    inside.update(id(m) for m in orig.modules())
        chosen = [(name, sub) for name, sub in submodules if id(sub) not in inside]
        by_id = {id(sub): name for name, sub in submodules}
        for model in models:
            if id(model) in inside or getattr(model, "_orig_mod", None) is not None:
                inner = getattr(model, "_orig_mod", model)
                chosen.append((by_id.get(id(inner), type(inner).__name__), model))
        self._owner = {id(p): name for name, sub in submodules for p in sub.parameters(recurse=False)}
        trained = [[p for p in sub.parameters(recurse=False) if p.requires_grad] for _, sub in submodules]
        self._sentinels = {id(min(own, key=torch.numel)) for own in trained if own}
        for name, sub in chosen:
            own_hook_dicts(sub)
            self._modules[name] = sub
            self._types[name] = type(sub).__name__
            self.handles.append(sub.register_forward_hook(Callback(self._on_output, name)))
        self._all = {name for name, _ in chosen}
        return self

    def detach(self) -> None:
        """Remove the forward hooks (also ``remove()``, as a handle among the hook's)."""
        for handle in self.handles:
            handle.remove()
        self.handles.clear()

    remove = detach

    def _on_output(self, name: str, module: nn.Module, args: Any, output: Any) -> None:
        if self.hook.disabled:
            return
        try:
            self._order.append(name)
            if self._capture_next == name:
                self._capture_next = None
                self._save(name, args, output)
            if type(output) is torch.Tensor:
                parts: Any = (("output_0", output),) if output.is_floating_point() else ()
            else:
                parts = tuple(_parts(output, "output"))
            if not parts:
                return
            on_host = self.immediate if self.immediate is not None else parts[0][1].device.type == "cpu"
            if not on_host:
                self._defer(name, args, parts)
                return
            for path, t in parts:  # judged as the module ends: an in-place change later does not move the blame
                if not _finite(t):
                    self._bad_output(name, path, t, module, args, output)
                    break
        except Exception as exc:  # never the user's training: this part stops, with one warning
            self.detach()
            _log.warning("trainspect: NaN origin search stopped (%s: %s)", type(exc).__name__, exc)

    def _bad_output(self, name: str, path: str, t: torch.Tensor, module: nn.Module, args: Any, output: Any) -> None:
        finding = self._finding
        if finding is not None:  # passed on by a later module
            if len(finding["propagated_by"]) < MAX_PROPAGATORS and finding.get("module") != name:
                finding["propagated_by"].append(name)
            return
        inputs_finite = all(_finite(x) for _, x in _parts(args, "input"))
        self._finding = self._found(name, path, t, inputs_finite, module)
        producer = self._finding.get("module")
        if inputs_finite:
            self._save(name, args, output)
        elif producer is not None:  # the parent's own code made it: its tensors are saved as it ends
            self._capture_next = producer

    def _defer(self, name: str, args: Any, parts: Any) -> None:
        """Keep the flags of a module's outputs and inputs on their device (read when the step ends)."""
        flags = self._flags
        for path, t in parts:
            flags.append((name, path, False, _flag(t)))
        for path, x in _parts(args, "input"):
            flags.append((name, path, True, _flag(x)))

    def _found(self, name: str, path: str, t: torch.Tensor | None, inputs_finite: bool, module: Any) -> dict[str, Any]:
        """The finding for a non-finite output of ``name`` (its parent's code's when its inputs were not finite)."""
        doc: dict[str, Any] = {"pass": "forward", **self._at()}
        if inputs_finite:
            doc.update(module=name, module_type=self._types.get(name, "?"), output=path, inputs_finite=True)
            if module is not None:
                doc["parameters"] = [n for n, p in module.named_parameters(recurse=False) if not _finite_param(p)]
        else:
            parent = _parent(name, self._all)
            doc.update(module=parent, module_type=self._types.get(parent or "", "?"), inputs_finite=True)
            doc.update(output=f"in its own code (seen entering `{name}`)", where=None if parent else "input")
        doc.update(_counts(t) if t is not None else {})
        doc["propagated_by"] = [] if inputs_finite else [name]
        return doc

    def _save(self, name: str, args: Any, output: Any) -> None:
        """Save a module's inputs and outputs at the open step (collection ``nan_origin``)."""
        hook = self.hook
        saved = []
        for path, t in [*_parts(args, "input"), *_parts(output, "output")]:
            tname = f"nan_origin/{name}/{'input_0' if path == 'input' else path}"
            hook.save_tensor(tname, _local(t).detach(), ["nan_origin"])
            saved.append(tname)
        if self._finding is not None and self._finding.get("module") == name:
            self._finding["saved"] = saved

    def _at(self) -> dict[str, Any]:
        key = self.hook.collector.open_step()
        if key is None:
            return {"step": max(self.hook.collector.global_step, 0), "mode": self.hook.collector.mode.name}
        mode, mode_step, step, _ = key
        return {"step": step, "mode": mode.name, "mode_step": mode_step}

    # --- step boundaries --------------------------------------------------------------------------------
    def step_ended(self, losses: dict[str, Any]) -> None:
        """The open step ends (``losses``: its loss values, as ``StepLosses.values``): report its forward finding.

        A non-finite loss that no module made (every output was finite) was made by the loss computation.
        """
        if not self.active:
            return
        if self._flags:
            self._send_flags()
        self._read_late(wait=False)
        finding, self._finding = self._finding, None
        if finding is None and self.forward_found is None and not self._late:
            bad = [n for n, v in loss_floats(losses).items() if not math.isfinite(v)]
            if bad and self.handles:
                finding = {"pass": "forward", **self._at(), "module": None, "where": "loss", "loss": bad[0]}
        if finding is not None and self.forward_found is None:
            self.forward_found = finding
            self._emit(finding)
            self.detach()
        self._order = []

    def _send_flags(self) -> None:
        flags, self._flags = self._flags, []
        where = [(n, p, is_in) for n, p, is_in, _ in flags]
        host, event = _to_host(torch.stack([f.to(flags[0][3].device) for *_, f in flags]))
        self._late.append((self._at(), where, host, event))

    def _read_late(self, wait: bool) -> None:
        """Read the flags whose copies arrived: the first non-finite output of those steps is found."""
        while self._late:
            at, where, host, event = self._late[0]
            if event is not None and not event.query():
                if not wait:
                    return
                event.synchronize()
            self._late.pop(0)
            if self.forward_found is not None:
                continue
            values = host.tolist()
            bad_inputs = {n for (n, _, is_in), v in zip(where, values, strict=True) if is_in and v - v != 0.0}
            bad = [(n, p) for (n, p, is_in), v in zip(where, values, strict=True) if not is_in and v - v != 0.0]
            if not bad:
                continue
            name = bad[0][0]
            doc = self._found(name, bad[0][1], None, name not in bad_inputs, self._modules.get(name))
            doc.update(at)
            later = [n for n, _ in bad[1:] if n != doc.get("module") and n not in doc["propagated_by"]]
            doc["propagated_by"] = (doc["propagated_by"] + list(dict.fromkeys(later)))[:MAX_PROPAGATORS]
            self.forward_found = doc
            self._emit(doc)
            self._capture_next = doc.get("module")

    # --- backward ---------------------------------------------------------------------------------------
    def check_gradients(self, params: list[Any], losses: dict[str, Any], skipped: bool | None = None) -> None:
        """The step's gradients are final (``optimizer.step()`` / ``GradScaler.step()``): find a non-finite one.

        On the CPU, each module's smallest parameter's gradient (its bias, mostly) is summed: a NaN/Inf in the
        gradient flowing into a module reaches every one of its parameter gradients, and the bias's is the cheapest
        to read; only when one is not finite are all gradients looked at. (A weight gradient that overflows in its
        own product while the bias's stays finite is found at the next forward pass, as that module's parameter.)
        On an accelerator, one ``_foreach_norm`` over all gradients (a norm is NaN/Inf when its gradient holds one,
        or, rarely, when a finite gradient's norm overflows); the norms and the device losses travel to the host in
        one non-blocking copy, read at a later step.
        """
        if not self.active or self.hook.collector.open_step() is None:
            return
        if self._late_grads:
            self._read_late_grads(wait=False)
        if self.backward_found is not None and not (skipped and not self.amp_skip_found):
            return
        views = [v for v in params if v.param.grad is not None]
        if not views:
            return
        immediate = self.immediate if self.immediate is not None else views[0].param.grad.device.type == "cpu"
        sentinels = self._sentinels
        # on the CPU only the sentinels' gradients are read at a healthy step; all of them only when one is not finite
        few = [_local(v.param.grad).detach() for v in views if not immediate or id(v.param) in sentinels]
        if immediate and len(few) <= FEW_GRADIENTS:  # a sum each (CPU's _foreach_norm is slower for few)
            total: float | None = float(sum(_flag(g).item() for g in few))
        else:
            total = self._norms(few, losses, immediate, views, skipped)
        if total is None or total - total == 0.0:
            return
        grads = [_local(v.param.grad).detach() for v in views]
        bad = [i for i, g in enumerate(grads) if not bool(torch.isfinite(g).all())]
        if bad:
            loss_finite = all(math.isfinite(v) for v in loss_floats(losses).values())
            self._name_gradient(self._at(), views, bad, loss_finite, skipped, grads)

    def _norms(
        self, grads: list[torch.Tensor], losses: dict[str, Any], immediate: bool, views: list[Any], skipped: bool | None
    ) -> float | None:
        """The sum of the gradients' norms (immediate), or None: they travel to the host (with the device losses)."""
        try:
            norms = list(torch._foreach_norm(grads))
        except Exception:  # an old or exotic device: one norm each
            norms = [torch.linalg.vector_norm(g.float()) for g in grads]
        device = norms[0].device
        if not immediate:
            on_device = [v.reshape(()).float().to(device) for v in losses.values() if isinstance(v, torch.Tensor)]
            stacked = torch.stack([n.to(device) for n in norms] + on_device)
            host, event = _to_host(stacked)
            self._late_grads.append((self._at(), views, host, event, skipped, loss_floats(losses)))
            return None
        return float(torch.stack([n.to(device) for n in norms]).sum().item())

    def _read_late_grads(self, wait: bool) -> None:
        while self._late_grads:
            at, views, host, event, skipped, floats = self._late_grads[0]
            if event is not None and not event.query():
                if not wait:
                    return
                event.synchronize()
            self._late_grads.pop(0)
            if self.backward_found is not None and not (skipped and not self.amp_skip_found):
                continue
            values = host.tolist()
            bad = [i for i, v in enumerate(values[: len(views)]) if v - v != 0.0]
            if bad:
                loss_finite = all(v - v == 0.0 for v in [*values[len(views) :], *floats.values()])
                self._name_gradient(at, views, bad, loss_finite, skipped, None)

    def _name_gradient(
        self,
        at: dict[str, Any],
        views: list[Any],
        bad: list[int],
        loss_finite: bool,
        skipped: bool | None,
        grads: list[torch.Tensor] | None,
    ) -> None:
        """Report the first non-finite gradient in autograd's order: of the module that ran last in the forward."""
        ran = {name: i for i, name in enumerate(self._order)}  # a module's last end in the forward pass
        bad = sorted(bad, key=lambda i: (-ran.get(self._owner.get(id(views[i].param), ""), -1), -i))
        first = views[bad[0]]
        doc = {"pass": "backward", **at, "parameter": first.name, "module": self._owner.get(id(first.param))}
        doc.update(_counts(grads[bad[0]]) if grads is not None else {})
        doc.update(loss_finite=loss_finite, amp_skipped=bool(skipped))
        doc["also"] = [views[i].name for i in bad[1:6]]
        if skipped:
            self.amp_skip_found = True
        else:
            self.backward_found = doc
        self._emit(doc)

    def close(self) -> None:
        """Read the copies still on their way, then unhook."""
        if not self.active:
            return
        if self._flags:
            self._send_flags()
        self._read_late(wait=True)
        self._read_late_grads(wait=True)
        self.detach()

    def _emit(self, doc: dict[str, Any]) -> None:
        self.hook.collector.note_line(ORIGINS_FILE, origin_line(doc))
        self.report(doc)


def _to_host(t: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """A non-blocking copy to the host, and the CUDA event that says it arrived (None: it has)."""
    if t.device.type != "cuda":
        return t.to("cpu"), None
    host = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    host.copy_(t, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


def _finite_param(p: torch.Tensor) -> bool:
    t = _local(p).detach()
    return t.numel() == 0 or not t.is_floating_point() or bool(torch.isfinite(t).all())


def loss_floats(losses: dict[str, Any]) -> dict[str, float]:
    """The host values of a step's losses (``StepLosses.values``: host scalars, or tensors; device ones skipped)."""
    out = {}
    for name, value in losses.items():
        if isinstance(value, tuple):
            out[name] = float(value[0])
        elif isinstance(value, torch.Tensor) and value.device.type == "cpu" and value.numel() == 1:
            out[name] = float(value.reshape(()))
    return out
