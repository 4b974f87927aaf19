"""Live, in-process rule evaluation fed from the hook's step records.

Each record goes to every live rule's incremental check (the same check offline evaluation uses). While
that is cheap (on average under ``inline_share`` of the time between records: 3%, as for the default rules)
and nothing is queued, :meth:`LiveRuleRunner.submit` evaluates the record right away on the training thread:
no thread hand-off, no lag. Otherwise it only enqueues (O(1), never blocks) and a daemon thread evaluates. The daemon
thread also runs idle checks and rewrites the verdict file at most about once a second. Actions run on a rule's
first trigger; a ``StopTraining`` action makes :meth:`LiveRuleRunner.pending_stop` return the
:class:`~trainspect.exceptions.TrainingStopped` the hook raises at the next step boundary (a rule that can stop
training lags it by at most two steps: past that, training waits for it, at most 2 s per step).
"""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from trainspect.env import TRAINSPECT_TESTING
from trainspect.exceptions import TrainingStopped
from trainspect.rules.actions import StopTraining, finish_webhooks
from trainspect.rules.base import Rule
from trainspect.rules.engine import with_mode
from trainspect.rules.record import VerdictRecord, stamp
from trainspect.rules.step_data import StepData
from trainspect.rules.tally import Tally
from trainspect.rules.tensor_rule import TensorRule
from trainspect.rules.verdict import Status, Verdict
from trainspect.step import StepRecord, TensorRecord
from trainspect.store.job_events import write_stop
from trainspect.store.layout import RunLayout
from trainspect.store.manifest import read_manifest

__all__ = ["LiveRuleRunner"]

_log = logging.getLogger(__name__)
_STOP = object()
_MAX_QUEUE = 10_000
_INLINE_SHARE = 0.03
"""Records are evaluated on the training thread while they cost less than this share of the step interval."""
_STOP_LAG = 2  # steps a rule with a StopTraining action may lag training ...
_STOP_WAIT = 2.0  # ... for which training waits at most this long at a step boundary
_UNSET = object()


class _LiveRule:
    """One live rule: its tally and a cache of which role each tensor name plays."""

    def __init__(self, rule: TensorRule, name_worker: bool) -> None:
        self.tally = Tally(rule, name_worker=name_worker)
        self.selects = rule.selects()
        self.roles: dict[str, str | None] = {}
        self.fired = False
        self._layout_key: tuple[str, ...] = ()
        self._layout: list[tuple[str, tuple[str, ...]]] = []
        self.modes: dict[int, str] = {}  # the mode of each step the rule triggered at (first and last kept)

    def _role(self, name: str, rec: TensorRecord) -> str | None:
        role = self.roles.get(name, _UNSET)
        if role is _UNSET:
            role = next((s.role for s in self.selects if s.matches(name, rec.collections)), None)
            self.roles[name] = role  # type: ignore[assignment]
        return role  # type: ignore[return-value]

    def _grouping(self, tensors: dict[str, TensorRecord]) -> list[tuple[str, tuple[str, ...]]]:
        """The selected names of a record by role; records with the same names (most steps) reuse it."""
        key = tuple(tensors)
        if key != self._layout_key:
            grouped: dict[str, list[str]] = {}
            for name, rec in tensors.items():
                role = self._role(name, rec)
                if role is not None:
                    grouped.setdefault(role, []).append(name)
            self._layout_key, self._layout = key, [(r, tuple(names)) for r, names in grouped.items()]
        return self._layout

    def note_mode(self, step: int, mode: str) -> None:
        """Remember a trigger step's mode (only the first and the latest are kept)."""
        if len(self.modes) >= 2:
            del self.modes[max(self.modes)]
        self.modes[step] = mode

    def verdict(self, finished: bool) -> Verdict:
        """The tally's verdict, with the mode of its trigger steps."""
        last = self.tally.last_step

        def mode_of(step: int) -> str | None:  # a trigger at the end or while idle is at the last step
            return self.modes.get(step) or (last.mode.name if last is not None and last.step == step else None)

        return with_mode(self.tally.verdict(finished), mode_of)

    def step_data(self, record: StepRecord) -> StepData:
        tensors = record.tensors
        roles = {role: tuple(tensors[n] for n in names) for role, names in self._grouping(tensors)}
        return StepData(record.global_step, record.mode, record.mode_step, record.wall_time, record.worker, roles)


