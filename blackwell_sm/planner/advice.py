"""Advice for a plan that does not fit or misses its deadline: each single change that would
make it possible (a lever, a shorter sequence, more instances), checked with the model and
given with its cost in time (`explain.py` calls it)."""

from __future__ import annotations

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.alternatives import differs
from blackwell_sm.planner.cp_choice import cp_advice
from blackwell_sm.planner.levers import (
    fewer_micro_batches_advice,
    offload_advice,
)
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.notes import Note, advice
from blackwell_sm.planner.precision import (
    LOW_PRECISIONS,
)
from blackwell_sm.planner.search import (
    Context,
    Evaluation,
    Pins,
    fits_somewhere,
    min_memory,
    precisions_for,
    usable_bytes,
)
from blackwell_sm.planner.units import hours_text, usd_text


def advice_for(
    ctx: Context, count: int, pins: Pins, best: Evaluation, allowed: list[int]
) -> list[Note]:
    """What single change would make it fit, each checked with the model."""
    out: list[Note] = []
    limit = usable_bytes(ctx.instance) / GIB
    precs = precisions_for(ctx, pins)
    # More instances: a pinned shard degree stays, the replica count grows with the GPUs.
    scaled = pins._replace(replicate_degree=None) if pins.shard_degree else pins
    for n in allowed:
        if n > count and fits_somewhere(ctx, n, scaled):
            lean_n = min_memory(ctx, n, scaled, precs)
            took = "" if lean_n is None else f" ({_time_of(lean_n)} in its leanest configuration)"
            out.append(
                advice(
                    "fit_instances",
                    f"use {n} instances (compute.instance_count: {n}) — it fits there{took}",
                )
            )
            break
    else:
        if count < allowed[-1]:
            out.append(
                advice(
                    "fit_none_with_pins",
                    f"no instance count up to {allowed[-1]} fits with these pins",
                )
            )
    of_usable = f"of the usable {limit:.1f}"
    if best.cand.activation_checkpointing != "full":
        e = min_memory(ctx, count, pins._replace(activation_checkpointing="full"), precs)
        if e is not None and e.fits:
            out.append(
                advice(
                    "fit_full_checkpointing",
                    f"activation_checkpointing: full fits ({e.memory_gib:.1f} GiB {of_usable})",
                )
            )
    fit_cp = cp_advice(ctx, count, pins, best, precs)
    if fit_cp:
        out.append(fit_cp)
    s = ctx.seq_len // 2
    while s >= 256:
        e = min_memory(ctx._replace(seq_len=s), count, pins, precs)
        if e is not None and e.fits:
            out.append(
                advice(
                    "fit_seq_len",
                    f"seq_len: {s} fits ({e.memory_gib:.1f} GiB {of_usable}; {_time_of(e)} "
                    "for the same tokens in its leanest configuration)",
                )
            )
            break
        s //= 2
    for p in LOW_PRECISIONS:
        if p in precs and pins.precision is None:
            continue  # already considered
        if ctx.instance.gpu.supports(p) and p != best.cand.precision:
            e = min_memory(ctx, count, pins._replace(precision=p), (p,))
            if e is not None and e.fits:
                out.append(
                    advice(
                        "fit_precision", f"precision: {p} fits ({e.memory_gib:.1f} GiB {of_usable})"
                    )
                )
                break
    for lever in (
        offload_advice(ctx, best),
        fewer_micro_batches_advice(ctx, count, pins, best, precs),
    ):
        if lever is not None:
            out.append(lever)
    if pins.micro_batch_size not in (None, 1):
        e = min_memory(ctx, count, pins._replace(micro_batch_size=1, grad_accum_steps=None), precs)
        if e is not None and e.fits:
            out.append(
                advice(
                    "fit_micro_batch",
                    f"micro_batch_size: 1 fits ({e.memory_gib:.1f} GiB {of_usable})",
                )
            )
    if not out:
        out.append(
            advice(
                "fit_combine",
                "no single change fits; combine more instances with full checkpointing",
            )
        )
    return out


def near_miss_advice(evals: list[Evaluation], best: Evaluation, ctx: Context) -> list[Note]:
    """For the fastest layout at least NEAR_MISS_SPEEDUP faster than `best` that misses the
    usable limit by at most NEAR_MISS_MEMORY: what would make it fit."""
    usable = usable_bytes(ctx.instance)
    near = [
        e
        for e in evals
        if not e.fits
        and e.hours <= best.hours * (1.0 - C.NEAR_MISS_SPEEDUP)
        and e.mem.total <= usable * (1.0 + C.NEAR_MISS_MEMORY)
    ]
    if not near or not best.fits:
        return []
    e = min(near, key=lambda x: x.hours)
    over = (e.mem.total - usable) / GIB
    faster = 1.0 - e.hours / best.hours
    frag = e.mem.overhead - e.mem.runtime
    ways = [
        f"activations or logits {over:.1f} GiB smaller (a shorter seq_len, or a smaller "
        "vocabulary head)",
        f"allocator fragmentation below the modelled {frag / GIB:.1f} GiB "
        "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)",
    ]
    return [
        advice(
            "near_miss",
            f"{', '.join(differs(e, best))} would be {faster:.0%} faster but needs "
            f"{e.memory_gib:.1f} GiB, {over:.1f} GiB over the usable {usable / GIB:.1f} GiB; it "
            f"would fit with {' or '.join(ways)}",
        )
    ]


def memory_relief(evals: list[Evaluation], best: Evaluation, ctx: Context) -> str | None:
    """The fastest fitting configuration below 90% of the device memory (for the >90% warning)."""
    cap = 0.9 * ctx.instance.gpu.memory_gib * GIB
    lower = [e for e in evals if e.fits and e.mem.total <= cap]
    if not lower:
        return None
    e = min(lower, key=lambda x: x.hours)
    slower = e.hours / best.hours - 1.0
    return (
        f"--set {' --set '.join(differs(e, best))} lowers it to {e.memory_gib:.1f} GiB "
        f"({slower:+.1%} time)"
    )


def _time_of(e: Evaluation) -> str:
    """An advice's cost in time: the hours (and cost) of the configuration it checked."""
    cost = "" if e.cost_usd is None else f", {usd_text(e.cost_usd)}"
    return f"{hours_text(e.hours)}{cost}"
