"""One verdict from the verdicts of several workers: the job-wide status, the worker it names, its message.

Offline evaluation judges each worker of a multi-worker run with a tally of its own (its own state: a loss window,
the previous weights) and combines the per-worker verdicts with :func:`combine_workers`. The verdict record combines
the live verdicts that several ranks write into one run directory the same way (:func:`merge_current`), so that no
rank's verdict hides another's.

The combined verdict found issues when any worker did; it names the worker of the first trigger: the lowest step,
then the worker whose first trigger involved the most tensors (a NaN that starts in one rank's loss reaches every
rank's gradients through the all-reduce of the same step; the rank where it shows in more tensors is where it
began), then the lowest rank.
"""

from __future__ import annotations

import math
import re
import sys
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from trainspect.rules.tally import issue_message, mode_text
from trainspect.rules.verdict import Status, Verdict

__all__ = ["combine_workers", "merge_current", "rank_key", "by_rank"]

_ORDER = (Status.ISSUES_FOUND, Status.ERROR, Status.IN_PROGRESS, Status.NO_ISSUES_FOUND, Status.NO_DATA)
_PART_KEYS = ("worker", "first_detail", "first_trigger_count", "per_worker", "step", "workers_judged")
_LISTED = 6
"""Workers listed by name in a combined message; the others are counted."""


def rank_key(worker: str) -> tuple[int, str]:
    """Sort key of a worker name: its rank number, then the name (``worker_10`` after ``worker_2``).

    Example:
        >>> sorted(["worker_10", "worker_2", "worker_0"], key=rank_key)
        ['worker_0', 'worker_2', 'worker_10']
    """
    found = re.search(r"(\d+)$", worker)
    return (int(found.group(1)) if found else sys.maxsize, worker)


def by_rank(workers: Iterable[str]) -> list[str]:
    """The distinct worker names in rank order."""
    return sorted(set(workers), key=rank_key)


def _worker(part: Verdict) -> str:
    return str(part.details.get("worker") or (part.workers[0] if part.workers else ""))


def _judged(part: Verdict) -> bool:
    """Whether the worker recorded the rule's inputs (a part that never saw them is left out)."""
    seen = part.details.get("inputs_seen")
    return part.status in (Status.ISSUES_FOUND, Status.ERROR) or part.datapoints > 0 or bool(seen)


def _entries(part: Verdict) -> dict[str, dict[str, Any]]:
    """Each worker's account in a part: the part itself, or the accounts of a part that is already combined."""
    nested = part.details.get("per_worker")
    if isinstance(nested, dict) and nested:
        return {str(w): dict(e) for w, e in nested.items() if isinstance(e, dict)}
    entry = {"status": part.status.value, "datapoints": part.datapoints, "triggers": part.triggers}
    if part.first_trigger_step is not None:
        entry["first_trigger_step"] = part.first_trigger_step
    return {_worker(part) or "?": entry}


def _named(parts: Sequence[Verdict], status: Status) -> Verdict:
    """The part whose worker the combined verdict names."""
    if status is Status.ISSUES_FOUND:
        issues = [p for p in parts if p.status is Status.ISSUES_FOUND]

        def key(p: Verdict) -> tuple[int, int, tuple[int, str]]:
            count = p.details.get("first_trigger_count")
            first = p.first_trigger_step if p.first_trigger_step is not None else sys.maxsize
            return first, -(count if isinstance(count, int) else len(p.tensors)), rank_key(_worker(p))

        return min(issues, key=key)
    return next(p for p in parts if p.status is status)


