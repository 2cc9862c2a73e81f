"""The plan's words: why each choice was made (`reasons`), what single change would make an
infeasible plan fit (`advice`), and the runner-up per decision (`alternatives`).

Every name shown to the user is a plan config name (the names `--set` takes).
"""

from __future__ import annotations

from typing import Any

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.counts import fits_or_none, fits_somewhere, precisions_for
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.plan import Alternative, PlanConfig
from blackwell_sm.planner.search import (
    Candidate,
    Context,
    Evaluation,
    Pins,
    cp_degrees,
    min_memory,
    pick,
    usable_bytes,
)

#: The knobs a row of alternatives[] can differ in, in the order its `set` flags list them.
KNOBS = tuple(f for f in Candidate._fields if f != "instance_count")


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
        cp_degree=c.cp_degree,
    )


def advice_for(
    ctx: Context, count: int, pins: Pins, best: Evaluation, allowed: list[int]
) -> list[str]:
    """What single change would make it fit, each checked with the model."""
    out = []
    limit = usable_bytes(ctx.instance) / GIB
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
                f"activation_checkpointing: full fits ({e.memory_gib:.1f} GiB of the usable {limit:.1f})"
            )
    if best.cand.cp_degree == 1 and pins.cp_degree is not None:  # CP pinned off: would it fit?
        for cp in cp_degrees(ctx._replace(seq_len=max(ctx.seq_len, C.CP_MIN_SEQ)),
                             best.cand.shard_degree, pins._replace(cp_degree=None))[1:]:  # fmt: skip
            if ctx.seq_len % (2 * cp):
                continue
            e = min_memory(ctx, count, pins._replace(cp_degree=cp), precs)
            if fits_or_none(e):
                out.append(
                    f"cp_degree: {cp} fits ({e.memory_gib:.1f} GiB of the usable {limit:.1f})"
                )
                break
    s = ctx.seq_len // 2
    while s >= 256:
        e = min_memory(ctx._replace(seq_len=s), count, pins, precs)
        if fits_or_none(e):
            out.append(f"seq_len: {s} fits ({e.memory_gib:.1f} GiB of the usable {limit:.1f})")
            break
        s //= 2
    for p in ("fp8", "mxfp8"):
        if p in precs and pins.precision is None:
            continue  # already considered
        if ctx.instance.gpu.supports(p) and p != best.cand.precision:
            e = min_memory(ctx, count, pins._replace(precision=p), (p,))
            if fits_or_none(e):
                out.append(
                    f"precision: {p} fits ({e.memory_gib:.1f} GiB of the usable {limit:.1f})"
                )
                break
    if pins.micro_batch_size not in (None, 1):
        e = min_memory(ctx, count, pins._replace(micro_batch_size=1, grad_accum_steps=None), precs)
        if fits_or_none(e):
            out.append(
                f"micro_batch_size: 1 fits ({e.memory_gib:.1f} GiB of the usable {limit:.1f})"
            )
    if not out:
        out.append("no single change fits; combine more instances with full checkpointing")
    return out


def does_not_fit(e: Evaluation, usable_gib: float) -> str:
    """The one wording of a memory miss: against the usable limit (capacity less headroom)."""
    return f"does not fit: needs {e.memory_gib:.1f} GiB of the usable {usable_gib:.1f} GiB"


def _why_not(e: Evaluation, best: Evaluation, usable_gib: float) -> str:
    if not e.fits:
        return does_not_fit(e, usable_gib)
    if not best.fits:
        return "fits, but only by changing a pinned knob"
    slower = e.hours / best.hours - 1.0
    if slower > C.TIE_FRACTION:
        return f"{slower:.0%} slower ({e.hours:.1f} h vs {best.hours:.1f} h)"
    if slower < -C.TIE_FRACTION:
        return f"{-slower:.0%} faster, but below the gain low precision must bring"
    if e.mem.total > best.mem.total * 1.001:
        return f"as fast (within {C.TIE_FRACTION:.0%}) but less free memory"
    return f"as fast (within {C.TIE_FRACTION:.0%}) but less simple"


def _flag(name: str, value: object) -> str:
    return f"{name}={str(value).lower() if isinstance(value, bool) else value}"


def _differs(e: Evaluation, best: Evaluation) -> list[str]:
    a, b = e.cand, best.cand
    return [_flag(n, getattr(a, n)) for n in KNOBS if getattr(a, n) != getattr(b, n)]


def _matches(c: Candidate, pins: dict[str, object]) -> bool:
    return all(getattr(c, k) == v for k, v in pins.items())


def select_flags(
    e: Evaluation, best: Evaluation, evals: list[Evaluation], pins: Pins, usable: float
) -> list[str]:
    """The `--set` flags that make `bsm plan` choose `e`: the knobs it differs in (and its
    precision when the spec leaves precision to the planner), checked by re-running the choice
    over the evaluated candidates; every knob when that does not single it out."""
    user = {k: v for k, v in pins._asdict().items() if v is not None}
    names = [n for n in KNOBS if getattr(e.cand, n) != getattr(best.cand, n)]
    if pins.precision is None and "precision" not in names:
        names.insert(0, "precision")
    chosen = {n: getattr(e.cand, n) for n in names}
    if e.fits:
        ok = [x for x in evals if x.fits and _matches(x.cand, user | chosen)]
        if ok and pick(ok, usable)[0].cand == e.cand:
            return [_flag(n, v) for n, v in chosen.items()]
    return [_flag(n, getattr(e.cand, n)) for n in KNOBS]


def _rank(e: Evaluation) -> tuple[int, float]:
    """Higher is a better runner-up: fitting and fast, else needing the least memory."""
    return (1, -e.hours) if e.fits else (0, -e.mem.total)


