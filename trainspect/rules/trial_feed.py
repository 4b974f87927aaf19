"""A thin, bulk adapter from a Trial to the step data tensor rules read.

Each needed tensor's series is fetched once (``Tensor.values()``, or its saved reductions step by step
when only reductions were saved), reduced right away to what the rules need, and then handed out step by
step. Rules never touch the Trial.
"""

from __future__ import annotations

import bisect
import logging
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from trainspect.modes import ModeKeys
from trainspect.reductions import Reduction, reduce, reduce_rows
from trainspect.rules.columns import Columns, RoleColumn, scalar_column
from trainspect.rules.step_data import StepData
from trainspect.rules.tensor_rule import Select, TensorRule
from trainspect.rules.trial_view import TensorView, TrialView
from trainspect.rules.verdict import Status, Verdict
from trainspect.rules.worker_verdicts import by_rank
from trainspect.step import ReductionKey, TensorRecord
from trainspect.store.index import TrialIndex

__all__ = [
    "TrialFeed",
    "Needs",
    "roles_for",
    "reduce_series",
    "build_step",
    "StepAssembler",
    "note_damage",
    "trial_problems",
]

_log = logging.getLogger(__name__)
_GLOBAL = ModeKeys.GLOBAL
_UNJUDGED = (Status.NO_DATA, Status.ERROR, Status.IN_PROGRESS)


def note_damage(verdict: Verdict, problems: Iterable[str]) -> Verdict:
    """Name the missing or damaged files of the run in a verdict.

    Every verdict lists them in ``details["damaged_files"]``; a verdict that could not judge (NoData, Error,
    InProgress) also names the first one in its message, so "no inputs" is never mistaken for "not recorded".

    Example:
        >>> v = note_damage(Verdict("LossNotDecreasing", Status.NO_DATA, message="no inputs"), ["run/x.idx is missing"])
        >>> v.message
        'no inputs [damaged run directory: run/x.idx is missing]'
    """
    found = list(dict.fromkeys(problems))
    if not found:
        return verdict
    details = {**verdict.details, "damaged_files": found[:20]}
    if verdict.status not in _UNJUDGED:
        return replace(verdict, details=details)
    more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
    return replace(verdict, message=f"{verdict.message} [damaged run directory: {found[0]}{more}]", details=details)


def trial_problems(trial: TrialView) -> list[str]:
    """The problems a Trial found in its run directory (none for other trial types)."""
    try:
        return list(getattr(trial, "problems", None) or [])
    except Exception:
        return []


@dataclass
class Needs:
    """What the rules of one evaluation need of one tensor."""

    raw: bool = False
    reductions: set[ReductionKey] = field(default_factory=set)

    def add(self, sel: Select) -> None:
        """Merge one selection's needs."""
        self.raw = self.raw or sel.raw or not sel.reductions
        self.reductions.update(Reduction.parse(r) for r in sel.reductions)


def roles_for(rule: TensorRule, names: Iterable[str], membership: Mapping[str, frozenset[str]]) -> dict[str, str]:
    """Map each selected tensor name to the rule's role for it (the first matching selection wins)."""
    selects = rule.selects()
    out: dict[str, str] = {}
    for name in names:
        colls = membership.get(name, frozenset())
        for sel in selects:
            if sel.matches(name, colls):
                out[name] = sel.role
                break
    return out