def combine_workers(parts: Sequence[Verdict], counts: tuple[int, int] | None = None) -> Verdict:
    """Combine one rule's verdicts of several workers into the job-wide verdict.

    Args:
        parts: the verdicts, one per worker (or already combined ones), in any order.
        counts: ``(datapoints, triggers)`` counted once per step across the workers, when the caller knows them
            (offline evaluation); otherwise the largest of the parts' counts.

    Returns:
        The only part itself when there is one; else a verdict whose status is the most severe of the workers'
        (IssuesFound, Error, InProgress, NoIssuesFound, NoData), that names the worker of the first trigger in its
        message and in ``details["worker"]`` and ``details["step"]``, lists every worker's account in
        ``details["per_worker"]``, and carries the named worker's chart series. Workers that never saw the rule's
        inputs are left out (``details["workers_without_inputs"]``).

    Example:
        >>> a = Verdict("R", Status.NO_ISSUES_FOUND, datapoints=5, workers=("worker_0",))
        >>> b = Verdict("R", Status.ISSUES_FOUND, datapoints=5, triggers=1, first_trigger_step=3, workers=("worker_1",))
        >>> v = combine_workers([a, b])
        >>> v.status.value, v.details["worker"], v.details["step"], v.workers
        ('IssuesFound', 'worker_1', 3, ('worker_0', 'worker_1'))
    """
    if len(parts) == 1:
        return parts[0]
    ordered = sorted(parts, key=lambda p: rank_key(_worker(p)))
    judged = [p for p in ordered if _judged(p)]
    if not judged:  # no worker recorded the inputs: the first one's NoData says what to record
        return replace(ordered[0], workers=())
    status = min((p.status for p in judged), key=_ORDER.index)
    named = _named(judged, status)
    entries: dict[str, dict[str, Any]] = {}
    for part in sorted(judged, key=lambda p: p.evaluated_at or 0.0):  # a later account of a worker wins
        entries.update(_entries(part))
    datapoints, triggers = (
        counts if counts is not None else (max(p.datapoints for p in judged), max(p.triggers for p in judged))
    )
    combined = replace(
        named,
        status=status,
        datapoints=datapoints,
        triggers=triggers,
        workers=tuple(by_rank(w for p in judged for w in (p.workers or (_worker(p),)) if w)),
        start_step=_extreme((p.start_step for p in judged), min),
        end_step=_extreme((p.end_step for p in judged), max),
        source=max(judged, key=lambda p: p.evaluated_at or 0.0).source,
        evaluated_at=_extreme((p.evaluated_at for p in judged), max),
    )
    combined = _with_triggers(combined, [p for p in judged if p.status is Status.ISSUES_FOUND])
    kept = {id(p) for p in judged}
    details = _details(named, judged, entries, [p for p in ordered if id(p) not in kept])
    return replace(combined, message=_message(combined, named, entries), details=details)


def _extreme(values: Iterable[Any], pick: Any) -> Any:
    found = [v for v in values if v is not None]
    return pick(found) if found else None


def _with_triggers(verdict: Verdict, issues: list[Verdict]) -> Verdict:
    """The trigger steps, times, tensors and modes of every worker that triggered."""
    if not issues:
        return verdict
    first = min(issues, key=lambda p: p.first_trigger_step if p.first_trigger_step is not None else sys.maxsize)
    last = max(issues, key=lambda p: p.last_trigger_step if p.last_trigger_step is not None else -1)
    tensors = dict.fromkeys(verdict.tensors)
    modes: dict[str, None] = {}
    for part in issues:
        tensors.update(dict.fromkeys(part.tensors))
        modes.update(dict.fromkeys(m for m in (part.mode or "").split("+") if m))
    return replace(
        verdict,
        first_trigger_step=first.first_trigger_step,
        first_trigger_time=first.first_trigger_time,
        last_trigger_step=last.last_trigger_step,
        last_trigger_time=last.last_trigger_time,
        tensors=tuple(tensors),
        mode="+".join(modes) or verdict.mode,
    )


def _details(
    named: Verdict, judged: list[Verdict], entries: dict[str, dict[str, Any]], without: list[Verdict]
) -> dict[str, Any]:
    details = {k: v for k, v in named.details.items() if k not in _PART_KEYS}
    details["inputs_seen"] = sum(int(p.details.get("inputs_seen") or 0) for p in judged)
    details["worker"] = _worker(named)
    if named.status is Status.ISSUES_FOUND:
        details["step"] = named.first_trigger_step
        for key in ("first_detail", "first_trigger_count"):
            if key in named.details:
                details[key] = named.details[key]
    details["workers_judged"] = len(entries)
    details["per_worker"] = {w: entries[w] for w in by_rank(entries)}
    if without:
        details["workers_without_inputs"] = by_rank(w for p in without for w in (p.workers or (_worker(p),)) if w)
    return details