def alternatives(
    evals: list[Evaluation],
    best: Evaluation,
    ctx: Context,
    pins: Pins,
    *,
    count_auto: bool = False,
) -> list[Alternative]:
    """The best candidate that differs in each knob, i.e. the runner-up per decision."""
    picks: dict[Candidate, Evaluation] = {}
    for knob in (
        "activation_checkpointing",
        "precision",
        "cp_degree",
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
    usable = usable_bytes(ctx.instance)
    out = []
    for e in ranked:
        flags = select_flags(e, best, evals, pins, usable)
        if count_auto:
            flags.append(f"compute.instance_count={e.cand.instance_count}")
        out.append(
            Alternative(
                config=to_config(e.cand, ctx.seq_len),
                instance_count=e.cand.instance_count,
                feasible=e.fits,
                memory_total_gib=round(e.memory_gib, 2),
                tokens_per_s_per_gpu=round(e.tokens_per_s_per_gpu, 1),
                hours=round(e.hours, 3),
                why_not=f"{', '.join(_differs(e, best))}: {_why_not(e, best, usable / GIB)}",
                set=flags,
            )
        )
    return out


def near_miss_advice(evals: list[Evaluation], best: Evaluation, ctx: Context) -> list[str]:
    """For the fastest layout at least NEAR_MISS_SPEEDUP faster than `best` that misses the
    usable limit by at most NEAR_MISS_MEMORY: what would make it fit."""
    usable = usable_bytes(ctx.instance)
    near = [
        e for e in evals
        if not e.fits and e.hours <= best.hours * (1.0 - C.NEAR_MISS_SPEEDUP)
        and e.mem.total <= usable * (1.0 + C.NEAR_MISS_MEMORY)
    ]  # fmt: skip
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
        f"{', '.join(_differs(e, best))} would be {faster:.0%} faster but needs "
        f"{e.memory_gib:.1f} GiB, {over:.1f} GiB over the usable {usable / GIB:.1f} GiB; it "
        f"would fit with {' or '.join(ways)}"
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
        f"--set {' --set '.join(_differs(e, best))} lowers it to {e.memory_gib:.1f} GiB "
        f"({slower:+.1%} time)"
    )


def comm_bound(best: Evaluation, ctx: Context) -> str | None:
    """The communication-bound warning when exposed collectives exceed COMM_BOUND_FRACTION."""
    t = best.time
    share = t.exposed_comm_s / t.step_s
    if share <= C.COMM_BOUND_FRACTION:
        return None
    c = best.cand
    helps = []
    if c.grad_accum_steps > 1 or c.micro_batch_size == 1:
        helps.append("a larger micro_batch_size (more compute per gather)")
    if c.shard_degree > ctx.instance.gpus_per_instance:
        helps.append(
            f"HSDP (shard_degree={ctx.instance.gpus_per_instance}: all-gathers stay on NVLink)"
        )
    if c.reshard_after_forward:
        helps.append("reshard_after_forward=false (one all-gather fewer)")
    if c.precision == "bf16" and ctx.instance.gpu.supports("fp8"):
        helps.append("precision=fp8 (fp8 all-gathers move half the bytes)")
    helps.append("fewer instances with more steps each (if the deadline allows)")
    return (
        f"communication-bound: exposed collectives are {share:.0%} of the step "
        f"({t.exposed_comm_s:.2f} of {t.step_s:.2f} s); would help: {'; '.join(helps)}"
    )


def cp_reason(evals: list[Evaluation], best: Evaluation, ctx: Context, pins: Pins) -> str | None:
    """Why this context-parallel degree (only when more than one was weighed, or pinned)."""
    c, s = best.cand, ctx.seq_len
    if pins.cp_degree is not None:
        return f"cp_degree {c.cp_degree} (pinned)"
    evals = [e for e in evals if e.cand.precision == c.precision]  # precision is chosen apart
    if len({e.cand.cp_degree for e in evals}) < 2:
        return None
    usable = usable_bytes(ctx.instance) / GIB
    plain = [e for e in evals if e.cand.cp_degree == 1]
    if c.cp_degree == 1:
        others = [e for e in evals if e.cand.cp_degree > 1 and e.fits]
        if not others:
            return "cp_degree 1 (no context parallelism: the whole sequence fits on each GPU)"
        o = min(others, key=lambda e: e.hours)
        return f"cp_degree 1 (no context parallelism): cp {o.cand.cp_degree} {_why_not(o, best, usable)}"
    gathers = best.time.exposed_comm_s
    per_gpu = f"each GPU holds {s // c.cp_degree:,} tokens of every sequence"
    if not any(e.fits for e in plain):
        least = min(plain, key=lambda e: e.mem.total)
        return (
            f"seq {s} needs cp {c.cp_degree}: without context parallelism the least memory is "
            f"{least.memory_gib:.1f} GiB ({', '.join(_differs(least, best))}) of the usable "
            f"{usable:.1f}; with cp {c.cp_degree} {per_gpu} and {best.memory_gib:.1f} GiB"
        )
    fast = min((e for e in plain if e.fits), key=lambda e: e.hours)
    return (
        f"seq {s} runs faster with cp {c.cp_degree}: {1 - best.hours / fast.hours:.0%} faster than "
        f"the fastest layout without it ({', '.join(_differs(fast, best))}); {per_gpu}, and "
        f"the K/V gathers and other exposed collectives take {gathers:.2f} s of the "
        f"{best.time.step_s:.2f} s step"
    )


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
    }.get(c.activation_checkpointing, "fastest that fits")  # fmt: skip
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
