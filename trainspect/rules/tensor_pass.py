"""One pass of tensor rules over a trial's steps: each tensor fetched once per worker, every worker judged.

A run with one worker is read as the Trial gives it. A run with several workers is read worker by worker (one
worker's data in memory at a time, so time grows linearly and memory not at all with the workers); each rule judges
each worker with its own state and says which worker triggered first (:class:`~trainspect.rules.worker_tally.
WorkerTally`). The steps are the Trial's complete steps: those every worker wrote (all of them once the run ended).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

from trainspect.rules.column_feed import ColumnPlan, StepTable, index_of
from trainspect.rules.columns import Columns, RoleColumn
from trainspect.rules.step_data import StepData
from trainspect.rules.tensor_rule import TensorRule
from trainspect.rules.trial_feed import Needs, StepAssembler, TrialFeed, roles_for
from trainspect.rules.trial_view import TrialView, open_trial
from trainspect.rules.verdict import Verdict
from trainspect.rules.worker_tally import WorkerTally
from trainspect.step import TensorRecord
from trainspect.store.index import TrialIndex
from trainspect.store.nogc import paused_gc

__all__ = ["evaluate_tensor_rules", "with_mode"]

_log = logging.getLogger(__name__)

_Series = dict[str, dict[int, TensorRecord]]


def evaluate_tensor_rules(
    trial: TrialView,
    rules: Sequence[TensorRule],
    start: int | None,
    end: int | None,
    finished: bool,
    columns: bool = True,
    read_columns: bool | None = None,
) -> list[Verdict]:
    """Evaluate tensor rules in one pass over the trial's steps (each tensor fetched once per worker).

    ``columns``: hand chunks of scalar steps to the rules that judge whole columns
    (:meth:`~trainspect.rules.tensor_rule.TensorRule.check_columns`); False feeds every rule step by step (the
    same verdicts, slower: what the tests compare the fast path with). ``read_columns`` (default: ``columns``):
    read the one-element float tensors of a trainspect Trial straight from its index columns
    (:mod:`~trainspect.rules.column_feed`) rather than through its Tensor API (the same records).
    """
    with paused_gc():  # a bounded batch of many small acyclic objects (see trainspect.store.nogc)
        read = columns if read_columns is None else read_columns
        return _evaluate(trial, rules, start, end, finished, columns, read)


def _evaluate(
    trial: TrialView,
    rules: Sequence[TensorRule],
    start: int | None,
    end: int | None,
    finished: bool,
    columns: bool,
    read_columns: bool,
) -> list[Verdict]:
    source = TrialFeed(trial)
    names = source.names()
    membership = source.membership()
    workers = source.workers()
    several = len(workers) > 1
    tallies = [WorkerTally(rule, several) for rule in rules]
    roles = [_roles(tally, names, membership) for tally in tallies]
    steps = source.steps(start, end, finished)
    index = index_of(trial) if read_columns else None
    known = index.step_columns(np.asarray(steps, dtype=np.int64)) if index is not None else None
    arr = np.asarray(steps, dtype=np.int64)
    table = StepTable(arr, *known) if known is not None else StepTable.of(steps, source.step_infos(steps))
    pass_ = _Pass(steps, table, _needs(rules, roles), tallies, roles, columns, index)
    compared = [_compared(rule) for rule in rules]
    for worker in workers:
        feed = source.for_worker(worker) if several else source
        pass_.judge(feed, worker if several else source.worker(), compared)
    verdicts = []
    for tally in tallies:
        tally.end()
        verdicts.append(with_mode(tally.verdict(finished), lambda s: table.mode_name(s) or source.step_info(s)[0].name))
    return verdicts


CHUNK_STEPS = 4096
"""Steps read and fed together: the values of one chunk are in memory at a time (fewer when they are large)."""

CHUNK_BYTES = 64 << 20
"""About how many bytes of raw values one chunk of steps holds at most."""


class _Pass:
    """The steps, what to fetch and the rules' tallies of one evaluation; :meth:`judge` feeds one worker."""

    def __init__(
        self,
        steps: list[int],
        infos: StepTable,
        needs: dict[str, Needs],
        tallies: list[WorkerTally],
        roles: list[dict[str, str]],
        columns: bool = True,
        index: TrialIndex | None = None,
    ) -> None:
        self.steps, self.infos, self.needs, self.tallies, self.roles = steps, infos, needs, tallies, roles
        self.wanted = set(steps)
        self.columns = columns
        self.index = index

    def judge(self, feed: TrialFeed, worker: str, compared: list[list[TrialFeed | None]]) -> None:
        """Read one worker's data chunk by chunk of steps and feed it, step by step, to every rule."""
        read, needs = self._column_plans(feed)
        plans = feed.plan(needs, self.wanted)
        others = [
            [_other_data(o, role, self.wanted, worker) for o in c] for role, c in zip(self.roles, compared, strict=True)
        ]
        per_chunk = chunk_steps(sum(p.step_bytes() for p in plans) + sum(p.step_bytes() for p in read))
        for i in range(0, len(self.steps), per_chunk):
            chunk = self.steps[i : i + per_chunk]
            data: _Series = feed.fetch_chunk(plans, chunk)
            for plan in read:
                data[plan.name] = plan.chunk(chunk)  # type: ignore[assignment]
            self._feed(data, chunk, self.infos[i : i + per_chunk], worker, others)

    def _column_plans(self, feed: TrialFeed) -> tuple[list[ColumnPlan], dict[str, Needs]]:
        """The tensors read from the index columns (one-element floats), and the needs of the others."""
        if self.index is None:
            return [], self.needs
        membership = feed.membership()
        wanted = self.infos.steps
        read, rest = [], {}
        for name, need in self.needs.items():
            plan = ColumnPlan.make(self.index, name, feed.worker_name, need, membership.get(name, frozenset()), wanted)
            if plan is None:
                rest[name] = need
            else:
                read.append(plan)
        return read, rest

    def _feed(
        self,
        data: _Series,
        chunk: list[int],
        infos: StepTable,
        worker: str,
        others: list[list[_Series]],
    ) -> None:
        """Feed one chunk's steps to every rule; rules that select the same tensors in the same roles share them."""
        assemblers: dict[tuple[tuple[str, str], ...], StepAssembler] = {}
        cols: dict[int, Columns | None] = {}
        made: dict[int, RoleColumn | None] = {}  # one column per fetched series, whichever rules read it
        lanes = []
        for tally, role, other in zip(self.tallies, self.roles, others, strict=True):
            key = tuple(sorted(role.items()))
            assembler = assemblers.get(key) or assemblers.setdefault(key, StepAssembler(role, data))
            if self.columns and not other and tally.tally(worker).error is None:
                if id(assembler) not in cols:
                    cols[id(assembler)] = assembler.columns(chunk, infos, worker, made)
                chunk_cols = cols[id(assembler)]
                if chunk_cols is not None and tally.feed_columns(chunk_cols) is not None:
                    continue  # judged the whole chunk at once
            lanes.append((tally, tally.tally(worker), assembler, other))
        self._step_by_step(lanes, chunk, infos, worker)

    def _step_by_step(self, lanes: list[Any], chunk: list[int], infos: StepTable, worker: str) -> None:
        """Feed the rules that judge step by step (the others judged the chunk as columns)."""
        for step, info in zip(chunk, infos, strict=True):
            shared: dict[int, StepData] = {}
            for tally, own, assembler, other in lanes:
                if own.error is not None:
                    continue
                if other:
                    tally.feed(assembler.at(step, info, worker, _others_at(other, step)))
                    continue
                got = shared.get(id(assembler))
                if got is None:
                    got = shared[id(assembler)] = assembler.at(step, info, worker)
                tally.feed(got)


