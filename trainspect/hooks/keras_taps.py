"""In-graph taps on a Keras 3 model (TensorFlow backend): gradients, the batch loss and layer inputs/outputs.

The user changes neither the model nor the optimizer. The taps wrap methods of the *instances* (never the classes):

* ``optimizer.apply`` (of the inner optimizer under mixed precision, so gradients are unscaled) copies each gradient
  into a shadow variable on the gradient's device;
* ``model.compute_loss`` marks the batch loss (with regularization losses); ``train_step``/``test_step`` return it
  as one more output, which the compiled function's Python wrapper takes out of the logs before Keras sees them.
  That costs no extra op, where reading a shadow variable from Python after each step costs an eager op (and
  ``tf.numpy_function`` a call into Python from the step). Only when the loss is computed in a nested graph (a
  ``tf.cond`` branch of a custom step) or the step returns something other than a dict does it go through a scalar
  shadow variable;
* each selected layer's ``call`` hands its inputs/outputs to Python with ``tf.numpy_function``. XLA cannot run
  Python, so under ``jit_compile=True`` layer inputs/outputs are not tapped;
* with ``timing``, ``train_step``/``test_step`` stamp ``tf.timestamp()`` into :attr:`Taps.ready` when the batch has
  arrived, and the step's computation waits for the stamp (not under XLA either). Forward/backward/optimizer are not
  stamped: TensorFlow runs a traced step's ops out of program order.

Keras traces two variants of its train and test functions: one that captures gradients and layer tensors, run at
the steps that save them, and one that only copies the loss, run at every other step (:meth:`Taps.set_capture`
swaps ``model.train_function``/``test_function``, which ``fit``/``evaluate`` look up at each batch). ``predict``
looks its step up at trace time, so there the layer taps run under a ``tf.cond`` on a flag variable.
:meth:`Taps.remove` restores every method and makes Keras trace plain functions again.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np
import tensorflow as tf

from trainspect.hooks.keras_tensors import read

__all__ = ["Taps"]

_MISSING = object()
_LOSS_KEY = "__trainspect_batch_loss__"


def _flat_tensors(value: Any) -> list[Any]:
    return [t for t in tf.nest.flatten(value) if isinstance(t, tf.Tensor)]


class Taps:
    """The taps installed on one model.

    Args:
        model: a built Keras model.
        grads: tap gradients.
        layers: ``{path: layer}`` of layers whose inputs/outputs are tapped.
        timing: stamp when each step's batch arrived into :attr:`ready`.
    """

    def __init__(self, model: Any, grads: bool, layers: dict[str, Any], timing: bool = False) -> None:
        self.model = model
        self._io_flag = tf.Variable(False, trainable=False, name="trainspect_io")
        self._capture: bool | None = None  # while tracing: the variant (None: predict, decided by _io_flag)
        self._capturing = {"train": False, "test": False, "predict": False}
        self._loss_shadow = tf.Variable(np.float32("nan"), trainable=False, name="trainspect_loss")
        self._shadowed = False  # whether a traced step writes its loss into _loss_shadow
        self._traced_loss: Any = None  # while tracing: the loss compute_loss returned
        self._step_graph: Any = None  # while tracing: the graph of the step
        self._loss: Any = None  # the last step's loss, taken out of its logs
        self.ready = tf.Variable(np.float64(0), trainable=False, name="trainspect_ready") if timing else None
        self.gradients: dict[str, Any] = {}
        self._want_grads = grads
        self.io: list[tuple[str, str, int, np.ndarray]] = []
        self._lock = threading.Lock()
        self._restore: list[tuple[Any, str, Any]] = []
        self._variants: dict[str, tuple[Any, Any]] = {}
        self.traced = {"apply": False, "compute_loss": False}
        opt = getattr(model, "optimizer", None)
        opt = getattr(opt, "inner_optimizer", opt)
        if grads and opt is not None:
            self._wrap(opt, "apply", self._apply_wrapper)
        self._wrap(model, "compute_loss", self._loss_wrapper)
        for path, layer in layers.items():
            self._wrap(layer, "call", functools.partial(self._io_wrapper, path))
        for kind in ("train", "test"):
            self._build(kind)

    def _wrap(self, obj: Any, attr: str, make: Callable[[Any], Any]) -> None:
        original = getattr(obj, attr)
        wrapper = functools.wraps(original)(make(original))
        self._restore.append((obj, attr, vars(obj).get(attr, _MISSING)))
        object.__setattr__(obj, attr, wrapper)

    def _build(self, kind: str) -> None:
        """Make Keras build the capturing and the plain variant of its ``<kind>_function``."""
        step = f"{kind}_step"
        original = getattr(self.model, step)
        self._restore.append((self.model, step, vars(self.model).get(step, _MISSING)))
        functions = []
        for capture in (True, False):
            wrapper = functools.wraps(original)(self._step_wrapper(capture, original))
            object.__setattr__(self.model, step, wrapper)
            getattr(self.model, f"make_{kind}_function")(force=True)
            functions.append(self._take_loss_output(getattr(self.model, f"{kind}_function")))
        self._variants[kind] = (functions[1], functions[0])
        setattr(self.model, f"{kind}_function", functions[1])

    def remove(self) -> None:
        """Restore every wrapped method and make Keras rebuild its compiled functions."""
        for obj, attr, before in reversed(self._restore):
            if before is _MISSING:
                vars(obj).pop(attr, None)
            else:
                object.__setattr__(obj, attr, before)
        self._restore.clear()
        for kind in ("train", "test", "predict"):
            setattr(self.model, f"{kind}_function", None)

    def set_capture(self, kind: str, capture: bool) -> None:
        """Capture gradients and layer tensors at the next ``kind`` ("train", "test", "predict") step, or not."""
        if capture == self._capturing[kind]:
            return
        self._capturing[kind] = capture
        if kind == "predict":
            self._io_flag.assign(capture)
        else:
            setattr(self.model, f"{kind}_function", self._variants[kind][capture])

    def stale(self, kind: str) -> bool:
        """Whether Keras replaced its ``<kind>_function`` since (``model.compile`` again): the taps must be redone."""
        current = getattr(self.model, f"{kind}_function", None)
        return current is not None and all(current is not f for f in self._variants.get(kind, ()))

    @property
    def capturing(self) -> dict[str, bool]:
        """Whether the next step of each kind captures gradients and layer tensors."""
        return dict(self._capturing)

    def take_loss(self) -> Any:
        """Return and forget the batch loss (a float32 scalar tensor or array) of the step run since the last call.

        None if that step computed none.
        """
        loss, self._loss = self._loss, None
        if loss is not None:
            return loss
        return read(self._loss_shadow) if self._shadowed else None

    def take_io(self) -> list[tuple[str, str, int, np.ndarray]]:
        """Return and forget the layer inputs/outputs tapped since the last call."""
        with self._lock:
            out, self.io = self.io, []
        return out

    # --- wrappers (run while TensorFlow traces the step, or eagerly under run_eagerly) -----------------------
    def _apply_wrapper(self, original: Any) -> Any:
        def apply(grads: Any, trainable_variables: Any = None) -> Any:
            self.traced["apply"] = True
            variables = self.model.trainable_variables if trainable_variables is None else trainable_variables
            if self._capture and self._want_grads:
                for g, v in zip(grads, variables, strict=False):
                    if g is not None:
                        shadow = self._shadow(v)
                        shadow.assign(tf.cast(tf.convert_to_tensor(g), shadow.dtype))
            return original(grads, trainable_variables)

        return apply

    def _shadow(self, var: Any) -> Any:
        """The gradient shadow of a variable, created outside the traced function on first use."""
        shadow = self.gradients.get(str(var.path))
        if shadow is None:
            with tf.init_scope():
                shadow = tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False)
            self.gradients[str(var.path)] = shadow
        return shadow

    def _loss_wrapper(self, original: Any) -> Any:
        def compute_loss(*args: Any, **kwargs: Any) -> Any:
            loss = original(*args, **kwargs)
            self.traced["compute_loss"] = True
            if isinstance(loss, tf.Tensor):
                if tf.executing_eagerly() or loss.graph is self._step_graph:
                    self._traced_loss = loss
                else:  # a nested graph: its tensors cannot be outputs of the step
                    self._shadowed = True
                    self._loss_shadow.assign(tf.cast(loss, tf.float32))
            return loss

        return compute_loss

    def _step_wrapper(self, capture: bool, original: Any) -> Any:
        def step(data: Any) -> Any:
            self._capture, self._traced_loss = capture, None
            self._step_graph = None if tf.executing_eagerly() else tf.compat.v1.get_default_graph()
            try:
                logs = original(self._stamp(data))
                loss = self._traced_loss
            finally:
                self._capture = self._traced_loss = self._step_graph = None
            if loss is None:
                return logs
            loss = tf.cast(loss, tf.float32)
            if isinstance(logs, dict) and _LOSS_KEY not in logs:
                return {**logs, _LOSS_KEY: loss}
            self._shadowed = True
            self._loss_shadow.assign(loss)
            return logs

        return step

    def _take_loss_output(self, function: Any) -> Any:
        """Wrap a compiled ``<kind>_function``: keep the step's loss output, return the logs without it."""

        def run(*args: Any, **kwargs: Any) -> Any:
            logs = function(*args, **kwargs)
            if isinstance(logs, dict) and _LOSS_KEY in logs:
                logs = dict(logs)
                self._loss = logs.pop(_LOSS_KEY)
            return logs

        return run

    def _stamp(self, value: Any) -> Any:
        """Stamp the time once ``value`` is computed; return ``value`` made to wait for the stamp."""
        if self.ready is None:
            return value
        with tf.control_dependencies(_flat_tensors(value)):
            stamp = self.ready.assign(tf.timestamp())
        with tf.control_dependencies([stamp]):
            return tf.nest.map_structure(lambda t: tf.identity(t) if isinstance(t, tf.Tensor) else t, value)

    def _io_wrapper(self, path: str, original: Any) -> Any:
        def call(*args: Any, **kwargs: Any) -> Any:
            out = original(*args, **kwargs)
            tensors = [("input", i, t) for i, t in enumerate(_flat_tensors(args))]
            tensors += [("output", i, t) for i, t in enumerate(_flat_tensors(out))]
            if tensors and self._capture is not False:
                store = functools.partial(self._store, path, [(k, i) for k, i, _ in tensors])

                def tap() -> Any:
                    return tf.numpy_function(store, [t for _, _, t in tensors], Tout=tf.bool, stateful=True)

                if self._capture:
                    tap()
                else:
                    tf.cond(self._io_flag, tap, lambda: tf.constant(False))
            return out

        return call

    def _store(self, path: str, keys: Iterable[tuple[str, int]], *arrays: np.ndarray) -> np.bool_:
        with self._lock:
            self.io.extend((path, kind, i, np.array(a)) for (kind, i), a in zip(keys, arrays, strict=True))
        return np.bool_(True)
