"""What a hook runs beside tensor capture: live rules, the profiler, MLflow logging and the closing report.

Each part is optional and framework-neutral; a part that fails is disabled with one warning and the others go on.
"""

from __future__ import annotations

import logging
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from trainspect import env
from trainspect.config import parse_bool, parse_int, parse_number
from trainspect.exceptions import ConfigError, TrainingStopped
from trainspect.hooks.collector import Collector
from trainspect.step import StepRecord
from trainspect.store.manifest import all_workers_ended

__all__ = ["HookExtras"]

log = logging.getLogger(__name__)


def _resolve_rules(rules: Any) -> list[Any]:
    if rules is None:
        return []
    if isinstance(rules, str):
        from trainspect.rules import default_rules

        if rules.strip().lower() != "default":
            raise ConfigError(f"rules={rules!r}: expected a list of rules or 'default'")
        return list(default_rules())
    from trainspect.hook_config import check_rule_entries

    rules = check_rule_entries(rules, "rules")
    from trainspect.rules.registry import resolve_rules

    return resolve_rules(rules)


_MLFLOW_KEYS = {
    "run": "run",
    "runid": "run",
    "trackinguri": "tracking_uri",
    "intervals": "interval_s",
    "logeverynsteps": "log_every_n_steps",
    "priceperhour": "price_per_hour",
    "logrundir": "log_run_dir",
    "enabled": "enabled",
    "experiment": "experiment",
    "waits": "wait_s",
}
_TRUE_WORDS, _FALSE_WORDS = ("1", "true", "yes", "on"), ("0", "false", "no", "off")
_RUN_ALLOWED = "None, true/false, a run id, an MLflow Run or a dict of options"


def _text(key: str, value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"{key}={value!r}: expected a non-empty string")
    return value.strip()


