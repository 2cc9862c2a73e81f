"""Context parallelism in the explain step: why the chosen cp_degree ("seq 131072 needs cp 2:
..." / "runs faster with cp 8"), and, with CP pinned off, which degree would make the plan fit.
"""

from __future__ import annotations

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.alternatives import differs, why_not
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.notes import Note, advice, reason
from blackwell_sm.planner.search import (
    Context,
    Evaluation,
    Pins,
    cp_degrees,
    min_memory,
    usable_bytes,
)


def cp_reason(evals: list[Evaluation], best: Evaluation, ctx: Context, pins: Pins) -> Note | None:
    """Why this context-parallel degree (only when more than one was weighed, or pinned)."""
    c, s = best.cand, ctx.seq_len
    if pins.cp_degree is not None:
        return reason("cp_degree", f"cp_degree {c.cp_degree} (pinned)")
    evals = [e for e in evals if e.cand.precision == c.precision]  # precision is chosen apart
    if len({e.cand.cp_degree for e in evals}) < 2:
        return None
    usable = usable_bytes(ctx.instance) / GIB
    plain = [e for e in evals if e.cand.cp_degree == 1]
    if c.cp_degree == 1:
        others = [e for e in evals if e.cand.cp_degree > 1 and e.fits]
        if not others:
            return reason(
                "cp_degree",
                "cp_degree 1 (no context parallelism: the whole sequence fits on each GPU)",
            )
        o = min(others, key=lambda e: e.hours)
        return reason(
            "cp_degree",
            f"cp_degree 1 (no context parallelism): cp {o.cand.cp_degree} "
            f"{why_not(o, best, usable)}",
        )
    per_gpu = f"each GPU holds {s // c.cp_degree:,} tokens of every sequence"
    if not any(e.fits for e in plain):
        least = min(plain, key=lambda e: e.mem.total)
        return reason(
            "cp_degree",
            f"seq {s} needs cp {c.cp_degree}: without context parallelism the least memory is "
            f"{least.memory_gib:.1f} GiB ({', '.join(differs(least, best))}) of the usable "
            f"{usable:.1f}; with cp {c.cp_degree} {per_gpu} and {best.memory_gib:.1f} GiB",
        )
    fast = min((e for e in plain if e.fits), key=lambda e: e.hours)
    return reason(
        "cp_degree",
        f"seq {s} runs faster with cp {c.cp_degree}: {1 - best.hours / fast.hours:.0%} faster "
        f"than the fastest layout without it ({', '.join(differs(fast, best))}); {per_gpu}, and "
        f"the K/V gathers and other exposed collectives take {best.time.exposed_comm_s:.2f} s "
        f"of the {best.time.step_s:.2f} s step",
    )


def cp_advice(
    ctx: Context, count: int, pins: Pins, best: Evaluation, precisions: tuple[str, ...]
) -> Note | None:
    """With context parallelism pinned off (cp_degree 1): the least degree that would fit."""
    if best.cand.cp_degree != 1 or pins.cp_degree is None:
        return None
    free = pins._replace(cp_degree=None)
    long_ctx = ctx._replace(seq_len=max(ctx.seq_len, C.CP_MIN_SEQ))  # every degree, any seq
    for cp in cp_degrees(long_ctx, best.cand.shard_degree, free)[1:]:
        if ctx.seq_len % (2 * cp):
            continue
        e = min_memory(ctx, count, pins._replace(cp_degree=cp), precisions)
        if e is not None and e.fits:
            usable = usable_bytes(ctx.instance) / GIB
            return advice(
                "fit_cp_degree",
                f"cp_degree: {cp} fits ({e.memory_gib:.1f} GiB of the usable {usable:.1f})",
            )
    return None