class LiveRuleRunner:
    """Evaluate rules on a background thread as the hook records steps.

    Args:
        rules: the rules. Tensor rules that can run live are fed step by step; the others (profiler rules,
            rules comparing runs) are evaluated offline over the run directory at :meth:`close`.
        run_dir: the run directory; verdicts go to ``RunLayout(run_dir).verdicts``.
        worker: this process's worker name. In a job with several workers every rank runs its own runner on its own
            data; the verdict record combines the ranks' verdicts (a rank's verdict replaces only its own earlier
            ones; see :func:`~trainspect.rules.worker_verdicts.merge_current`).
        poll: seconds between idle checks (StalledTrainingRule) and verdict-file rewrites (default 1.0).
        write: whether to write the verdict file.
        name_worker: whether verdicts name the worker ("first in worker_3 at step 12"); None: when the worker is
            not ``worker_0`` or the run's manifest says the job has several workers.
        inline_share: evaluate records on the training thread while they cost on average less than this
            share of the time between records (default 0.03; 0 always hands them to the evaluation thread).

    Example:
        >>> import tempfile
        >>> from trainspect.rules import ExplodingTensor
        >>> runner = LiveRuleRunner([ExplodingTensor()], tempfile.mkdtemp())
        >>> runner.start()
        >>> [v.status.value for v in runner.close()]
        ['NoData']
    """

    def __init__(
        self,
        rules: Sequence[Rule],
        run_dir: str | os.PathLike[str],
        *,
        worker: str = "worker_0",
        poll: float | None = None,
        write: bool = True,
        inline_share: float = _INLINE_SHARE,
        name_worker: bool | None = None,
    ) -> None:
        self.rules = list(rules)
        self.run_dir = os.fspath(run_dir)
        self.worker = worker
        self.poll = 1.0 if poll is None else max(0.01, float(poll))
        self.write = write
        named = _several_workers(self.run_dir, worker) if name_worker is None else bool(name_worker)
        live = [r for r in self.rules if isinstance(r, TensorRule) and r.live and r.has_check()]
        self._live = {id(r): _LiveRule(r, named) for r in live}
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._stop: TrainingStopped | None = None
        self._stoppers = any(isinstance(a, StopTraining) for rule in self.rules for a in rule.actions)
        self._failure: BaseException | None = None
        self._dirty = True
        self._last_write = 0.0
        self._last_step: int | None = None
        self._dropped = 0
        self._submitted = 0
        self._done = 0
        self._inline_share = float(inline_share)
        self._cost = 0.0
        self._interval = 0.0
        self._last_submit: float | None = None
        self._closed = False
        self._final: list[Verdict] | None = None
        self._final_final = False
        self._record = VerdictRecord(RunLayout(self.run_dir).verdicts, "live")
        self.origins: list[dict[str, Any]] = []
        """Where NaN/Inf came from, as the PyTorch hook finds it (appended to by the hook; see :meth:`Rule.explain`)."""

    # --- training-thread side --------------------------------------------------------------------------
    def start(self) -> None:
        """Start the evaluation thread (idempotent) and write the initial verdict file."""
        if self._thread is not None or self._closed:
            return
        self._thread = threading.Thread(target=self._run, name="trainspect-rules", daemon=True)
        self._thread.start()

    def submit(self, record: StepRecord) -> None:
        """Evaluate one saved step now if that is cheap, else enqueue it (never blocks; drops steps far behind)."""
        if self._closed or self._failure is not None:
            return
        now = time.perf_counter()
        if self._last_submit is not None:
            self._interval = (
                0.9 * self._interval + 0.1 * (now - self._last_submit) if self._interval else now - self._last_submit
            )
        self._last_submit = now
        if self._thread is not None and self._cost < self._budget() and self._submitted == self._done:
            self._submitted += 1
            self._evaluate(record)
            return
        if self._queue.qsize() >= _MAX_QUEUE:
            self._dropped += 1
            if self._dropped == 1:
                _log.warning("trainspect rules fall behind training; dropping steps from live evaluation")
            return
        self._submitted += 1
        self._queue.put(record)

    def pending_stop(self) -> TrainingStopped | None:
        """Return the TrainingStopped a StopTraining action asked for, else None (cheap; call every step).

        When a rule can stop training and its evaluation lags more than two steps behind (a loaded machine), the
        training thread waits for it, at most two seconds per step: a run asked to stop does not train on.
        """
        if self._stoppers and self._stop is None and self.lag > _STOP_LAG and self._thread is not None:
            deadline = time.perf_counter() + _STOP_WAIT
            while (
                self.lag > _STOP_LAG and self._stop is None and self._failure is None and time.perf_counter() < deadline
            ):
                time.sleep(0.0005)
        return self._stop

    def verdicts(self) -> list[Verdict]:
        """Return the current verdicts (InProgress until the run ends)."""
        if self._final is not None:
            return list(self._final)
        with self._lock:
            return self._snapshot(finished=False)

    @property
    def lag(self) -> int:
        """Records submitted but not yet evaluated (queued or being evaluated)."""
        return self._submitted - self._done

    def close(self, timeout: float = 30.0, final: bool = True) -> list[Verdict]:
        """Drain the queue, evaluate what is left, write the verdict file and return the verdicts.

        A runner closed with ``final=False`` (training stopped by a rule) may be closed again with
        ``final=True`` once the run has ended, to make the statuses final.

        Args:
            timeout: seconds to wait for the evaluation thread to drain.
            final: whether the run is over (statuses become final: NoIssuesFound, NoData...).

        Returns:
            One verdict per rule, in the order given.
        """
        if self._final is not None and (self._final_final or not final):
            return list(self._final)
        self._closed = True
        if self._thread is not None:
            self._queue.put(_STOP)
            self._thread.join(timeout)
            if self._thread.is_alive():
                _log.warning("trainspect rules did not finish within %.0f s; verdicts may miss steps", timeout)
        else:
            self._drain_inline()
        verdicts = self._final_verdicts(final)
        self._final, self._final_final = verdicts, final
        self._write(verdicts, final=final)
        finish_webhooks(action for rule in self.rules for action in rule.actions)
        if self._failure is not None and TRAINSPECT_TESTING.get():
            raise RuntimeError("trainspect live rules failed") from self._failure
        return verdicts

    # --- evaluation thread -----------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            self._write(self.verdicts(), final=False)
            while True:
                try:
                    item = self._queue.get(timeout=self.poll)
                except queue.Empty:
                    item = None
                if item is _STOP:
                    return
                if item is not None:
                    self._evaluate(item, guard=False)
                self._maintain()
        except Exception as exc:  # never raise into training: disable live rules with one warning
            self._failure = exc
            _log.warning("trainspect live rules disabled after an internal error: %s", exc, exc_info=True)

    def _drain_inline(self) -> None:
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is not _STOP:
                self._evaluate(item, guard=False)

    def _evaluate(self, record: StepRecord, guard: bool = True) -> None:
        """Process one record, timing it; ``guard``: on the training thread, where nothing may raise."""
        start = time.perf_counter()
        try:
            self._process(record)
        except Exception as exc:
            if not guard:
                raise
            self._failure = exc  # never raise into training: disable live rules with one warning
            _log.warning("trainspect live rules disabled after an internal error: %s", exc, exc_info=True)
        finally:
            self._done += 1
        # a moving average, each sample capped so that one slow record (a preempted thread) does not switch modes
        spent = min(time.perf_counter() - start, 5 * self._budget())
        self._cost = 0.9 * self._cost + 0.1 * spent

    def _budget(self) -> float:
        """Seconds a record may cost on average to be evaluated on the training thread."""
        return self._inline_share * self._interval

    def _process(self, record: StepRecord) -> None:
        fired: list[tuple[Rule, Verdict]] = []
        with self._lock:
            self._last_step = record.global_step
            for rule in self.rules:
                live = self._live.get(id(rule))
                if live is None or live.tally.error is not None:
                    continue
                check = live.tally.feed(live.step_data(record))
                if check is not None:
                    live.note_mode(record.global_step, record.mode.name)
                if check is not None and not live.fired:
                    live.fired = True
                    fired.append((rule, live.verdict(finished=False)))
            self._dirty = True
        for rule, verdict in fired:
            self._fire(rule, verdict)

    def _maintain(self) -> None:
        now = time.time()
        if now - self._last_write < self.poll:
            return
        fired = []
        with self._lock:
            for rule in self.rules:
                live = self._live.get(id(rule))
                if live is not None and live.tally.idle(now) is not None:
                    self._dirty = True
                    if not live.fired:
                        live.fired = True
                        fired.append((rule, live.verdict(finished=False)))
            verdicts = self._snapshot(finished=False) if self._dirty else None
            self._dirty = False
        for rule, verdict in fired:
            self._fire(rule, verdict)
        if verdicts is not None:
            self._write(verdicts, final=False)
        self._last_write = now

    def _fire(self, rule: Rule, verdict: Verdict) -> None:
        verdict = rule.explain(verdict, self.origins)
        for action in rule.actions:
            if isinstance(action, StopTraining):
                if self._stop is None:
                    self._stop = TrainingStopped(rule.name, verdict.first_trigger_step, verdict.message)
                    if self.write:  # the report, compare and MLflow say the run was stopped, and by what
                        write_stop(self.run_dir, rule.name, self._last_step, verdict.mode, self.worker)
                continue
            try:
                action.fire(verdict)
            except Exception:
                _log.warning("rule action %r failed", action, exc_info=True)

    # --- verdicts --------------------------------------------------------------------------------------
    def _snapshot(self, finished: bool) -> list[Verdict]:
        now = time.time()
        out = []
        for rule in self.rules:
            live = self._live.get(id(rule))
            if live is not None:
                out.extend(stamp([rule.explain(live.verdict(finished), self.origins)], "live", now))
            else:
                out.append(_pending(rule))
        return out

    def _final_verdicts(self, final: bool) -> list[Verdict]:
        with self._lock:
            fired = []
            for rule in self.rules:
                live = self._live.get(id(rule))
                if live is not None and final and live.tally.end() is not None and not live.fired:
                    live.fired = True
                    fired.append((rule, live.verdict(finished=True)))
            verdicts = self._snapshot(finished=final)
        for rule, verdict in fired:
            self._fire(rule, verdict)
        deferred = [r for r in self.rules if id(r) not in self._live]
        if deferred and final:
            offline = dict(zip(map(id, deferred), stamp(self._evaluate_offline(deferred), "live"), strict=True))
            verdicts = [offline.get(id(r), v) for r, v in zip(self.rules, verdicts, strict=True)]
        return verdicts

    def _evaluate_offline(self, rules: list[Rule]) -> list[Verdict]:
        from trainspect.rules.engine import evaluate

        try:
            return evaluate(self.run_dir, rules, write=False)
        except Exception as exc:
            _log.warning("trainspect: rules %s could not be evaluated at close: %s", [r.name for r in rules], exc)
            return [_pending(r, f"could not be evaluated: {exc}") for r in rules]

    def _write(self, verdicts: list[Verdict], final: bool) -> None:
        if not self.write:
            return
        # a live verdict covers this worker only, also before it saw data: it never replaces another rank's verdict
        verdicts = [
            replace(v, workers=(self.worker,)) if id(r) in self._live and not v.workers else v
            for r, v in zip(self.rules, verdicts, strict=True)
        ]
        try:
            self._record.write(verdicts, final, worker=self.worker, updated=time.time(), last_step=self._last_step)
        except OSError as exc:
            _log.warning("trainspect: could not write verdicts: %s", exc)


def _several_workers(run_dir: str, worker: str) -> bool:
    """Whether this worker is one of several: its name is not ``worker_0``, or the run's manifest says so."""
    if worker != "worker_0":
        return True
    manifest = read_manifest(RunLayout(run_dir)) or {}
    try:
        return int(manifest.get("world_size") or 1) > 1
    except (TypeError, ValueError):
        return False


def _pending(rule: Rule, message: str = "") -> Verdict:
    text = message or f"{rule.name} is evaluated when the run closes"
    return Verdict(
        rule=rule.name,
        status=Status.IN_PROGRESS,
        kind=rule.kind,
        message=text,
        parameters=dict(rule.params),
        source="live",
    )
