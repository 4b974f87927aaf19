"""Inline SVG pieces of the notebook views: panels, bars, heat cells, lanes and lines, every text escaped.

Everything is drawn here as plain SVG (no script, no network), so a saved notebook shows its charts offline; hover
titles (``<title>``) give the exact values.
"""

from __future__ import annotations

import html
from collections.abc import Sequence

import numpy as np

__all__ = ["esc", "text", "panel", "bars", "heat_cells", "lanes", "polyline", "empty", "wrap", "colour", "axis_ticks"]

COLOURS = ("#3b6fb6", "#e0803a", "#4c9a5b", "#c2453d", "#7d5ba6", "#8c6d3f", "#d26aa6", "#6f7f8f", "#b4a22b")
STYLE = (
    ".trainspect-nb{font:12px -apple-system,Segoe UI,Helvetica,Arial,sans-serif;color:#222}"
    ".trainspect-nb h4{margin:8px 0 4px;font-size:13px}"
    ".trainspect-nb .ts-note{color:#555;margin:2px 0 6px}"
    ".trainspect-nb .ts-grid{display:flex;flex-wrap:wrap;gap:6px}"
    ".trainspect-nb table{border-collapse:collapse;margin-top:6px}"
    ".trainspect-nb td,.trainspect-nb th{border:1px solid #ddd;padding:3px 6px;text-align:left;vertical-align:top}"
    ".trainspect-nb .ts-empty{color:#666;font-style:italic;padding:8px 0}"
)


def esc(text: object) -> str:
    """``text`` escaped for HTML and SVG (quotes included)."""
    return html.escape(str(text), quote=True)


def colour(i: int) -> str:
    """The ``i``-th colour of the views' palette (cycled)."""
    return COLOURS[i % len(COLOURS)]


def wrap(view: str, title: str, body: str, note: str = "") -> str:
    """One view's HTML: a ``div.trainspect-nb`` holding its style, title, note and body."""
    head = f"<h4>{esc(title)}</h4>" + (f'<div class="ts-note">{esc(note)}</div>' if note else "")
    return f'<div class="trainspect-nb" data-view="{esc(view)}"><style>{STYLE}</style>{head}{body}</div>'


def empty(message: str) -> str:
    """The empty state: a message in place of the charts."""
    return f'<div class="ts-empty" data-empty="1">{esc(message)}</div>'


def panel(width: int, height: int, body: str, label: str) -> str:
    """An ``<svg>`` of ``width`` x ``height`` pixels, its accessible label ``label``."""
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" role="img" aria-label="{esc(label)}">{body}</svg>'
    )


def text(x: float, y: float, value: object, anchor: str = "start", size: int = 11, extra: str = "") -> str:
    """One escaped ``<text>``."""
    return (
        f'<text x="{x:.1f}" y="{y:.1f}" font-size="{size}" text-anchor="{anchor}" fill="#333"{extra}>'
        f"{esc(value)}</text>"
    )