class TrialFeed:
    """Reads what a set of tensor rules needs from a Trial, fetching each tensor once.

    All reading of tensor values goes through this class: a feed reads one worker's values (``worker``), or the
    values a Trial gives without naming one (a single-worker run), so that what "a tensor at a step" means for the
    rules (one rank's copy, a shard, the full tensor) is decided here.

    Args:
        trial: a trainspect (or smdebug-compatible) Trial.
        worker: read only this worker's values (None: the values the Trial gives without a worker).
    """

    def __init__(self, trial: TrialView, worker: str | None = None) -> None:
        self.trial = trial
        self._worker = worker
        self._kw: dict[str, Any] = {} if worker is None else {"worker": worker}
        self._membership: dict[str, frozenset[str]] | None = None

    def for_worker(self, worker: str) -> TrialFeed:
        """A feed of the same trial that reads only ``worker``'s values (it shares what is known of the names)."""
        feed = TrialFeed(self.trial, worker)
        feed._membership = self.membership()
        return feed

    # --- what exists -----------------------------------------------------------------------------------
    def names(self) -> list[str]:
        """Every tensor name of the trial."""
        return list(self.trial.tensor_names())

    def membership(self) -> dict[str, frozenset[str]]:
        """Map each tensor name to the collections it belongs to."""
        if self._membership is None:
            names = self.names()
            members: dict[str, set[str]] = {n: set() for n in names}
            for cname, coll in _collections(self.trial).items():
                for n in self._collection_names(cname, coll, names):
                    members.setdefault(n, set()).add(cname)
            self._membership = {n: frozenset(c) for n, c in members.items()}
        return self._membership

    def _collection_names(self, cname: str, coll: Any, names: list[str]) -> Iterable[str]:
        try:
            return list(self.trial.tensor_names(collection=cname))
        except Exception:
            listed = set(getattr(coll, "tensor_names", ()) or ())
            regexes = [re.compile(r) for r in getattr(coll, "include_regex", ()) or ()]
            return [n for n in names if n in listed or any(r.match(n) for r in regexes)]

    def steps(self, start: int | None, end: int | None, finished: bool) -> list[int]:
        """Global steps in [start, end) that are complete (every worker wrote them, or the run ended)."""
        steps = sorted(int(s) for s in self.trial.steps())
        if not finished:
            last = getattr(self.trial, "last_complete_step", None)
            steps = [s for s in steps if last is not None and s <= last]
        return [s for s in steps if (start is None or s >= start) and (end is None or s < end)]

    def step_info(self, step: int) -> tuple[ModeKeys, int, float]:
        """The mode, mode step and wall time of a global step."""
        try:
            mode = ModeKeys(int(self.trial.mode(step)))
            mode_step = int(self.trial.mode_step(step))
        except Exception:
            mode, mode_step = _GLOBAL, step
        wall = math.nan
        getter = getattr(self.trial, "step_wall_time", None)
        if getter is not None:
            try:
                value = getter(step)
                wall = float(value) if value is not None else math.nan
            except Exception:
                wall = math.nan
        return mode, mode_step, wall

    def step_infos(self, steps: Iterable[int]) -> list[tuple[ModeKeys, int, float]]:
        """:meth:`step_info` of each step, read from a trainspect Trial's index at once (else step by step)."""
        index = getattr(self.trial, "_index", None)
        known = index.steps if isinstance(index, TrialIndex) else {}
        out = []
        for step in steps:
            info = known.get(step)
            if info is None:
                out.append(self.step_info(step))
                continue
            wall = info.wall_time
            out.append((ModeKeys(int(info.mode)), int(info.mode_step), float(wall) if wall is not None else math.nan))
        return out

    @property
    def worker_name(self) -> str | None:
        """The worker this feed reads (None: the values the Trial gives without naming one)."""
        return self._worker

    def worker(self) -> str:
        """The worker whose values are read (without one: the first, usually ``worker_0``)."""
        if self._worker is not None:
            return self._worker
        try:
            workers = list(self.trial.workers())
        except Exception:
            workers = []
        return str(workers[0]) if workers else "worker_0"

    def workers(self) -> list[str]:
        """The workers the rules judge, in rank order: every recorded worker (``["worker_0"]`` when none is named)."""
        try:
            workers = by_rank(str(w) for w in self.trial.workers())
        except Exception:
            workers = []
        return workers or ["worker_0"]

    # --- fetching --------------------------------------------------------------------------------------
    def fetch(self, needs: Mapping[str, Needs], steps: set[int]) -> dict[str, dict[int, TensorRecord]]:
        """Return, per tensor, its records at the given steps, reduced to what the rules need."""
        plans = self.plan(needs, steps)
        return self.fetch_chunk(plans, sorted({s for p in plans for s in p.saved}))

    def plan(self, needs: Mapping[str, Needs], steps: set[int]) -> list[_Plan]:
        """How to read each needed tensor at the given steps (its saved steps, how its reductions are read)."""
        plans = []
        membership = self.membership()
        for name, need in needs.items():
            try:
                plan = self._plan_one(name, need, steps, membership.get(name, frozenset()))
            except Exception as exc:  # one unreadable tensor must not stop the others
                _log.warning("rules: could not read tensor %s: %s", name, exc)
                continue
            plans.append(plan)
        return plans

    def _plan_one(self, name: str, need: Needs, steps: set[int], colls: frozenset[str]) -> _Plan:
        tensor = self.trial.tensor(name)
        saved = [int(s) for s in tensor.steps() if int(s) in steps]
        plan = _Plan(name, tensor, need, colls, saved)
        if saved:
            plan.kw = self._reduction_kw(tensor, self._first_step(tensor, saved))
            plan.reads_values = not self._reductions_suffice(tensor, need, self._first_step(tensor, saved), plan.kw)
        return plan

    def fetch_chunk(self, plans: Iterable[_Plan], chunk: list[int]) -> dict[str, dict[int, TensorRecord]]:
        """Return, per planned tensor, its records at the steps of ``chunk`` (sorted global steps)."""
        out: dict[str, dict[int, TensorRecord]] = {}
        for plan in plans:
            try:
                out[plan.name] = self._fetch_one(plan, plan.steps_in(chunk))
            except Exception as exc:  # one unreadable tensor must not stop the others
                _log.warning("rules: could not read tensor %s: %s", plan.name, exc)
        return out

    def _fetch_one(self, plan: _Plan, saved_steps: list[int]) -> dict[int, TensorRecord]:
        if not saved_steps:
            return {}
        name, need, colls = plan.name, plan.need, plan.colls
        values = self._values(plan, saved_steps) if plan.reads_values else {}
        reduced = reduce_series(values, need.reductions) if need.reductions else {}
        out = {}
        for step in saved_steps:
            value = values.get(step)
            if value is not None:
                raw = value if need.raw else None
                out[step] = TensorRecord(name, raw, reduced.get(step, {}), colls, tuple(value.shape))
            else:
                reds = self._saved_reductions(plan.tensor, step, need, plan.kw)
                if reds:
                    out[step] = TensorRecord(name, None, reds, colls)
        return out

    def _first_step(self, tensor: TensorView, saved: list[int]) -> int:
        """The first of ``saved`` at which this feed's worker saved the tensor (the first step without a worker)."""
        workers_at = getattr(tensor, "workers", None)
        if self._worker is None or not callable(workers_at):
            return saved[0]
        for step in saved[:_PROBE]:
            try:
                if self._worker in workers_at(step):
                    return step
            except Exception:
                break
        return saved[0]

    def _reduction_kw(self, tensor: TensorView, step: int) -> dict[str, Any]:
        """How to read a tensor's reductions: a sharded tensor's are the full tensor's, whichever worker is read.

        They are combined from every rank's piece; its raw values stay the worker's own piece (element-wise problems
        are found, and named, on the rank whose piece has them).
        """
        is_sharded = getattr(tensor, "is_sharded", None)
        try:
            return {} if self._kw and callable(is_sharded) and is_sharded(step) else self._kw
        except Exception:
            return self._kw

    def _reductions_suffice(self, tensor: TensorView, need: Needs, step: int, kw: dict[str, Any]) -> bool:
        if need.raw or not need.reductions:
            return False
        try:
            saved = tensor.reduction_values(step, **kw) or {}
        except Exception:
            return False
        return all(key in saved for key in need.reductions)

    def _values(self, plan: _Plan, steps: list[int]) -> dict[int, np.ndarray]:
        """The raw values at ``steps``: read for these steps only when the tensor can (a chunk), else all at once."""
        try:
            values_at = getattr(plan.tensor, "values_at", None)
            if callable(values_at):
                return {int(k): np.asarray(v) for k, v in values_at(steps, **self._kw).items()}
            if plan.all_values is None:  # a Trial of another API: its whole series, kept for the later chunks
                values = plan.tensor.values(mode=_GLOBAL, **self._kw)
                plan.all_values = {int(k): np.asarray(v) for k, v in values.items()}
            wanted = set(steps)
            return {k: v for k, v in plan.all_values.items() if k in wanted}
        except Exception:
            return {}

    def _saved_reductions(
        self, tensor: TensorView, step: int, need: Needs, kw: dict[str, Any]
    ) -> dict[ReductionKey, float]:
        reds: dict[ReductionKey, float] = {}
        for rname, is_abs in need.reductions:
            try:
                value = tensor.reduction_value(step, rname, mode=_GLOBAL, abs=is_abs, **kw)
            except Exception:
                continue
            if value is not None:
                reds[Reduction(rname, is_abs)] = float(np.asarray(value).reshape(-1)[0])
        return reds


