"""The plan's words: why each choice was made (`reasons`), what single change would make an
infeasible plan fit (`advice`), and the runner-up per decision (`alternatives`).

Every name shown to the user is a plan config name (the names `--set` takes).
"""

from __future__ import annotations

from typing import Any

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.counts import fits_or_none, fits_somewhere, precisions_for
from blackwell_sm.planner.plan import Alternative, PlanConfig
from blackwell_sm.planner.search import Candidate, Context, Evaluation, Pins, min_memory


def to_config(c: Candidate, seq_len: int) -> PlanConfig:
    return PlanConfig(
        shard_degree=c.shard_degree,
        replicate_degree=c.replicate_degree,
        micro_batch_size=c.micro_batch_size,
        grad_accum_steps=c.grad_accum_steps,
        seq_len=seq_len,
        precision=c.precision,
        activation_checkpointing=c.activation_checkpointing,
        compile=c.compile,
        reshard_after_forward=c.reshard_after_forward,
    )


def advice_for(
    ctx: Context, count: int, pins: Pins, best: Evaluation, allowed: list[int]
) -> list[str]:
    """What single change would make it fit, each checked with the model."""
    out = []
    limit = ctx.instance.gpu.memory_gib
    precs = precisions_for(ctx, pins)
    # More instances: a pinned shard degree stays, the replica count grows with the GPUs.
    scaled = pins._replace(replicate_degree=None) if pins.shard_degree else pins
    for n in allowed:
        if n > count and fits_somewhere(ctx, n, scaled):
            out.append(f"use {n} instances (compute.instance_count: {n}) — it fits there")
            break
    else:
        if count < allowed[-1]:
            out.append(f"no instance count up to {allowed[-1]} fits with these pins")
    if best.cand.activation_checkpointing != "full":
        e = min_memory(ctx, count, pins._replace(activation_checkpointing="full"), precs)
        if fits_or_none(e):
            out.append(
                f"activation_checkpointing: full fits ({e.memory_gib:.1f} GiB of {limit:.1f})"
            )
    s = ctx.seq_len // 2
    while s >= 256:
        e = min_memory(ctx._replace(seq_len=s), count, pins, precs)
        if fits_or_none(e):
            out.append(f"seq_len: {s} fits ({e.memory_gib:.1f} GiB of {limit:.1f})")
            break
        s //= 2
    for p in ("fp8", "mxfp8"):
        if p in precs and pins.precision is None:
            continue  # already considered
        if ctx.instance.gpu.supports(p) and p != best.cand.precision:
            e = min_memory(ctx, count, pins._replace(precision=p), (p,))
            if fits_or_none(e):
                out.append(f"precision: {p} fits ({e.memory_gib:.1f} GiB of {limit:.1f})")
                break
    if pins.micro_batch_size not in (None, 1):
        e = min_memory(ctx, count, pins._replace(micro_batch_size=1, grad_accum_steps=None), precs)
        if fits_or_none(e):
            out.append(f"micro_batch_size: 1 fits ({e.memory_gib:.1f} GiB of {limit:.1f})")
    if not out:
        out.append("no single change fits; combine more instances with full checkpointing")
    return out


def _why_not(e: Evaluation, best: Evaluation, limit_gib: float) -> str:
    if not e.fits:
        return f"does not fit: needs {e.memory_gib:.1f} GiB of {limit_gib:.1f} GiB"
    if not best.fits:
        return "fits, but only by changing a pinned knob"
    slower = e.hours / best.hours - 1.0
    if slower > C.TIE_FRACTION:
        return f"{slower:.0%} slower ({e.hours:.1f} h vs {best.hours:.1f} h)"
    if slower < -C.TIE_FRACTION:
        return f"{-slower:.0%} faster, but below the gain low precision must bring"
    return "as fast (within 1%) but less simple"


