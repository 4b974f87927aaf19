"""Labels of physical quantities shown to users (messages, report tables and axes)."""

from __future__ import annotations

__all__ = ["duration"]


def duration(seconds: float) -> str:
    """A duration with 3 significant digits in the unit that reads best: ``850 µs``, ``12.5 ms``, ``1.25 s``.

    Example:
        >>> duration(0.00085), duration(0.0125), duration(0.9996), duration(1.5), duration(1500.0), duration(0.0)
        ('850 µs', '12.5 ms', '1 s', '1.5 s', '1,500 s', '0 s')
    """
    if seconds == 0:
        return "0 s"
    if seconds < 0.9995e-3:  # (what rounds to 1,000 µs reads 1 ms)
        return f"{seconds * 1e6:.3g} µs"
    if seconds < 0.9995:
        return f"{seconds * 1e3:.3g} ms"
    return f"{seconds:.3g} s" if seconds < 999.5 else f"{seconds:,.0f} s"