@dataclass
class _Plan:
    """How one tensor is read over the chunks of an evaluation (see :meth:`TrialFeed.plan`)."""

    name: str
    tensor: TensorView
    need: Needs
    colls: frozenset[str]
    saved: list[int]
    kw: dict[str, Any] = field(default_factory=dict)
    reads_values: bool = True
    all_values: dict[int, np.ndarray] | None = None
    _pos: int = 0

    def steps_in(self, chunk: list[int]) -> list[int]:
        """The saved steps within ``chunk`` (chunks come in order; each call resumes where the last one ended)."""
        if not chunk:
            return []
        lo = bisect.bisect_left(self.saved, chunk[0], self._pos)
        hi = bisect.bisect_right(self.saved, chunk[-1], lo)
        self._pos = hi
        return self.saved[lo:hi]

    def step_bytes(self) -> int:
        """About how many bytes one step of this tensor's raw value takes (8 when not known)."""
        if not self.reads_values or not self.saved:
            return 0
        shape = getattr(self.tensor, "shape", None)
        try:
            size = int(np.prod(shape(self.saved[0]))) if callable(shape) else 1
        except Exception:
            size = 1
        return 8 * max(1, size)


_PROBE = 8
"""Steps probed for the first one a worker saved (a worker that saved none of them is read value by value)."""