def axis_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]``.

    Example:
        >>> axis_ticks(0, 100)
        [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
    """
    if not np.isfinite(lo) or not np.isfinite(hi) or hi <= lo:
        return [float(lo)] if np.isfinite(lo) else []
    raw = (hi - lo) / max(count, 1)
    mag = 10 ** np.floor(np.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=10 * mag)
    first = np.ceil(lo / step - 1e-9) * step
    return [round(float(v), 10) + 0.0 for v in np.arange(first, hi + step * 1e-6, step)]  # + 0.0: no "-0"


def _fmt(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def bars(
    edges: Sequence[float],
    counts: Sequence[int],
    title: str,
    x_label: str,
    fill: str = COLOURS[0],
    size: tuple[int, int] = (260, 170),
) -> str:
    """A histogram panel: one bar per bin (hover: the bin and its count), x ticks, the y maximum."""
    w, h = size
    left, right, top, bottom = 34, 8, 18, 30
    pw, ph = w - left - right, h - top - bottom
    lo, hi = float(edges[0]), float(edges[-1])
    span = (hi - lo) or 1.0
    peak = max(max(counts, default=0), 1)
    parts = [text(left, 12, title, size=11, extra=' font-weight="600"')]
    for i, c in enumerate(counts):
        x0 = left + (float(edges[i]) - lo) / span * pw
        x1 = left + (float(edges[i + 1]) - lo) / span * pw
        bh = c / peak * ph
        tip = esc(f"{_fmt(float(edges[i]))}-{_fmt(float(edges[i + 1]))}: {c}")
        parts.append(
            f'<rect class="ts-bar" x="{x0:.1f}" y="{top + ph - bh:.1f}" width="{max(x1 - x0 - 0.5, 0.5):.1f}" '
            f'height="{bh:.1f}" fill="{fill}"><title>{tip}</title></rect>'
        )
    parts.append(f'<line x1="{left}" y1="{top + ph}" x2="{left + pw}" y2="{top + ph}" stroke="#888"/>')
    for t in axis_ticks(lo, hi, 4):
        x = left + (t - lo) / span * pw
        parts.append(text(x, top + ph + 12, _fmt(t), "middle", 10))
    parts.append(text(left - 3, top + 8, peak, "end", 10))
    parts.append(text(left - 3, top + ph, 0, "end", 10))
    parts.append(text(left + pw / 2, h - 4, x_label, "middle", 10))
    return panel(w, h, "".join(parts), title)


def _heat_colour(v: float) -> str:
    """White (0 %) to dark blue (100 %)."""
    f = min(max(v / 100.0, 0.0), 1.0)
    r, g, b = (int(round(a + (z - a) * f)) for a, z in ((247, 8), (251, 48), (255, 107)))
    return f"rgb({r},{g},{b})"


def heat_cells(
    rows: Sequence[str],
    values: Sequence[Sequence[float | None]],
    times: Sequence[str],
    marks: Sequence[int],
    title: str,
    width: int = 900,
) -> str:
    """A heatmap panel: one row of cells per name, one column per time bucket, orange lines at ``marks`` columns."""
    cols = max((len(r) for r in values), default=0)
    left, top, cell_h = 60, 20, 12
    pw = width - left - 10
    cw = pw / max(cols, 1)
    h = top + cell_h * len(rows) + 30
    parts = [text(left, 13, title, size=11, extra=' font-weight="600"')]
    for r, (name, row) in enumerate(zip(rows, values, strict=True)):
        y = top + r * cell_h
        parts.append(text(left - 4, y + cell_h - 2, name, "end", 10))
        for c, v in enumerate(row):
            if v is None:
                continue
            tip = esc(f"{name} {times[c] if c < len(times) else c}: {v:.1f} %")
            parts.append(
                f'<rect class="ts-cell" x="{left + c * cw:.2f}" y="{y}" width="{cw + 0.3:.2f}" '
                f'height="{cell_h}" fill="{_heat_colour(v)}"><title>{tip}</title></rect>'
            )
    bottom = top + cell_h * len(rows)
    for m in marks:
        x = left + m * cw
        parts.append(
            f'<line class="ts-step" x1="{x:.2f}" y1="{top}" x2="{x:.2f}" y2="{bottom}" stroke="#ff6f00" '
            'stroke-width="1" opacity="0.8"/>'
        )
    for c in sorted({0, cols // 2, cols - 1}) if cols else []:
        anchor = "end" if c == cols - 1 and c else "start"
        x = left + (c + 1) * cw if anchor == "end" else left + c * cw
        parts.append(text(x, bottom + 12, times[c] if c < len(times) else "", anchor, 10))
    return panel(width, h, "".join(parts), title)


def merge_intervals(x0: np.ndarray, x1: np.ndarray, gap: float = 0.5) -> list[tuple[float, float]]:
    """Pixel intervals merged where they overlap or lie closer than ``gap``: at most about one per pixel."""
    if not len(x0):
        return []
    order = np.argsort(x0, kind="stable")
    out: list[list[float]] = []
    for a, b in zip(x0[order].tolist(), x1[order].tolist(), strict=True):
        if out and a <= out[-1][1] + gap:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def lanes(
    lanes_: Sequence[tuple[str, np.ndarray, np.ndarray, str]], t0: float, t1: float, title: str, width: int = 900
) -> str:
    """A timeline panel: one lane per ``(label, starts, ends, colour)``, intervals merged at pixel resolution."""
    left, top, lane_h = 150, 20, 16
    pw = width - left - 10
    span = (t1 - t0) or 1.0
    h = top + lane_h * len(lanes_) + 30
    parts = [text(left, 13, title, size=11, extra=' font-weight="600"')]
    for i, (label, starts, ends, fill) in enumerate(lanes_):
        y = top + i * lane_h
        parts.append(text(left - 4, y + lane_h - 4, label, "end", 10))
        px0 = left + (np.asarray(starts, dtype=np.float64) - t0) / span * pw
        px1 = left + (np.asarray(ends, dtype=np.float64) - t0) / span * pw
        for a, b in merge_intervals(px0, px1):
            parts.append(
                f'<rect class="ts-span" x="{a:.1f}" y="{y + 2}" width="{max(b - a, 0.6):.1f}" '
                f'height="{lane_h - 4}" fill="{fill}"/>'
            )
    parts.append(_time_axis(left, pw, top + lane_h * len(lanes_), t1 - t0))
    return panel(width, h, "".join(parts), title)


def _time_axis(left: float, pw: float, y: float, span: float) -> str:
    ticks = axis_ticks(0.0, span, 6)
    out = [f'<line x1="{left}" y1="{y}" x2="{left + pw}" y2="{y}" stroke="#888"/>']
    for t in ticks:
        x = left + t / (span or 1.0) * pw
        out.append(text(x, y + 12, f"{_fmt(t)} s", "middle", 10))
    return "".join(out)


def polyline(
    series: Sequence[tuple[str, np.ndarray, np.ndarray]],
    t0: float,
    t1: float,
    title: str,
    width: int = 900,
    y_max: float = 100.0,
) -> str:
    """A line panel on the timeline's axis: ``(label, times, values)`` series from 0 to ``y_max``, with a legend."""
    left, top, ph = 150, 20, 90
    pw = width - left - 10
    span = (t1 - t0) or 1.0
    parts = [text(left, 13, title, size=11, extra=' font-weight="600"')]
    for i, (label, ts, vs) in enumerate(series):
        ok = np.isfinite(vs)
        xs = left + (np.asarray(ts, dtype=np.float64)[ok] - t0) / span * pw
        ys = top + ph - np.clip(np.asarray(vs, dtype=np.float64)[ok], 0, y_max) / y_max * ph
        pts = " ".join(f"{x:.1f},{y:.1f}" for x, y in zip(xs, ys, strict=True))
        if pts:
            parts.append(
                f'<polyline class="ts-line" points="{pts}" fill="none" stroke="{colour(i)}" '
                f'stroke-width="1.3"><title>{esc(label)}</title></polyline>'
            )
        parts.append(f'<rect x="{left - 140}" y="{top + 4 + i * 14}" width="10" height="3" fill="{colour(i)}"/>')
        parts.append(text(left - 126, top + 9 + i * 14, label, "start", 10))
    parts.append(text(left - 3, top + 8, f"{y_max:g}", "end", 10))
    parts.append(_time_axis(left, pw, top + ph, t1 - t0))
    return panel(width, top + ph + 30, "".join(parts), title)
