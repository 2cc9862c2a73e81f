"""The search over instance counts (and over precisions when `precision: auto`).

`search.search_count` finds the best configuration on one count; this module picks the count:
the fewest instances that fit, or that meet the deadline.
"""

from __future__ import annotations

from blackwell_sm.planner.precision import choose_precision
from blackwell_sm.planner.search import (
    PRECISIONS,
    Context,
    Evaluation,
    Pins,
    SearchResult,
    min_memory,
    search_count,
)


def search_precisions(ctx: Context, count: int, pins: Pins) -> tuple[SearchResult, list[str]]:
    """Search one instance count, choosing the precision when it is `auto`."""
    if pins.precision:
        return search_count(ctx, count, pins, (pins.precision,)), []
    gpu = ctx.instance.gpu
    results = {p: search_count(ctx, count, pins, (p,)) for p in PRECISIONS if gpu.supports(p)}
    precision, reasons = choose_precision(ctx.model, gpu, results)
    chosen = results[precision]
    if not chosen.feasible:  # nothing fits: report the least-memory candidate of any precision
        best = min((r.best for r in results.values()), key=lambda e: (e.mem.total, e.hours))
        chosen = SearchResult(best, False, chosen.evaluated)
    evaluated = [e for r in results.values() for e in r.evaluated]
    return SearchResult(chosen.best, chosen.feasible, evaluated, chosen.note), reasons


def lean(pins: Pins) -> Pins:
    """Pins for the quickest memory check: the leanest value of every free knob."""
    return pins._replace(
        activation_checkpointing=pins.activation_checkpointing or "full",
        compile=False if pins.compile is None else pins.compile,
        reshard_after_forward=True
        if pins.reshard_after_forward is None
        else pins.reshard_after_forward,
    )


def precisions_for(ctx: Context, pins: Pins) -> tuple[str, ...]:
    if pins.precision:
        return (pins.precision,)
    return tuple(p for p in PRECISIONS if ctx.instance.gpu.supports(p))


def fits_somewhere(ctx: Context, count: int, pins: Pins) -> bool:
    e = min_memory(ctx, count, lean(pins), precisions_for(ctx, pins))
    return e is not None and e.fits


def fits_or_none(e: Evaluation | None) -> bool:
    return e is not None and e.fits


def choose_count(
    ctx: Context, pins: Pins, allowed: list[int], deadline: float | None
) -> tuple[int, SearchResult, list[str], list[str]]:
    """instance_count auto: the fewest instances that fit, or that meet the deadline."""
    reasons: list[str] = []
    warnings: list[str] = []
    fastest: tuple[int, SearchResult, list[str]] | None = None
    i = 0
    while i < len(allowed):
        n = allowed[i]
        if not fits_somewhere(ctx, n, pins):
            i += 1
            continue
        res, prec_reasons = search_precisions(ctx, n, pins)
        if not res.feasible:
            i += 1
            continue
        if deadline is None:
            reasons.append(f"instance_count auto: {n} is the fewest instances that fit")
            return n, res, prec_reasons, warnings + reasons
        if res.best.hours <= deadline:
            reasons.append(
                f"instance_count auto: {n} is the fewest instances that finish within the "
                f"deadline of {deadline:g} h ({res.best.hours:.1f} h)"
            )
            return n, res, prec_reasons, warnings + reasons
        if fastest is None or res.best.hours < fastest[1].best.hours:
            fastest = (n, res, prec_reasons)
        # Time falls roughly as 1/n: jump close to the count that would meet the deadline.
        target = n * res.best.hours / deadline * 0.9
        j = i + 1
        while j < len(allowed) - 1 and allowed[j] < target:
            j += 1
        i = j
    if fastest is not None:
        n, res, prec_reasons = fastest
        warnings.append(
            f"no instance count up to {allowed[-1]} meets the deadline of {deadline:g} h; "
            f"the fastest is {n} instances at {res.best.hours:.1f} h"
        )
        reasons.append(f"instance_count auto: {n} instances is the fastest found")
        return n, res, prec_reasons, warnings + reasons
    n = allowed[-1]
    res, prec_reasons = search_precisions(ctx, n, pins)
    return n, res, prec_reasons, [f"no instance count up to {n} fits; showing {n}"]
