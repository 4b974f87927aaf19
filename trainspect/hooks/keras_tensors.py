"""Keras 3 tensors to the collector: trainspect names of variables and layers, reductions on the device, host copies."""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from trainspect.hooks.save_plan import TensorPlan
from trainspect.reductions import device_table
from trainspect.step import ReductionKey

__all__ = ["variable_name", "layer_path", "type_names", "to_host", "read"]

_ACTIVATIONS = {
    "relu": "ReLU",
    "sigmoid": "Sigmoid",
    "tanh": "Tanh",
    "softmax": "Softmax",
    "elu": "ELU",
    "gelu": "GELU",
    "leaky_relu": "LeakyReLU",
    "selu": "SELU",
    "swish": "SiLU",
    "silu": "SiLU",
}
"""Keras activation functions -> the PyTorch module names rules ask for (``Requirement.module_types``)."""

_OPS: dict[str, Any] = device_table(
    {  # the device implementations of trainspect.reductions.NAMES
        "min": tf.reduce_min,
        "max": tf.reduce_max,
        "mean": tf.reduce_mean,
        "std": tf.math.reduce_std,
        "variance": tf.math.reduce_variance,
        "sum": tf.reduce_sum,
        "prod": tf.reduce_prod,
        "l1": lambda x: tf.reduce_sum(tf.abs(x)),
        "l2": lambda x: tf.norm(tf.reshape(x, [-1]), 2),
    }
)


def _relative(path: str, model_name: str) -> str:
    head = model_name + "/"
    return (path[len(head) :] if path.startswith(head) else path).replace("/", ".")


def variable_name(model: Any, variable: Any) -> str:
    """Return a variable's tensor name: ``<ModelClass>_<layer path>.<variable>`` (``Sequential_dense.kernel``)."""
    return f"{type(model).__name__}_{_relative(str(variable.path), str(model.name))}"


def layer_path(model: Any, layer: Any) -> str:
    """Return a layer's path inside the model (``dense``, ``block.conv``), the prefix of ``<path>_output_0``."""
    return _relative(str(getattr(layer, "path", None) or layer.name), str(model.name))


def type_names(layer: Any) -> tuple[str, tuple[str, ...]]:
    """Return the layer's module type and the types its *outputs* also count as.

    A standalone ``Activation("relu")`` or ``ReLU`` layer is a ``ReLU`` module (inputs and outputs); a layer with a
    fused activation (``Dense(activation="relu")``) is a ``Dense`` whose outputs are also ``ReLU`` outputs.
    """
    cls = type(layer).__name__
    act = getattr(layer, "activation", None)
    alias = _ACTIVATIONS.get(getattr(act, "__name__", ""), "") if callable(act) else ""
    if cls == "Activation" and alias:
        return alias, ()
    return cls, (alias,) if alias else ()


def read(variable: Any) -> np.ndarray:
    """Return a ``tf.Variable``'s value with one read op (several times cheaper than ``variable.numpy()``)."""
    return np.asarray(tf.raw_ops.ReadVariableOp(resource=variable.handle, dtype=variable.dtype).numpy())


def to_host(value: Any, plan: TensorPlan) -> tuple[np.ndarray | None, dict[ReductionKey, float], tuple[int, ...]]:
    """Compute the plan's reductions where the tensor lives and copy the raw value to the host if asked."""
    if isinstance(value, np.ndarray):
        if not plan.reductions:
            return value, {}, value.shape
        value = tf.convert_to_tensor(value)
    if isinstance(value, tf.Variable) and not plan.reductions:
        raw = read(value)
        return (raw.astype(np.float32) if raw.dtype.name == "bfloat16" else raw), {}, raw.shape
    reds: dict[ReductionKey, float] = {}
    if plan.reductions and (value.shape.num_elements() or 0) > 0:
        x = value if value.dtype.is_floating else tf.cast(value, tf.float64)
        x = tf.cast(x, tf.float32) if x.dtype == tf.bfloat16 else x
        stacked = tf.stack([tf.cast(_OPS[n](tf.abs(x) if a else x), tf.float64) for n, a in plan.reductions])
        reds = dict(zip(plan.reductions, stacked.numpy().tolist(), strict=True))
    host: np.ndarray | None = None
    if plan.raw:
        host = np.asarray(value.numpy())
        if host.dtype.name == "bfloat16":
            host = host.astype(np.float32)
    return host, reds, tuple(int(d) for d in value.shape)