_CHUNK_BYTES = 64 << 20
"""Steps of one tensor are stacked and reduced together in chunks of about this many bytes."""


def reduce_series(
    values: Mapping[int, np.ndarray], keys: Iterable[ReductionKey]
) -> dict[int, dict[ReductionKey, float]]:
    """Compute reductions of a tensor at every step, stacking same-shaped steps into one array per chunk.

    The results equal :func:`~trainspect.reductions.reduce` step by step.

    Example:
        >>> reduce_series({0: np.array([1.0, 3.0]), 1: np.array([2.0, 2.0])}, [("max", False)])
        {0: {('max', False): 3.0}, 1: {('max', False): 2.0}}
    """
    keys = list(keys)
    out: dict[int, dict[ReductionKey, float]] = {step: {} for step in values}
    groups: dict[tuple[tuple[int, ...], str], list[int]] = {}
    for step, value in values.items():
        if value.dtype.kind in "fiub" and value.size:
            groups.setdefault((value.shape, value.dtype.str), []).append(step)
        else:
            out[step] = {key: reduce(value, *key) for key in keys}
    for group in groups.values():
        per_chunk = max(1, _CHUNK_BYTES // max(1, values[group[0]].nbytes))
        for i in range(0, len(group), per_chunk):
            chunk = group[i : i + per_chunk]
            rows = np.stack([values[s] for s in chunk]).reshape(len(chunk), -1)
            for key in keys:
                for step, red in zip(chunk, reduce_rows(rows, *key).tolist(), strict=True):
                    out[step][key] = red
    return out


def _collections(trial: TrialView) -> dict[str, Any]:
    try:
        return dict(trial.collections())
    except Exception:
        return {}


def build_step(
    step: int,
    info: tuple[ModeKeys, int, float],
    worker: str,
    roles: Mapping[str, str],
    data: Mapping[str, Mapping[int, TensorRecord]],
    others: tuple[Mapping[str, TensorRecord], ...] = (),
) -> StepData:
    """Assemble one rule's StepData at one step from fetched series."""
    return StepAssembler(roles, data).at(step, info, worker, others)


class StepAssembler:
    """Builds one rule's StepData step after step from fetched series (the role lookups are done once).

    Args:
        roles: the rule's role of each selected tensor name.
        data: the fetched series, ``{name: {step: record}}``.
    """

    def __init__(self, roles: Mapping[str, str], data: Mapping[str, Mapping[int, TensorRecord]]) -> None:
        by_role: dict[str, list[Mapping[int, TensorRecord]]] = {}
        for name, role in roles.items():
            series = data.get(name)
            if series:
                by_role.setdefault(role, []).append(series)
        self._by_role = list(by_role.items())

    def at(
        self,
        step: int,
        info: tuple[ModeKeys, int, float],
        worker: str,
        others: tuple[Mapping[str, TensorRecord], ...] = (),
    ) -> StepData:
        """Return the StepData of ``step``."""
        grouped: dict[str, tuple[TensorRecord, ...]] = {}
        for role, series_list in self._by_role:
            if len(series_list) == 1:
                rec = series_list[0].get(step)
                if rec is not None:
                    grouped[role] = (rec,)
                continue
            recs = tuple(rec for rec in (series.get(step) for series in series_list) if rec is not None)
            if recs:
                grouped[role] = recs
        mode, mode_step, wall = info
        return StepData.make(step, mode, mode_step, wall, worker, grouped, others)

    def columns(
        self,
        chunk: list[int],
        infos: Sequence[tuple[ModeKeys, int, float]],
        worker: str,
        made: dict[int, RoleColumn | None] | None = None,
    ) -> Columns | None:
        """The chunk as whole columns, when every role holds at most one tensor, a scalar read raw; else None.

        ``made``: the columns already built from the same fetched series (by id), shared between assemblers.
        """
        roles: dict[str, RoleColumn] = {}
        made = {} if made is None else made
        for role, series_list in self._by_role:
            if len(series_list) != 1:
                return None
            series = series_list[0]
            if not series:
                continue
            if id(series) not in made:
                made[id(series)] = scalar_column(series, chunk)
            column = made[id(series)]
            if column is None:
                return None
            roles[role] = column
        n = len(chunk)
        table = getattr(infos, "codes", None)
        if table is not None:  # a StepTable (trainspect.rules.column_feed): its arrays as they are
            steps: Any = infos
            return Columns(
                steps.steps,
                steps.modes(),
                steps.mode_steps,
                steps.walls,
                worker,
                roles,
                lambda i: self.at(chunk[i], infos[i], worker),
                _codes=table,
            )
        return Columns(
            np.fromiter(chunk, dtype=np.int64, count=n),
            [info[0] for info in infos],
            np.fromiter((info[1] for info in infos), dtype=np.int64, count=n),
            np.fromiter((info[2] for info in infos), dtype=np.float64, count=n),
            worker,
            roles,
            lambda i: self.at(chunk[i], infos[i], worker),
        )
