"""The profiler rules, judged while the job runs: off the training thread, at their scan interval.

SageMaker Studio shows a bottleneck while the job runs; so do the TensorBoard Profiler view and MLflow's tags here,
because :class:`LiveProfilerRules` writes the profiler rules' verdicts into the run's record as the data grows.
Verdicts that found no issue yet are InProgress; all of them are replaced by the report's evaluation over the
whole run when the job ends (they are unfinished: :func:`trainspect.rules.record.unfinished_rules`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Sequence

from trainspect.rules.base import Rule
from trainspect.rules.record import VerdictRecord, stamp
from trainspect.rules.verdict import Status, Verdict
from trainspect.store.layout import RunLayout

__all__ = ["LiveProfilerRules"]

_log = logging.getLogger(__name__)
_MAX_SHARE = 0.05  # an evaluation may take at most this share of the time between evaluations (the wait grows)


class LiveProfilerRules:
    """Evaluates profiler rules over a run directory every ``interval_s`` seconds, in a daemon thread.

    Args:
        run_dir: the run directory the hook writes.
        rules: profiler rules the user configured; they replace the built-in ones of the same name, and every
            other built-in profiler rule is evaluated too.
        interval_s: seconds between evaluations (default ``TRAINSPECT_PROFILER_RULES_S``, 60: the rules' scan
            interval); an evaluation that takes longer than 5 % of it stretches the next wait.
        worker: the worker whose hook runs it (the chief's: profiler rules judge the whole job).

    Example:
        >>> import tempfile
        >>> live = LiveProfilerRules(tempfile.mkdtemp(), interval_s=3600)
        >>> live.start(); live.close()
        >>> live.evaluations
        0
    """

    def __init__(
        self,
        run_dir: str | os.PathLike[str],
        rules: Sequence[Rule] | None = None,
        interval_s: float | None = None,
        worker: str = "worker_0",
    ) -> None:
        from trainspect.env import TRAINSPECT_PROFILER_RULES_S

        self.run_dir = os.fspath(run_dir)
        own = {r.name: r for r in rules or ()}
        self.rules = [own.pop(r.name, r) for r in _builtin()] + list(own.values())
        self.interval_s = float(interval_s if interval_s is not None else TRAINSPECT_PROFILER_RULES_S.get())
        self.worker = worker
        self.evaluations = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._record = VerdictRecord(RunLayout(self.run_dir).verdicts, "live")

    def start(self) -> None:
        """Start the evaluation thread (idempotent)."""
        if self._thread is None and self.rules:
            self._thread = threading.Thread(target=self._run, name="trainspect-profiler-rules", daemon=True)
            self._thread.start()

    def close(self, timeout: float = 10.0) -> None:
        """Stop the thread (the report evaluates the rules over the whole run at the end)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _run(self) -> None:
        wait = self.interval_s
        while not self._stop.wait(wait):
            began = time.monotonic()
            try:
                self.evaluate_once()
            except Exception as exc:  # noqa: BLE001 - never into training: this part stops, the report still runs
                _log.warning(
                    "trainspect: live profiler rules stopped (%s: %s); the report judges at the end",
                    type(exc).__name__,
                    exc,
                )
                return
            wait = max(self.interval_s, (time.monotonic() - began) / _MAX_SHARE)

    def evaluate_once(self) -> list[Verdict]:
        """Evaluate the rules over the data on disk now and write them into the record (not final)."""
        from trainspect.profiler.data import load_profiler_data

        data = load_profiler_data(self.run_dir)
        if not data.system and not data.framework:
            return []
        verdicts: list[Verdict] = []
        for rule in self.rules:
            try:
                verdict = rule.evaluate(data)
            except Exception as exc:  # noqa: BLE001 - one rule's failure is its own verdict
                verdict = Verdict(
                    rule=rule.name, status=Status.ERROR, kind=rule.kind, message=f"{type(exc).__name__}: {exc}"
                )
            if verdict.status in (Status.NO_ISSUES_FOUND, Status.NO_DATA):  # so far: the job goes on
                verdict = verdict.with_status(Status.IN_PROGRESS)
            verdicts.append(verdict)
        self._record.write(stamp(verdicts, "live"), final=False, worker=self.worker, updated=time.time())
        self.evaluations += 1
        return verdicts


def _builtin() -> list[Rule]:
    from trainspect.rules.profiler import PROFILER_RULES

    return [cls() for cls in PROFILER_RULES]  # type: ignore[abstract]