def _run_value(key: str, value: Any) -> Any:
    """``mlflow_run`` (or its ``run`` option) other than a dict: None, a bool, a run id or a Run object."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in _TRUE_WORDS + _FALSE_WORDS:
        return value.strip().lower() in _TRUE_WORDS  # from a JSON config
    if isinstance(value, str) and value.strip():
        return value.strip()
    if getattr(getattr(value, "info", None), "run_id", None):
        return value  # an MLflow Run or ActiveRun
    raise ConfigError(f"{key}={value!r}: expected {_RUN_ALLOWED}")


_MLFLOW_CHECKS: dict[str, Any] = {
    "run": _run_value,
    "tracking_uri": _text,
    "experiment": _text,
    "interval_s": lambda k, v: parse_number(k, v, 0.0, above=True),
    "wait_s": lambda k, v: parse_number(k, v, 0.0),
    "price_per_hour": lambda k, v: parse_number(k, v, 0.0),
    "log_every_n_steps": lambda k, v: parse_int(k, v, minimum=1),
    "log_run_dir": parse_bool,
    "enabled": parse_bool,
}


def mlflow_options(value: Any) -> tuple[Any, dict[str, Any]]:
    """Validate ``mlflow_run`` and split it into the run and the session's options.

    Raises:
        ConfigError: one line naming the option (``MLflow.price_per_hour='cheap': expected a finite number >= 0``).
    """
    if not isinstance(value, dict):
        return _run_value("mlflow_run", value), {}
    opts: dict[str, Any] = {}
    for key, raw in value.items():
        name = _MLFLOW_KEYS.get(str(key).replace("_", "").lower())
        if name is None:
            raise ConfigError(f"MLflow.{key}: unknown option; allowed: {', '.join(_MLFLOW_CHECKS)}")
        opts[name] = _MLFLOW_CHECKS[name](f"MLflow.{name}", raw)
    run = opts.pop("run", None)
    if opts.pop("enabled", True) is False:
        run = False
    return run, opts


class HookExtras:
    """Live rules, profiler and MLflow parts of one hook, driven by the framework adapter.

    Args:
        rules: rules to evaluate live (or ``"default"``).
        profiler_config: a ``ProfilerConfig`` turning on system and framework profiling.
        mlflow_run: an MLflow run (or run id) to log to; ``None`` logs to the active run if any; ``True`` the active
            run or a new one; ``False`` never. A dict gives options: ``{"run": ..., "log_run_dir": bool,
            "price_per_hour": float, "tracking_uri": str, "interval_s": float}``.
    """

    def __init__(self, rules: Any = None, profiler_config: Any = None, mlflow_run: Any = None) -> None:
        self.rules = _resolve_rules(rules)
        if profiler_config is not None and not hasattr(profiler_config, "system_monitor_interval_millis"):
            raise ConfigError(f"profiler_config={profiler_config!r}: expected a ProfilerConfig or None")
        self.profiler_config = profiler_config
        self.mlflow_run = mlflow_run
        self._mlflow_checked = mlflow_options(mlflow_run)  # a bad option fails here, not when the run opens
        self._live: Any = None
        self._attached = False
        self._framework: Any = None
        self._live_profiler: Any = None
        self._monitor: Any = None
        self._window: Any = None
        self._mlflow: Any = None
        self._spans: dict[str, float] = {}
        self._started = False
        self._stopped = False
        self.quiet = True  # no part is running: the per-step callbacks below have nothing to do

    def _update_quiet(self) -> None:
        self.quiet = all(p is None for p in (self._live, self._framework, self._window, self._mlflow))

    def attach(self, collector: Collector) -> None:
        """Start what needs no worker name, when the hook starts: the system monitor, framework timing in memory.

        The rest starts in :meth:`start`, when the run opens (the worker is known then; see ``Collector.open``).
        """
        if self._attached or collector.dry_run:
            return
        self._attached = True
        if self.profiler_config is not None:
            self._part("the profiler", self._attach_profiler, collector)
        self._update_quiet()

    def start(self, collector: Collector) -> None:
        """Start the parts once the run is open (idempotent)."""
        self.attach(collector)
        if self._started or collector.dry_run:
            return
        self._started = True
        if self._framework is not None:
            self._part("the profiler", self._start_profiler, collector)
        if self.rules:
            self._part("live rules", self._start_rules, collector)
        if self._mlflow_wanted():
            self._part("MLflow logging", self._start_mlflow, collector)
        self._update_quiet()

    @staticmethod
    def _part(what: str, fn: Any, collector: Collector) -> None:
        try:
            fn(collector)
        except Exception as exc:
            if env.TRAINSPECT_TESTING.get():
                raise
            log.warning(
                "trainspect: %s could not start (%s: %s); disabled, training and capture go on",
                what,
                type(exc).__name__,
                exc,
            )

    def _start_rules(self, collector: Collector) -> None:
        from trainspect.rules.live import LiveRuleRunner

        ident = collector.identity
        several = ident is not None and ident.world_size > 1
        self._live = LiveRuleRunner(self.rules, collector.out_dir, worker=collector.worker, name_worker=several)
        self._live.start()

    def _attach_profiler(self, collector: Collector) -> None:
        from trainspect.hooks.framework_metrics import FrameworkRecorder
        from trainspect.hooks.system_monitor import SystemMonitor

        # events before the run opens (the first batch's wait) are kept in memory; the file opens with the run
        self._framework = FrameworkRecorder(collector.out_dir, collector.worker, self.profiler_config)
        self._monitor = SystemMonitor.for_run(collector.out_dir, self.profiler_config)
        if self._monitor is not None:
            self._monitor.start()

    def _start_profiler(self, collector: Collector) -> None:
        self._framework.worker = collector.worker
        self._framework.start()
        ident = collector.identity
        if ident is None or ident.world_size <= 1 or ident.chief:  # profiler rules judge the whole job: once
            from trainspect.rules.live_profiler import LiveProfilerRules

            own = [r for r in self.rules if getattr(r, "kind", "") == "profiler"]
            self._live_profiler = LiveProfilerRules(collector.out_dir, own, worker=collector.worker)
            self._live_profiler.start()

    def _mlflow_options(self) -> tuple[Any, dict[str, Any]]:
        run, opts = self._mlflow_checked
        return run, dict(opts)

    def _mlflow_wanted(self) -> bool:
        flag = env.TRAINSPECT_MLFLOW.get()
        run, _ = self._mlflow_options()
        if flag == "0" or run is False:
            return False
        if run is not None or flag == "1":
            return True
        # a run can only be active if the script imported mlflow; never import it just to find out
        return "mlflow" in sys.modules or bool(env.MLFLOW_RUN_ID.get())

    def _start_mlflow(self, collector: Collector) -> None:
        from trainspect.mlflow_plugin.session import MlflowSession

        run, opts = self._mlflow_options()
        captures = ["tensors"] + (["rules"] if self.rules else [])
        captures += ["system", "framework"] if self.profiler_config is not None else []
        ident = collector.identity
        worker = collector.worker if ident is not None and ident.world_size > 1 and not ident.chief else None
        self._mlflow = MlflowSession.attach(
            collector.out_dir,
            run,
            captures=tuple(captures),
            worker=worker,
            profiler_config=self.profiler_config,
            **opts,
        )
        if self._mlflow is not None:
            self._mlflow.start()
            log.info("trainspect: logging to MLflow run %s", self._mlflow.run_id)

    def note_origin(self, origin: dict[str, Any]) -> None:
        """Where a NaN/Inf came from (the PyTorch hook's finding): the live rules' verdicts name it."""
        if self._live is not None:
            self._live.origins.append(origin)

    @property
    def framework_recorder(self) -> Any:
        """The framework-metrics recorder, when profiling is on."""
        return self._framework

    def set_window(self, window: Any) -> None:
        """Attach a framework-specific detailed-profiling window (``on_step_start/on_step_end/close``)."""
        self._window = window
        self._update_quiet()

    # --- steps and spans -----------------------------------------------------------------------------------
    def check_stop(self, collector: Collector) -> None:
        """Raise ``TrainingStopped`` at a step boundary when a StopTraining action asked for it."""
        if self._live is None:
            return
        if self._stopped:
            return
        stop: TrainingStopped | None = self._live.pending_stop()
        if stop is not None:
            self._stopped = True
            collector.end_step()
            self._live.close(final=False)
            raise stop

    def on_step_start(self, collector: Collector) -> None:
        """A step began."""
        if self._framework is not None:
            self._framework.on_step_start(collector.mode, collector.mode_steps[collector.mode], collector.global_step)
        if self._window is not None:
            self._window.on_step_start(collector.global_step)

    def on_step_end(self, collector: Collector, record: StepRecord | None) -> None:
        """A step ended; ``record`` is what was saved at it."""
        if self._framework is not None and collector.global_step >= 0:
            self._framework.on_step_end(collector.mode, collector.mode_steps[collector.mode], collector.global_step)
        if self._window is not None:
            self._window.on_step_end(collector.global_step)
        if self._live is not None and record is not None:
            self._live.submit(record)
        if self._mlflow is not None and record is not None:
            self._mlflow.submit(record)

    def on_late_save(self, record: StepRecord | None) -> None:
        """A save between steps (``save_scalar`` after ``optimizer.step()``) reopened and ended the last step.

        Its record goes to MLflow (which logs every scalar whenever in the step it was saved); the live rules
        have judged that step already.
        """
        if self._mlflow is not None and record is not None:
            self._mlflow.submit(record)

    def _span_start(self, kind: str) -> None:
        if self._framework is not None:
            self._spans[kind] = time.time()

    def _span_end(self, kind: str, step: int | None = None) -> None:
        start = self._spans.pop(kind, None)
        if self._framework is not None and start is not None:
            self._framework.record_span(kind, start, time.time(), step)

    def on_forward_start(self) -> None:
        """The model's forward pass began."""
        self._span_start("forward")

    def on_forward_end(self) -> None:
        """The model's forward pass ended; the backward pass is timed from here to the optimizer step."""
        self._span_end("forward")
        self._span_start("backward")

    def on_optimizer_start(self) -> None:
        """``optimizer.step()`` began."""
        self._span_end("backward")
        self._span_start("optimizer")

    def on_optimizer_end(self) -> None:
        """``optimizer.step()`` ended."""
        self._span_end("optimizer")

    def flush(self, timeout: float | None = None) -> bool:
        """Send what the MLflow logger has queued now; return whether it arrived."""
        return self._mlflow is None or self._mlflow.flush(timeout)

    # --- closing -------------------------------------------------------------------------------------------
    def before_close(self, collector: Collector) -> None:
        """Called before the collector closes (the last step is already ended): finish what this worker writes.

        Final verdicts and framework metrics are on disk before the collector records this worker's end, which
        the chief waits for before it reports on the whole job.
        """
        if self._window is not None:
            self._window.close()
            self._window = None
        if self._live is not None:
            self._live.close()
            self._live = None
        if self._live_profiler is not None:
            self._live_profiler.close()
            self._live_profiler = None
        if self._framework is not None:
            self._framework.close()
            self._framework = None
        if self._monitor is not None:
            self._monitor.close()
            self._monitor = None
        self._part("the copy of Horovod's timeline", _copy_horovod_timeline, collector)

    def close(self, collector: Collector) -> None:
        """Stop every part (:meth:`before_close` first, if it was not called); the chief writes the report."""
        self.before_close(collector)
        report: tuple[Any, Path] | None = None
        if (self.rules or self.profiler_config is not None) and not collector.dry_run and self._job_complete(collector):
            report = self._closing_part("the report", self._write_report, collector)
        if self._mlflow is not None:
            session, self._mlflow = self._mlflow, None
            ctx, path = report if report is not None else (None, None)
            self._closing_part("MLflow logging", lambda c: session.close(report=path, context=ctx), collector)
        self._update_quiet()
        self._closing_part("the closing summary", self._print_summary, collector)

    def _print_summary(self, collector: Collector) -> None:
        """One line per rule with issues, the report and the run directory (``trainspect run`` prints its own).

        Only when the hook ran rules or wrote a report; not after a write failure (a full disk), when the close says
        in one line what it could not write, and where.
        """
        if not (self.rules or self.profiler_config is not None):
            return
        ident = collector.identity
        if collector.dry_run or ident is None or env.TRAINSPECT_RUN_ACTIVE.get():
            return
        if ident.world_size > 1 and not ident.chief:
            return
        if collector.writer_failed:
            return
        from trainspect._closing_summary import summary_lines

        lines = summary_lines(collector.out_dir)
        if collector.remote is not None:  # a URL run: the spool's files are uploaded there at close
            lines = [line.replace(str(collector.out_dir), collector.remote.url) for line in lines]
        print("\n".join(lines), file=sys.stderr, flush=True)

    @staticmethod
    def _job_complete(collector: Collector, timeout: float = 30.0) -> bool:
        """In a multi-worker job, the chief waits (bounded) for the others, then reports for the whole job."""
        ident = collector.identity
        if ident is None or ident.world_size <= 1:
            return ident is not None
        if not ident.chief or collector.remote is not None:  # a URL run: the others' data is not in this spool
            return False
        deadline = time.monotonic() + timeout
        while not all_workers_ended(collector.layout, ident.world_size) and time.monotonic() < deadline:
            time.sleep(0.2)
        return True

    def _closing_part(self, what: str, fn: Any, collector: Collector) -> Any:
        try:
            return fn(collector)
        except Exception as exc:
            if env.TRAINSPECT_TESTING.get():
                raise
            log.warning(
                "trainspect: %s failed at close (%s: %s); the run directory is complete", what, type(exc).__name__, exc
            )
            return None

    def _write_report(self, collector: Collector) -> tuple[Any, Path]:
        from trainspect.report.context import ReportContext
        from trainspect.report.render import write_report

        price = self._mlflow_options()[1].get("price_per_hour")
        ctx = ReportContext.load(collector.out_dir, price_per_hour=price)
        return ctx, write_report(collector.out_dir, price_per_hour=price, context=ctx)


def _copy_horovod_timeline(collector: Collector) -> None:
    """Rank 0 of a Horovod job with ``HOROVOD_TIMELINE`` set: a copy of the timeline joins the run (as it is now)."""
    source, ident = env.HOROVOD_TIMELINE.get(), collector.identity
    if not source or source == "DYNAMIC" or collector.dry_run or ident is None or not ident.chief:
        return
    path = Path(source)
    if path.is_file():
        target = collector.layout.horovod_timeline
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)
