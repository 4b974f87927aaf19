"""The Keras 3 hook: a callback translating ``fit``/``evaluate``/``predict`` events into calls on the collector."""

from __future__ import annotations

import logging
import os
from typing import Any

import keras
import numpy as np

from trainspect.hook_settings import signature
from trainspect.hooks._guard import guarded
from trainspect.hooks.hook_api import HookAPI
from trainspect.hooks.keras_model import ModelView
from trainspect.hooks.step_driver import StepDriver
from trainspect.modes import ModeKeys

__all__ = ["Hook"]

log = logging.getLogger(__name__)


class Hook(keras.callbacks.Callback, HookAPI):
    """Records losses, metrics, weights, gradients, layer inputs/outputs and optimizer variables of a Keras model.

    Pass it to ``fit``, ``evaluate`` and ``predict`` (``callbacks=[hook]``); close it (or use ``with``) when done.
    ``fit`` batches are TRAIN steps, validation and ``evaluate`` batches EVAL steps, ``predict`` batches PREDICT
    steps. A weight at step N is the value used in step N's forward pass, a gradient the one applied at step N.
    Its settings are the rows of :data:`trainspect.hook_settings.SETTINGS` that Keras takes (docs/configuration.md);
    gradients are captured without changing the model or optimizer (see ``keras_taps``).

    Example:
        >>> import tempfile, numpy as np, keras, trainspect as ts
        >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        >>> model.compile(optimizer="sgd", loss="mse")
        >>> out = tempfile.mkdtemp()
        >>> with ts.keras.Hook(out) as hook:
        ...     _ = model.fit(np.ones((4, 2)), np.ones((4, 1)), batch_size=2, verbose=0, callbacks=[hook])
        >>> ts.create_trial(out).tensor_names()
        ['loss']
    """

    _nothing_recorded_why = (
        "no fit, evaluate or predict batch ran with the hook among its callbacks (callbacks=[hook]); custom "
        "GradientTape training loops are not instrumented (docs/keras.md)"
    )

    def __init__(self, out_dir: str | os.PathLike[str], **settings: Any) -> None:
        super().__init__()
        self._setup("tensorflow", {"out_dir": out_dir, **settings}, always_saved=("metrics",))
        self._view: ModelView | None = None
        self._state = self.collector.state  # IDLE / OPEN / CLOSED (trainspect.hooks.step_state)
        self._driver = StepDriver(self.collector, self._extras, self)
        self._driver.driven.update(ModeKeys)  # Keras' callbacks drive the steps
        self._metrics_at_end = False  # the step that ends now reads the metrics' results (an epoch's last)
        self._window_set = False

    __init__.__signature__ = signature("tensorflow")  # type: ignore[attr-defined]  # one keyword per setting

    # --- lifecycle -----------------------------------------------------------------------------------------
    @guarded()
    def start(self) -> None:
        """Start writing (called by the first ``fit``/``evaluate``/``predict`` and by ``__enter__``)."""
        self._extras.attach(self.collector)
        self._close_at_exit_once()
        self.collector.start()  # the run opens at the first step

    def _start_worker_parts(self) -> None:
        if self._extras.framework_recorder is not None and not self._window_set:
            from trainspect.hooks.keras_profiling import TFProfilingWindow

            self._window_set = True
            self._extras.set_window(
                TFProfilingWindow(self.out_dir, self.collector.worker, self._extras.profiler_config)
            )

    def _close_steps(self) -> list[Any]:
        return [self._end_step, self._detach]

    def _detach(self) -> None:
        view, self._view = self._view, None
        if view is not None:
            view.remove()

    def _attach(self, kind: str | None = None) -> None:
        self.start()
        model = self.model
        if self._view is None or self._view.model is not model or (kind and self._view.taps.stale(kind)):
            self._detach()
            self._view = ModelView(model, self.collector, self._extras.framework_recorder)

    # --- steps ---------------------------------------------------------------------------------------------
    # A step ends when the next one begins (or at the end of the epoch, evaluation or prediction): overriding
    # ``on_*_batch_end`` would stop Keras from dispatching batch-end callbacks on its background thread. The
    # boundaries are trainspect.hooks.step_driver's, shared with the PyTorch hook; these are Keras' parts of them.
    def _begin_step(self, mode: ModeKeys) -> None:
        self._driver.begin(mode)

    def _end_step(self, metrics: bool = False) -> None:
        self._metrics_at_end = metrics
        self._driver.end()

    idle = False  # the taps are armed at every step (StepParts.idle)

    def step_beginning(self) -> None:
        """The model's view (its taps) is attached before the first step."""
        if self._view is None:
            self._attach()

    def step_began(self, saving: bool, mode: ModeKeys) -> None:
        """Add what was saved before the first step; read the step's weights and arm the taps."""
        if self._pending:
            pending, self._pending = self._pending, []
            for name, value, colls in pending:
                self._add_forced(name, value, colls)
        assert self._view is not None
        self._view.begin_step(saving, mode)

    def step_ending(self, final: bool) -> tuple[None, bool]:
        """Read the step's loss, gradients and layer tensors from the taps (before the next step runs)."""
        metrics, self._metrics_at_end = self._metrics_at_end, False
        if self._view is not None and not self.disabled:
            self._view.end_step(self._state.saving, metrics, defer=self._extras.quiet)
        return None, False

    def no_step_to_end(self, final: bool) -> None:
        """Nothing is left between Keras steps."""
        self._metrics_at_end = False

    def accumulates(self) -> bool:
        """Keras' callbacks drive every step: the driver never infers one from a forward pass (StepParts)."""
        return False

    nested = accumulates

    # --- keras callbacks -----------------------------------------------------------------------------------
    @guarded()
    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._attach("train")

    @guarded()
    def on_predict_begin(self, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._attach()

    @guarded()
    def on_test_begin(self, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._end_step(metrics=self.collector.mode is ModeKeys.TRAIN)  # validation follows an epoch's last batch
        self._attach("test")

    @guarded()
    def on_train_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._begin_step(ModeKeys.TRAIN)

    @guarded()
    def on_test_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._begin_step(ModeKeys.EVAL)

    @guarded()
    def on_predict_batch_begin(self, batch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._begin_step(ModeKeys.PREDICT)

    @guarded()
    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._end_step(metrics=self.collector.mode is ModeKeys.TRAIN)

    @guarded()
    def on_test_end(self, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._end_step(metrics=True)

    @guarded()
    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:  # noqa: D102
        self._end_step()

    on_predict_end = on_train_end

    # --- saving between Keras' events (HookAPI.save_tensor, save_scalar) -------------------------------------
    def _as_value(self, value: Any) -> Any:
        return np.asarray(value) if not hasattr(value, "shape") else value

    def _add_forced(self, name: str, value: Any, colls: tuple[str, ...]) -> None:
        from trainspect.hooks.keras_tensors import to_host

        plan = self.collector.planner.forced_plan(name, colls)
        raw, reds, shape = to_host(value, plan)
        self.collector.add(name, plan, raw, reds, shape)