def _message(combined: Verdict, named: Verdict, entries: dict[str, dict[str, Any]]) -> str:
    worker, total = _worker(named), len(entries)
    status = combined.status
    if status is Status.ISSUES_FOUND:
        detail = named.details.get("first_detail")
        mode_step = named.details.get("first_trigger_mode_step")
        mode = mode_text(str(named.details.get("first_trigger_mode")), int(mode_step)) if mode_step is not None else ""
        text = (
            issue_message(
                combined.rule,
                combined.triggers,
                combined.datapoints,
                f" in {worker}",
                named.first_trigger_step,
                mode,
                str(detail),
            )
            if detail is not None
            else f"{named.message} [in {worker}]"
        )
        return f"{text}; {_summary(entries, total, worker)}"
    if status in (Status.NO_ISSUES_FOUND, Status.IN_PROGRESS) and combined.datapoints:
        last = named.details.get("last_detail", "")
        return f"no trigger in {combined.datapoints} evaluated steps of {total} workers; last ({worker}): {last}"
    same = sum(1 for e in entries.values() if e.get("status") == status.value)
    if same == total:
        return f"{named.message} [{status.value} in all {total} workers]"
    return f"{named.message} [{worker}; {status.value} in {same} of {total} workers]"


def _summary(entries: dict[str, dict[str, Any]], total: int, first: str) -> str:
    """``2 of 4 workers triggered: worker_3 from step 12 (3 of 20 steps), worker_0 from step 13 (1 of 20 steps)``.

    The named worker ``first`` comes first, then the others by their first trigger step and rank.
    """
    hit = [(w, e) for w, e in entries.items() if e.get("triggers")]
    hit.sort(key=lambda item: (item[0] != first, item[1].get("first_trigger_step", sys.maxsize), rank_key(item[0])))
    named = [
        f"{w} from step {e.get('first_trigger_step')} ({e.get('triggers')} of {e.get('datapoints')} steps)"
        for w, e in hit[:_LISTED]
    ]
    more = f" and {len(hit) - _LISTED} more" if len(hit) > _LISTED else ""
    return f"{len(hit)} of {total} workers triggered: {', '.join(named)}{more}"


def merge_current(
    current: dict[str, Any] | None, parts: list[dict[str, Any]] | None, new: Verdict
) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
    """A rule's current verdict in the record after one more verdict, and the parts it combines.

    A verdict replaces the earlier ones whose workers it covers (its ``workers``; a verdict naming no worker covers
    them all), alone or with other later verdicts; the verdicts of other workers stay and are combined with it
    (:func:`combine_workers`). So the live verdicts of several ranks add up, and an offline evaluation of every worker
    replaces them all. A placeholder (no ``evaluated_at``) never replaces an evaluated verdict, and a verdict older
    than the one of the same workers already there changes nothing.

    Args:
        current: the rule's current verdict in the record (a dict, with its chart series), or None.
        parts: the verdicts it combines (dicts without series), or None when it is one verdict.
        new: the new verdict.

    Returns:
        The new current verdict (a dict) and its parts (None when it is one verdict).
    """
    if new.evaluated_at is None:
        if current is None or current.get("evaluated_at") is None:
            return new.to_dict(), None
        return current, parts
    known = list(parts) if parts else ([current] if current is not None else [])
    fresh = new.to_dict()
    if any(_scope(p) == _scope(fresh) and _at(p) > new.evaluated_at for p in known):
        return current or known[0], parts  # a later verdict of the same workers is already there
    everything = [*known, fresh]
    kept = [p for p in known if not _superseded(p, everything)]
    if not kept:
        return fresh, None
    all_parts = [Verdict.from_dict(p) for p in kept] + [new]
    combined = combine_workers(all_parts)
    series = new.series if _worker(combined) == _worker(new) else _series_of(current, _worker(combined))
    out = replace(combined, series=series).to_dict()
    return out, [_compact(p) for p in all_parts]


def _scope(part: dict[str, Any]) -> frozenset[str]:
    return frozenset(part.get("workers") or ())


def _at(part: dict[str, Any]) -> float:
    at = part.get("evaluated_at")
    return float(at) if isinstance(at, (int, float)) else -math.inf


def _superseded(part: dict[str, Any], parts: list[dict[str, Any]]) -> bool:
    """Whether later verdicts among ``parts`` cover every worker of ``part`` (one naming no worker covers all)."""
    later = [p for p in parts if p is not part and _at(p) >= _at(part)]
    if any(not _scope(p) for p in later):
        return True
    covered: set[str] = set()
    for p in later:
        covered |= _scope(p)
    return _scope(part) <= covered


def _series_of(current: dict[str, Any] | None, worker: str) -> Any:
    """The chart series of the current verdict when it shows ``worker`` (else none)."""
    if current is None:
        return ()
    verdict = Verdict.from_dict(current)
    return verdict.series if _worker(verdict) == worker else ()


def _compact(v: Verdict) -> dict[str, Any]:
    data = v.to_dict()
    data.pop("series", None)
    return data
