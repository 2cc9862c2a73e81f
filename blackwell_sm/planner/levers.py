"""Memory levers beyond sharding for a plan that does not fit, each with its cost in time: the
state offloaded to host memory (`planner/offload.py`) and fewer micro-batches per step (the
gradients kept across accumulation go; the global batch shrinks). Part of the explain step's
advice (`advice.advice_for`); each is checked with the model."""

from __future__ import annotations

from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.notes import Note, advice
from blackwell_sm.planner.offload import describe, offload, offloadable
from blackwell_sm.planner.search import Context, Evaluation, Pins, min_memory, usable_bytes
from blackwell_sm.planner.units import hours_text


def offload_advice(ctx: Context, best: Evaluation) -> Note | None:
    """The plan's own configuration with its state in host memory, when that fits (offload is
    searched unless pinned: this is the advice when it is pinned off)."""
    if not offloadable(ctx.instance) or best.cand.offload:
        return None
    c = best.cand
    o = offload(
        ctx.model,
        best.mem,
        ctx.instance,
        shard_degree=c.shard_degree,
        grad_accum=c.grad_accum_steps,
    )
    if not o.fits_host or o.gpu_bytes > usable_bytes(ctx.instance):
        return None
    hours = best.hours * (1.0 + o.added_s / best.time.step_s)
    return advice(
        "fit_offload",
        f"training.pins.offload: true fits: {describe(o, best.time.step_s)}; "
        f"{hours_text(hours)} in all instead of {hours_text(best.hours)}",
    )


def fewer_micro_batches_advice(
    ctx: Context, count: int, pins: Pins, best: Evaluation, precisions: tuple[str, ...]
) -> Note | None:
    """One micro-batch per step (a smaller global batch): no gradients kept across them."""
    c = best.cand
    if c.grad_accum_steps == 1 or pins.grad_accum_steps is not None:
        return None
    seqs = c.micro_batch_size * c.data_parallel
    e = min_memory(
        ctx._replace(global_batch_seqs=seqs),
        count,
        pins._replace(micro_batch_size=c.micro_batch_size, grad_accum_steps=1),
        precisions,
    )
    if e is None or not e.fits:
        return None
    usable = usable_bytes(ctx.instance) / GIB
    return advice(
        "fit_fewer_micro_batches",
        f"training.global_batch_seqs: {seqs} (one micro-batch per step, no gradients kept "
        f"across micro-batches) fits ({e.memory_gib:.1f} GiB of the usable {usable:.1f}); "
        f"{hours_text(e.hours)} for the same tokens instead of {hours_text(best.hours)}, with "
        f"{ctx.global_batch_seqs // seqs}x smaller batches (optimization changes)",
    )


def offload_reason(evals: list[Evaluation], best: Evaluation, ctx: Context, pins: Pins) -> Note:
    """Why the state is (or is not) in host memory, with the figures the planner used."""
    from blackwell_sm.planner.alternatives import differs, why_not
    from blackwell_sm.planner.notes import reason
    from blackwell_sm.planner.search import offload_of

    c = best.cand
    if pins.offload is not None:
        return reason("offload", f"offload {str(c.offload).lower()} (pinned)")
    usable = usable_bytes(ctx.instance) / GIB
    if not c.offload:
        return reason("offload", "offload false: the state fits on the GPUs, no PCIe round trips")
    o = offload_of(ctx, c, best.mem)
    assert o is not None
    kept = [e for e in evals if not e.cand.offload and e.cand.precision == c.precision]
    fit = [e for e in kept if e.fits]
    if not fit:
        least = min(kept, key=lambda e: e.mem.total, default=None)
        without = (
            f"without it the least memory is {least.memory_gib:.1f} GiB "
            f"({', '.join(differs(least, best)) or 'same knobs'}) of the usable {usable:.1f}"
            if least
            else "nothing was weighed without it"
        )
        return reason("offload", f"offload true: {without}; {describe(o, best.time.step_s)}")
    fast = min(fit, key=lambda e: e.hours)
    return reason(
        "offload",
        f"offload true: faster than the fastest plan without it ({', '.join(differs(fast, best))}"
        f": {why_not(fast, best, usable)}); {describe(o, best.time.step_s)}",
    )