def _differs(e: Evaluation, best: Evaluation) -> str:
    a, b = e.cand, best.cand
    parts = []
    for name in Candidate._fields:
        if getattr(a, name) != getattr(b, name):
            parts.append(f"{name}={getattr(a, name)}")
    return ", ".join(parts)


def _rank(e: Evaluation) -> tuple[int, float]:
    """Higher is a better runner-up: fitting and fast, else needing the least memory."""
    return (1, -e.hours) if e.fits else (0, -e.mem.total)


def alternatives(
    evals: list[Evaluation], best: Evaluation, limit_gib: float, seq_len: int
) -> list[Alternative]:
    """The best candidate that differs in each knob, i.e. the runner-up per decision."""
    picks: dict[Candidate, Evaluation] = {}
    for knob in (
        "activation_checkpointing",
        "precision",
        "shard_degree",
        "reshard_after_forward",
        "compile",
        "micro_batch_size",
    ):
        ref = getattr(best.cand, knob)
        others = [e for e in evals if getattr(e.cand, knob) != ref]
        by_value: dict[Any, Evaluation] = {}
        for e in others:
            v = getattr(e.cand, knob)
            cur = by_value.get(v)
            if cur is None or _rank(e) > _rank(cur):
                by_value[v] = e
        for e in by_value.values():
            picks.setdefault(e.cand, e)
    ranked = sorted(picks.values(), key=lambda e: (not e.fits, e.hours))[:6]
    return [
        Alternative(
            config=to_config(e.cand, seq_len),
            instance_count=e.cand.instance_count,
            feasible=e.fits,
            memory_total_gib=round(e.memory_gib, 2),
            tokens_per_s_per_gpu=round(e.tokens_per_s_per_gpu, 1),
            hours=round(e.hours, 3),
            why_not=f"{_differs(e, best)}: {_why_not(e, best, limit_gib)}",
        )
        for e in ranked
    ]


def reasons_for(e: Evaluation, ctx: Context, pins: Pins) -> list[str]:
    c, gpn = e.cand, ctx.instance.gpus_per_instance
    out = []
    layout = (
        "pinned" if pins.shard_degree or pins.replicate_degree else
        "fastest fitting layout"
    )  # fmt: skip
    if c.replicate_degree == 1:
        where = "inside the node" if c.shard_degree <= gpn else f"across {c.instance_count} nodes"
        out.append(f"shard_degree {c.shard_degree} (full shard {where}, {layout})")
    else:
        links = (
            "all-gathers stay on NVLink, only the gradient all-reduce crosses EFA"
            if c.shard_degree <= gpn
            else "shard groups span nodes; replicas all-reduce gradients over EFA"
        )
        out.append(
            f"HSDP: shard {c.shard_degree} x replicate {c.replicate_degree} ({layout}): {links}"
        )
    mb_src = "pinned" if pins.micro_batch_size else "fastest that fits"
    out.append(
        f"micro_batch_size {c.micro_batch_size} ({mb_src}) x grad_accum_steps {c.grad_accum_steps} x "
        f"{c.world} GPUs = {c.global_batch_seqs} sequences per step"
    )
    ac = "pinned" if pins.activation_checkpointing else {
        "none": "no checkpointing needed: fastest",
        "selective": "selective: saves matmul and attention outputs, recomputes the cheap ops",
        "selective-op": "selective-op: saves every other matmul and the attention, recomputes "
        "the rest (torchtitan's per-op policy)",
        "full": "full: only block inputs kept; recompute costs ~1/3 more block FLOPs",
    }[c.activation_checkpointing]  # fmt: skip
    out.append(f"activation_checkpointing {c.activation_checkpointing} ({ac})")
    if c.shard_degree > 1:
        out.append(
            "reshard_after_forward "
            + ("true (frees gathered params after forward; re-gathers in backward)"
               if c.reshard_after_forward else
               "false (keeps gathered params to backward: saves one all-gather per micro-batch)")
        )  # fmt: skip
    out.append(
        f"compile {str(c.compile).lower()}" + (" (pinned)" if pins.compile is not None else "")
    )
    return out
