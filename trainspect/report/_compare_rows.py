"""The rows of ``trainspect compare``: which rows rank, who may win, noise, losses at matched steps, the verdicts.

A row ranks only when both runs may be ranked (:class:`Fairness`): a run whose loss diverged or that a StopTraining
action stopped ranks nothing against anything; a run whose rules found issues that the other run's did not is never
ranked better (issues both runs share, e.g. low GPU utilisation on both, leave them alike; the verdict row shows
them). The rows
derived from the throughput (steps/s, samples/s, time and cost per 1,000 steps and per epoch) and the projected
saving share one noise estimate: when the 95 % interval of their ratio includes 1, they say "within noise" and
no run wins.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainspect.report.summary import RunSummary

__all__ = [
    "Fairness",
    "fairness",
    "metric_rows",
    "loss_rows",
    "health_rows",
    "saving_row",
    "change_text",
    "ratio_saving",
    "Z_95",
    "STEP_RATIO",
]

Z_95 = 2.09  # Student's t, 97.5 % quantile for 19 degrees of freedom (batch means of 20 blocks)
STEP_RATIO = 3.0  # runs whose step counts differ by more than this factor are unlike runs
_UTIL = frozenset({"gpu_mean", "gpu_p95", "cpu_mean", "cpu_p95"})


@dataclass(frozen=True)
class Fairness:
    """Which run may win a row, the unlike-runs sentence ("" when alike), and the noise of the throughput ratio.

    ``noise`` is the half-width of the 95 % interval of ``ln(B / A)`` of a throughput-derived figure (None when a
    run has no per-step timings).
    """

    may_win_a: bool
    may_win_b: bool
    note: str = ""
    noise: float | None = None

    @property
    def broken(self) -> bool:
        """Neither run may win: the speed figures are not a fair comparison."""
        return not self.may_win_a and not self.may_win_b

    def may_win(self, who: str) -> bool:
        """Whether run ``"a"`` or ``"b"`` may be marked better."""
        return self.may_win_a if who == "a" else self.may_win_b


def _problem(label: str, s: RunSummary) -> str:
    """``"A diverged (loss NaN from step 52) and was stopped by StopTraining at step 52 (rule X)"`` ("" when not)."""
    parts = [f"diverged ({s.diverged})"] if s.diverged else []
    parts += [f"was {text}" for text in s.stops]
    return f"{label} {' and '.join(parts)}" if parts else ""


def _extra_issues(s: RunSummary, other: RunSummary) -> list[str]:
    """The rules that found issues in ``s`` but not in ``other`` (issues both runs share do not make them unlike)."""
    return [r for r in s.issues if r not in other.issues]


def _note(a: RunSummary, b: RunSummary) -> str:
    """The unlike-runs sentence: what is wrong with which run, and what that means for the ranking."""
    clauses = []
    for label, s, other in (("A", a, b), ("B", b, a)):
        problem = _problem(label, s)
        if problem:
            clauses.append(f"{problem}: its speed figures are not a fair comparison")
        extra = _extra_issues(s, other)
        if extra:
            clauses.append(f"{len(extra)} of {label}'s rules found issues ({', '.join(extra)})")
    if a.steps and b.steps and max(a.steps, b.steps) > STEP_RATIO * min(a.steps, b.steps):
        more, less = ("B", "A") if b.steps > a.steps else ("A", "B")
        ratio = max(a.steps, b.steps) / min(a.steps, b.steps)
        clauses.append(f"{more} did {ratio:.3g}× {less}'s steps ({a.steps:,} vs {b.steps:,}): compared per step")
    if not clauses:
        return ""
    if a.broken or b.broken:
        clauses.append("no row ranks the runs")
    elif _extra_issues(a, b) or _extra_issues(b, a):
        clauses.append("a run with issues the other has not is ranked better in no row")
    return "unlike runs: " + "; ".join(clauses)


def _noise(a: RunSummary, b: RunSummary) -> float | None:
    if a.cycle_rel_se is None or b.cycle_rel_se is None:
        return None
    return Z_95 * math.hypot(a.cycle_rel_se, b.cycle_rel_se)


def fairness(a: RunSummary, b: RunSummary) -> Fairness:
    r"""Who may win: nobody beside a diverged or stopped run; never a run whose rules found issues the other's did not.

    Example:
        >>> f = fairness(RunSummary("a", issues=("InputBottleneck",)), RunSummary("b"))
        >>> f.may_win_a, f.may_win_b
        (False, True)
        >>> print(f.note.replace("; ", ";\n"))
        unlike runs: 1 of A's rules found issues (InputBottleneck);
        a run with issues the other has not is ranked better in no row
    """
    broken = a.broken or b.broken
    win_a, win_b = not broken and not _extra_issues(a, b), not broken and not _extra_issues(b, a)
    return Fairness(win_a, win_b, _note(a, b), _noise(a, b))


# --- formatting ------------------------------------------------------------------------------------------------
def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        if not math.isfinite(v):
            return ("NaN" if v != v else "Inf" if v > 0 else "-Inf") + " !"
        return f"{v:,.{digits}g}" if abs(v) < 1000 else f"{v:,.0f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def _numbers(*values: Any) -> bool:
    return all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def change_text(va: Any, vb: Any) -> str:
    """B against A: ``"+16.4%"``; beyond ±100 % a ratio, ``"5.66×"``; ``"non-finite"`` beside NaN/Inf.

    Example:
        >>> change_text(53, 300), change_text(10.0, 8.0), change_text(1.0, float("nan"))
        ('5.66×', '-20.0%', 'non-finite')
    """
    if any(isinstance(v, float) and not math.isfinite(v) for v in (va, vb)):
        return "non-finite"
    if not _numbers(va, vb) or not va:
        return ""
    pct = 100.0 * (vb - va) / abs(va)
    if abs(pct) > 100 and va > 0 and vb > 0:
        return f"{vb / va:.3g}×"
    return f"{pct:+.1f}%"


def _interval(log_ratio: float, noise: float) -> tuple[float, float]:
    """The 95 % interval of ``B / A - 1`` in percent."""
    return 100.0 * math.expm1(log_ratio - noise), 100.0 * math.expm1(log_ratio + noise)


def _ci_text(lo: float, hi: float) -> str:
    return f"95% CI {lo:+.1f}% to {hi:+.1f}%"


def row(key: str, label: str, a: str, b: str, change: str, winner: str | None) -> dict[str, Any]:
    """One row: ``winner`` ``"a"``/``"b"``/None, ``better`` True when B wins, False when A wins, else None."""
    better = None if winner is None else winner == "b"
    return {"key": key, "label": label, "a": a, "b": b, "change": change, "winner": winner, "better": better}


# --- the figures ---------------------------------------------------------------------------------------------
def _cpu_direction(a: RunSummary, b: RunSummary) -> str:
    """Busier CPUs win only on CPU-only runs of two healthy runs; with GPUs the CPU is not the work."""
    if a.gpu_p95 is not None or b.gpu_p95 is not None or not (a.healthy and b.healthy):
        return ""
    return "high"


@dataclass(frozen=True)
class _Row:
    key: str
    label: str
    better: str | Callable[[RunSummary, RunSummary], str]  # "low", "high" or "" (no winner: totals)
    digits: int = 4
    noisy: bool = False  # derived from the throughput: shares its noise


_CPU = "(%; over 100 = more than one core)"
_ROWS: tuple[_Row, ...] = (
    _Row("steps_per_s", "throughput (steps/s)", "high", noisy=True),
    _Row("samples_per_s", "throughput (samples/s)", "high", noisy=True),
    _Row("time_per_1k_steps_s", "time per 1,000 steps (s)", "low", noisy=True),
    _Row("cost_per_1k_steps", "cost per 1,000 steps ($)", "low", noisy=True),
    _Row("time_per_epoch_s", "time per epoch (s)", "low", noisy=True),
    _Row("cost_per_epoch", "cost per epoch ($)", "low", noisy=True),
    _Row("startup_s", "start-up: job start to first step (s)", ""),
    _Row("step_p50_s", "step time p50 (s, compute, no input wait)", "low"),
    _Row("step_p95_s", "step time p95 (s, compute, no input wait)", "low"),
    _Row("step_p99_s", "step time p99 (s, compute, no input wait)", "low"),
    _Row("cycle_p50_s", "step cycle p50 (s, input wait included)", "low"),
    _Row("cycle_p95_s", "step cycle p95 (s, input wait included)", "low"),
    _Row("dataloader_wait_percent", "data-loader wait (% of loop)", "low", 3),
    _Row("gpu_mean", "GPU utilisation mean (%)", "high", 3),
    _Row("gpu_p95", "GPU utilisation p95 (%)", "high", 3),
    _Row("cpu_mean", f"CPU utilisation mean {_CPU}", _cpu_direction, 3),
    _Row("cpu_p95", f"CPU utilisation p95 {_CPU}", _cpu_direction, 3),
    _Row("io_wait_p95", "I/O wait p95 (%)", "low", 3),
    _Row("memory_p95", "CPU memory p95 (%)", ""),
    _Row("steps", "steps done", ""),
    _Row("duration_s", "job duration (s, start-up included)", ""),
    _Row("instances", "instances (nodes)", ""),
    _Row("workers", "workers", ""),
    _Row("batch_size", "batch size (per worker)", ""),
    _Row("price_per_hour", "price per instance-hour ($)", "", 6),
    _Row("cost", "cost of the run ($)", ""),
)


def _within_noise(va: Any, vb: Any, noise: float | None) -> tuple[bool, str]:
    """(within noise, the interval's text) of a throughput-derived row ("" when the noise is unknown)."""
    if noise is None or not _numbers(va, vb) or va <= 0 or vb <= 0:
        return False, ""
    log_ratio = math.log(vb / va)
    return abs(log_ratio) <= noise, _ci_text(*_interval(log_ratio, noise))


def _best(direction: str, va: Any, vb: Any) -> str | None:
    if not direction or not _numbers(va, vb) or va == vb:
        return None
    return ("b" if vb < va else "a") if direction == "low" else ("b" if vb > va else "a")


def _metric_row(spec: _Row, a: RunSummary, b: RunSummary, fair: Fairness) -> dict[str, Any] | None:
    va, vb = getattr(a, spec.key), getattr(b, spec.key)
    if va is None and vb is None:
        return None
    direction = spec.better(a, b) if callable(spec.better) else spec.better
    if spec.key in _UTIL and _numbers(va, vb) and max(va, vb) > 100.0:
        direction = ""  # more than one core's worth: busier is not better
    change, winner = change_text(va, vb), _best(direction, va, vb)
    if spec.noisy:
        noisy, ci = _within_noise(va, vb, fair.noise)
        change = f"{change}, within noise ({ci})" if noisy else (f"{change} ({ci})" if ci else change)
        winner = None if noisy else winner
    if winner is not None and not fair.may_win(winner):
        winner = None
    return row(spec.key, spec.label, _fmt(va, spec.digits), _fmt(vb, spec.digits), change, winner)


def metric_rows(a: RunSummary, b: RunSummary, fair: Fairness) -> list[dict[str, Any]]:
    """The figures' rows (rows unknown for both runs left out)."""
    rows = (_metric_row(spec, a, b, fair) for spec in _ROWS)
    return [r for r in rows if r is not None]


# --- verdicts, reports, losses -------------------------------------------------------------------------------
def health_rows(a: RunSummary, b: RunSummary) -> list[dict[str, Any]]:
    """The verdict of each run (diverged, stopped, rules with issues), the rule count, the reports."""
    rows = [row("verdict", "verdict", a.verdict(), b.verdict(), "", None)]
    if a.rules_line or b.rules_line:
        rows.append(row("rules", "rules", a.rules_line or "–", b.rules_line or "–", "", None))
    rows.append(row("report", "report", a.report or "–", b.report or "–", "", None))
    return rows


def _matched_steps(a: RunSummary, b: RunSummary) -> list[int]:
    """First, 25 %, 50 %, 75 % and last of the TRAIN steps both runs saved a loss at."""
    common = sorted(set(a.train_loss) & set(b.train_loss))
    if not common:
        return []
    n = len(common)
    return list(dict.fromkeys(common[i] for i in (0, n // 4, n // 2, (3 * n) // 4, n - 1)))


def _final(s: RunSummary) -> str:
    final = s.final_loss
    return "–" if final is None else f"{_fmt(final[1])} (step {final[0]:,})"


def loss_rows(a: RunSummary, b: RunSummary) -> list[dict[str, Any]]:
    """The training loss at matched TRAIN steps, each run's final loss and its last evaluation's (NaN/Inf: ``!``)."""
    if not a.train_loss and not b.train_loss and a.eval_loss is None and b.eval_loss is None:
        return []
    name = a.loss_name or b.loss_name or "loss"
    name = "" if name == "loss" else f" ({name})"
    rows = [
        row(
            f"loss@{s}",
            f"training loss{name} at TRAIN step {s:,}",
            _fmt(a.train_loss[s]),
            _fmt(b.train_loss[s]),
            change_text(a.train_loss[s], b.train_loss[s]),
            None,
        )
        for s in _matched_steps(a, b)
    ]
    fa, fb = a.final_loss, b.final_loss
    change = change_text(fa[1], fb[1]) if fa and fb else ""
    rows.append(row("final_loss", f"final training loss{name}", _final(a), _final(b), change, None))
    if a.eval_loss is not None or b.eval_loss is not None:
        rows.append(
            row(
                "eval_loss",
                "eval loss (last evaluation's mean)",
                _fmt(a.eval_loss),
                _fmt(b.eval_loss),
                change_text(a.eval_loss, b.eval_loss),
                None,
            )
        )
    return rows


# --- the projected saving ------------------------------------------------------------------------------------
def ratio_saving(before: float | None, after: float | None) -> float | None:
    if before is None or after is None or before <= 0:
        return None
    return 100.0 * (before - after) / before


def _saving(before: RunSummary, after: RunSummary) -> tuple[float | None, str, tuple[Any, Any]]:
    """(saving %, "cost"/"time", the two per-unit figures it compares): cost per 1,000 steps, else time."""
    if not before.steps and not after.steps:
        return ratio_saving(before.cost, after.cost), "cost", (before.cost, after.cost)
    pair = (before.cost_per_1k_steps, after.cost_per_1k_steps)
    saving = ratio_saving(*pair)
    if saving is not None:
        return saving, "cost", pair
    pair = (before.time_per_1k_steps_s, after.time_per_1k_steps_s)
    return ratio_saving(*pair), "time", pair


def _saving_text(saving: float, pair: tuple[Any, Any]) -> str:
    """``"83%"``; beyond -100 % the ratio: ``"none: B needs 4.5× A's"``."""
    if saving >= -100.0:
        return f"{saving:.0f}%"
    return f"none: B needs {pair[1] / pair[0]:.3g}× A's"


def saving_row(before: RunSummary, after: RunSummary, fair: Fairness) -> dict[str, Any]:
    """The projected saving for the same work, from the same per-unit figures as the rows above (noise included)."""
    per_work = bool(before.steps or after.steps)
    saving, what, pair = _saving(before, after)
    label = f"projected {what} saving for the same work" if per_work else "saving (whole runs)"
    if before.broken or after.broken:
        return row("saving", label, "", "not offered: unlike runs (see the first line)", "", None)
    if saving is None:
        return row("saving", label, "", "–", "", None)
    noisy, ci = _within_noise(pair[0], pair[1], fair.noise if per_work else None)
    if ci:  # the interval of the saving, from that of the ratio
        lo, hi = _interval(math.log(pair[1] / pair[0]), fair.noise or 0.0)
        ci = f"95% CI {-hi:.0f}% to {-lo:.0f}%"
    winner = None if noisy or not saving else ("b" if saving > 0 else "a")
    winner = winner if winner is None or fair.may_win(winner) else None
    text = f"within noise ({saving:.0f}%)" if noisy else _saving_text(saving, pair)
    return row("saving", label, "", text, ci, winner)
