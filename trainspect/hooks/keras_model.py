"""One Keras model as the collector sees it: tensor names, taps, and what to read at each step boundary."""

from __future__ import annotations

import logging
import time
from typing import Any

import numpy as np

from trainspect.hooks.collector import Collector
from trainspect.hooks.keras_taps import Taps
from trainspect.hooks.keras_tensors import layer_path, read, to_host, type_names, variable_name
from trainspect.modes import ModeKeys
from trainspect.step import collection_atoms

__all__ = ["ModelView", "LOSS"]

log = logging.getLogger(__name__)
LOSS = "loss"
"""The batch loss (what ``compute_loss`` returns, regularization included), in collection ``losses``."""
_FLOAT32 = np.dtype(np.float32)


def _layers(layer: Any) -> list[Any]:
    out = []
    for sub in getattr(layer, "layers", None) or []:
        out.append(sub)
        out.extend(_layers(sub))
    return out


class ModelView:
    """Names and taps of one model, read at step boundaries into the collector.

    Args:
        model: the Keras model (built: ``fit``/``evaluate``/``predict`` build it before calling callbacks).
        collector: the hook's collector.
        recorder: the framework-metrics recorder when profiling (it gets each step's input wait).
    """

    def __init__(self, model: Any, collector: Collector, recorder: Any = None) -> None:
        self.model, self.collector, self.recorder = model, collector, recorder
        collector.collections.get("losses").add_tensor_name(LOSS)
        self.params: list[tuple[str, Any]] = []
        self.grad_names: dict[str, str] = {}
        self._name_variables()
        self.layers = self._layers_wanted()
        self.io_collections = frozenset().union(*(ins | outs for ins, outs in self.layers.values()))
        wants_grads = any(self._grad_wanted(n) for n in self.grad_names.values() or ["gradient/"])
        layers = {path: layer for path, (layer, _) in self._paths().items() if path in self.layers}
        xla = getattr(model, "jit_compile", False) is True
        if layers and xla:
            log.warning(
                "trainspect: model %s is compiled with jit_compile=True; XLA cannot call back into Python, "
                "so layer inputs/outputs are not captured (weights, gradients, losses and metrics are)",
                model.name,
            )
            layers = {}
        if int(getattr(model, "steps_per_execution", 1) or 1) > 1:
            log.warning(
                "trainspect: steps_per_execution=%s: each trainspect step spans that many batches; "
                "losses, gradients and layer tensors are those of the last batch",
                model.steps_per_execution,
            )
        self.taps = Taps(model, wants_grads, layers, timing=recorder is not None and not xla)
        self._step_wall = 0.0
        self._io_tapped = bool(layers)
        self._warned_grads = False
        self._now: tuple[list[tuple[str, Any]], list[str], bool, bool] = ([], [], False, False)

    def _name_variables(self) -> None:
        """Name the trainable variables (a subclassed model has them only after its first step traced)."""
        self.params = [(variable_name(self.model, v), v) for v in self.model.trainable_variables]
        for name, _ in self.params:
            self.collector.collections.get("biases" if name.endswith(".bias") else "weights").add_tensor_name(name)
        self.grad_names = {str(v.path): f"gradient/{name}" for name, v in self.params}
        self._generation = -1  # the planner generation ``_now`` was decided for: none yet

    def _paths(self) -> dict[str, tuple[Any, tuple[str, tuple[str, ...]]]]:
        return {layer_path(self.model, layer): (layer, type_names(layer)) for layer in _layers(self.model)}

    def _layers_wanted(self) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
        wanted = {}
        for path, (layer, (cls, aliases)) in self._paths().items():
            ins, outs = self.collector.planner.module_collections(path, cls, layer)
            for alias in aliases:
                outs = outs | self.collector.planner.module_collections(path, alias, layer)[1]
            if ins or outs:
                wanted[path] = (ins, outs)
        return wanted

    def _grad_wanted(self, name: str) -> bool:
        return bool(self.collector.planner.membership(name))

    def remove(self) -> None:
        """Remove the taps."""
        self.taps.remove()

    # --- step boundaries -----------------------------------------------------------------------------------
    def begin_step(self, saving: bool, mode: ModeKeys) -> None:
        """Read the weights used by this step's forward pass and arm the taps."""
        grads = io = False
        self._step_wall = time.time()
        if not self.params:
            self._name_variables()
        if saving:
            params, optimizer, grads, io = self._decisions()
            for name, var in params:
                self._add(name, var.value)
            if mode is ModeKeys.TRAIN:
                self._optimizer_variables(optimizer)
            else:
                grads = False
        kind = {ModeKeys.EVAL: "test", ModeKeys.PREDICT: "predict"}.get(mode, "train")
        self.taps.set_capture(kind, grads or (io and self._io_tapped))

    def _decisions(self) -> tuple[list[tuple[str, Any]], list[str], bool, bool]:
        """What the open step saves: (variables, optimizer variables, gradients?, layer tensors?).

        Decided once per set of saving collections (the planner's generation), not at every step.
        """
        planner = self.collector.planner
        if self._generation != planner.generation:
            self._generation = planner.generation
            self._now = (
                [(name, var) for name, var in self.params if self._plan(name)],
                [key for key in ("learning_rate", "iterations", "momentum") if self._plan(f"optimizer/{key}")],
                any(self._plan(n) for n in self.grad_names.values()),
                any(planner.is_active(c) for c in self.io_collections),
            )
        return self._now

    def end_step(self, saving: bool, metrics: bool, defer: bool = False) -> None:
        """Read the batch loss, the tapped gradients and layer tensors, and with ``metrics`` the metrics' results.

        Called before the next step runs, so the taps still hold this step's values. With ``defer`` (nothing reads
        the step's record on the training thread) a loss saved raw goes to the collector as a Python float.
        """
        mode = self.collector.mode
        loss = self.taps.take_loss()
        if loss is not None and mode is not ModeKeys.PREDICT:
            plan = self.collector.plan(LOSS)
            if defer and plan.raw and not plan.reductions:
                self.collector.add_scalars([(LOSS, float(loss), _FLOAT32, collection_atoms(plan.collections))])
            else:
                self._add(LOSS, np.asarray(loss))
        if metrics:
            self._metrics()
        if saving and self.collector.mode is ModeKeys.TRAIN and self.taps.capturing["train"]:
            self._gradients()
        for path, kind, i, value in self.taps.take_io() if saving else ():
            ins, outs = self.layers.get(path, (frozenset(), frozenset()))
            extra = ins if kind == "input" else outs
            if extra:
                self._add(f"{path}_{kind}_{i}", value, extra)
        if self.taps.ready is not None:
            self._input_wait()

    def _metrics(self) -> None:
        """Record the compiled metrics' results (Keras' values over the epoch or evaluation so far)."""
        if not self.collector.planner.is_active("metrics"):
            return
        coll = self.collector.collections.get("metrics")
        for key, value in self.model.get_metrics_result().items():
            if key != LOSS and np.ndim(value) == 0:
                if key not in coll.tensor_names:
                    coll.add_tensor_name(key)
                self._add(key, np.asarray(value, dtype=np.float64))

    def _gradients(self) -> None:
        if not self.taps.traced["apply"]:
            if not self._warned_grads:
                self._warned_grads = True
                log.warning(
                    "trainspect: gradients were asked for but model %s never called optimizer.apply/"
                    "apply_gradients in its train step; gradients are not captured",
                    self.model.name,
                )
            return
        for path, name in self.grad_names.items():
            shadow = self.taps.gradients.get(path)
            if shadow is not None:
                self._add(name, shadow)

    def _input_wait(self) -> None:
        """Record the step's wait for its batch: from the batch's start until the compiled step had its data."""
        assert self.taps.ready is not None
        ready = float(read(self.taps.ready))
        if ready >= self._step_wall:  # else not stamped in this step
            self.recorder.record_span("dataloader", self._step_wall, ready, self.collector.global_step)

    def _optimizer_variables(self, keys: list[str]) -> None:
        opt = getattr(self.model, "optimizer", None) if keys else None
        if opt is None:
            return
        for key in keys:
            value = getattr(opt, key, None)
            if value is not None and not isinstance(value, bool):
                self._add(f"optimizer/{key}", np.asarray(value, dtype=np.float64))

    def _plan(self, name: str) -> bool:
        plan = self.collector.plan(name)
        return bool(plan.raw or plan.reductions)

    def _add(self, name: str, value: Any, extra: frozenset[str] = frozenset()) -> None:
        plan = self.collector.plan(name, extra)
        if plan.raw or plan.reductions:
            raw, reds, shape = to_host(value, plan)
            self.collector.add(name, plan, raw, reds, shape)
