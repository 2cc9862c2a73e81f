"""Quantities as people read them: hours (with days), step times, parameter counts, dollars.
One home for the planner's messages and the CLI's tables."""

from __future__ import annotations


def hours_text(hours: float) -> str:
    """Hours, with days when over 48 h; minutes or seconds when under 0.1 h."""
    if hours < 0.1:
        s = hours * 3600
        return f"{s / 60:.1f} min" if s >= 60 else f"{s:.2g} s"
    return f"{hours:,.1f} h" + (f" ({hours / 24:,.1f} days)" if hours > 48 else "")


def seconds_text(s: float) -> str:
    """A step time: seconds, or milliseconds under 0.1 s."""
    return f"{s:.3f} s" if s >= 0.1 else f"{s * 1e3:.3g} ms"


def count_text(n: float) -> str:
    """A parameter count in B, M or k: 8.03B, 131.4M, 131k."""
    for div, unit in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if n >= div:
            return f"{n / div:,.{2 if unit == 'B' else 1}f}{unit}"
    return f"{n:,.0f}"


def usd_text(x: float) -> str:
    """Dollars; under $100 with cents, under $1 in cents (a short run is not '$0')."""
    if x < 1:
        return f"{x * 100:.2g}¢"
    return f"${x:,.2f}" if x < 100 else f"${x:,.0f}"