def chunk_steps(step_bytes: int) -> int:
    """How many steps one chunk holds: :data:`CHUNK_STEPS`, fewer when a step's raw values are large.

    Example:
        >>> chunk_steps(8), chunk_steps(16 << 20)
        (4096, 4)
    """
    return max(1, min(CHUNK_STEPS, CHUNK_BYTES // max(1, step_bytes)))


def with_mode(verdict: Verdict, mode_of: Callable[[int], str | None]) -> Verdict:
    """The verdict with ``mode`` naming the mode(s) of its first and last trigger steps (global steps).

    Example:
        >>> from trainspect.rules.verdict import Status
        >>> v = Verdict("X", Status.ISSUES_FOUND, first_trigger_step=3, last_trigger_step=9)
        >>> with_mode(v, lambda s: "TRAIN" if s < 5 else "EVAL").mode
        'TRAIN+EVAL'
    """
    steps = [s for s in (verdict.first_trigger_step, verdict.last_trigger_step) if s is not None]
    modes = [m for m in dict.fromkeys(mode_of(s) for s in steps) if m]
    return replace(verdict, mode="+".join(modes)) if modes else verdict


def _roles(tally: WorkerTally, names: list[str], membership: Mapping[str, frozenset[str]]) -> dict[str, str]:
    try:
        return roles_for(tally.rule, names, membership)
    except Exception as exc:
        tally.fail(exc)
        return {}


def _needs(rules: Sequence[TensorRule], roles: Sequence[Mapping[str, str]]) -> dict[str, Needs]:
    needs: dict[str, Needs] = {}
    for rule, role_map in zip(rules, roles, strict=True):
        by_role = {sel.role: sel for sel in rule.selects()}
        for name, role in role_map.items():
            needs.setdefault(name, Needs()).add(by_role[role])
    return needs


def _compared(rule: TensorRule) -> list[TrialFeed | None]:
    """Feeds of the other runs a rule compares against (None for a run that cannot be opened, with a warning)."""
    out: list[TrialFeed | None] = []
    for path in rule.compared_runs():
        try:
            out.append(TrialFeed(open_trial(path)))
        except Exception as exc:
            _log.warning("rules: could not read other trial %s: %s", path, exc)
            out.append(None)
    return out


def _other_data(other: TrialFeed | None, roles: Mapping[str, str], steps: set[int], worker: str) -> _Series:
    """The other run's values of the rule's tensors: of the same worker when it has several, else its only one."""
    if other is None:
        return {}
    try:
        workers = other.workers()
        feed = other.for_worker(worker) if len(workers) > 1 and worker in workers else other
        present = set(feed.names())
        return feed.fetch({n: Needs(raw=True) for n in roles if n in present}, steps)
    except Exception as exc:
        _log.warning("rules: could not read other trial %s: %s", getattr(other.trial, "path", other.trial), exc)
        return {}


def _others_at(others: list[_Series], step: int) -> tuple[Mapping[str, TensorRecord], ...]:
    return tuple({n: s[step] for n, s in other.items() if step in s} for other in others)
