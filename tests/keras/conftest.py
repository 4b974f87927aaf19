"""Keras tests: TensorFlow starts slowly, so each module trains its runs once (module-scoped fixtures)."""

from __future__ import annotations

import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402  (needs the tensorflow extra: pip install trainspect[tensorflow])

tf.config.threading.set_inter_op_parallelism_threads(1)
tf.config.threading.set_intra_op_parallelism_threads(1)
