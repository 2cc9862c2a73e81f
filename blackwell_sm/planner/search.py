"""Candidates and their evaluation: the second step of the planner's pipeline (frame →
candidates and evaluate → pick → explain → assemble, `planner/pipeline.py`).

`candidates` enumerates the configurations one instance count allows under the pins; `evaluate`
predicts one (memory, step time, hours, cost). `table.Table` keeps the evaluations of one
problem. Nothing here chooses. The context and pins are the frame's (`frame.Context`, `Pins`,
re-exported here). Plain tuples inside; pydantic only for the final Plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any, NamedTuple, get_args

from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner import precision as precision_rules
from blackwell_sm.planner.batch import data_parallel_ranks, global_batch
from blackwell_sm.planner.frame import Context, Pins
from blackwell_sm.planner.lora import model_flops_per_token
from blackwell_sm.planner.memory import GIB, MemoryTerms, memory_terms
from blackwell_sm.planner.step_time import Comm, StepTime, step_time
from blackwell_sm.spec import Checkpointing

# Every activation-checkpointing mode the spec accepts is searched (a new mode in
# spec.training.Checkpointing joins the search, the alternatives and the round-trip test).
MODES: tuple[str, ...] = get_args(Checkpointing)
PRECISIONS = precision_rules.PRECISIONS


class Candidate(NamedTuple):
    """One configuration; the knobs carry the names of `PlanConfig` (and of `--set`)."""

    instance_count: int
    shard_degree: int
    replicate_degree: int
    micro_batch_size: int
    grad_accum_steps: int
    precision: str
    activation_checkpointing: str
    compile: bool
    reshard_after_forward: bool
    cp_degree: int = 1  # context parallelism: ranks of a shard group sharing each sequence
    offload: bool = False  # the sharded state in host memory (planner/offload.py)

    @property
    def world(self) -> int:
        return self.shard_degree * self.replicate_degree

    @property
    def data_parallel(self) -> int:
        """Ranks that read different sequences: the world over the context-parallel groups."""
        return data_parallel_ranks(self.world, self.cp_degree)

    @property
    def global_batch_seqs(self) -> int:
        return global_batch(self.micro_batch_size, self.grad_accum_steps, self.data_parallel)


class Evaluation(NamedTuple):
    cand: Candidate
    mem: MemoryTerms
    time: StepTime
    fits: bool
    steps: int
    hours: float
    tokens_per_s_per_gpu: float
    mfu: float
    price_per_hour: float | None = None  # all instances together

    @property
    def memory_gib(self) -> float:
        return self.mem.total / GIB

    @property
    def cost_usd(self) -> float | None:
        return None if self.price_per_hour is None else self.hours * self.price_per_hour


def limit_bytes(instance: InstanceType) -> float:
    return instance.gpu.memory_gib * GIB


def usable_bytes(instance: InstanceType) -> float:
    return limit_bytes(instance) * (1.0 - C.MEMORY_HEADROOM)


def fits(instance: InstanceType, mem: MemoryTerms) -> bool:
    return mem.total <= usable_bytes(instance)


def fits_candidate(ctx: Context, c: Candidate, mem: MemoryTerms) -> bool:
    """`mem` fits the GPU, and with offload the state fits the host (planner/offload.py)."""
    if not fits(ctx.instance, mem):
        return False
    if not c.offload:
        return True
    from blackwell_sm.planner.offload import fits_host

    return fits_host(ctx.model, ctx.instance, c.shard_degree)


def constants(ctx: Context) -> C.Constants:
    return ctx.constants or C.constants_for(ctx.instance.gpu.name)


def steps_for(ctx: Context, c: Candidate) -> int:
    """Optimizer steps of the run: the spec's, or its tokens over this candidate's batch."""
    if ctx.total_steps is not None:
        return ctx.total_steps
    return max(1, math.ceil((ctx.total_tokens or 0) / (c.global_batch_seqs * ctx.seq_len)))


def knobs(ctx: Context, c: Candidate) -> dict[str, Any]:
    """`c`'s knobs by the names the memory and step-time models take."""
    return {
        "shard_degree": c.shard_degree,
        "replicate_degree": c.replicate_degree,
        "micro_batch": c.micro_batch_size,
        "seq_len": ctx.seq_len,
        "precision": c.precision,
        "mode": c.activation_checkpointing,
        "reshard_after_forward": c.reshard_after_forward,
        "cp_degree": c.cp_degree,
    }


def offload_of(ctx: Context, c: Candidate, mem: MemoryTerms):
    """`c`'s offload figures (planner/offload.py), or None when it keeps its state on the GPU."""
    if not c.offload:
        return None
    from blackwell_sm.planner.offload import offload

    return offload(
        ctx.model, mem, ctx.instance, shard_degree=c.shard_degree, grad_accum=c.grad_accum_steps
    )


def memory_of(ctx: Context, c: Candidate) -> MemoryTerms:
    return memory_terms(
        ctx.model,
        **knobs(ctx, c),
        grad_accum=c.grad_accum_steps,
        kind=ctx.instance.gpu.kind,
        compiled_loss=ctx.compiled_loss,
        packed=ctx.packed,
        fragmentation=constants(ctx).fragmentation,
        loss_impl=ctx.loss_impl,
        offload=c.offload,
    )


def evaluate(
    ctx: Context,
    c: Candidate,
    *,
    mem: MemoryTerms | None = None,
    per_token: tuple[float, float] | None = None,
    comm: Comm | None = None,
) -> Evaluation:
    """Predict memory, step time, time and cost to train for one candidate (`mem`, `per_token`,
    `comm`: its memory terms, per-token compute and per-micro-batch communication, when the
    caller has them already)."""
    m, inst, k = ctx.model, ctx.instance, constants(ctx)
    mem = mem or memory_of(ctx, c)
    t = step_time(
        m,
        inst,
        **knobs(ctx, c),
        compile=c.compile,
        grad_accum=c.grad_accum_steps,
        packed=ctx.packed,
        constants=k,
        loss_impl=ctx.loss_impl,
        per_token=per_token,
        comm=comm,
    )
    off = offload_of(ctx, c, mem)
    if off is not None:  # the CPU steps instead of the GPU; PCIe moves the state each pass
        t = t._replace(
            optimizer_s=off.cpu_step_s,
            step_s=t.step_s - t.optimizer_s + off.added_s,
        )
    tokens_per_step = c.global_batch_seqs * ctx.seq_len
    steps = steps_for(ctx, c)
    hours = steps * t.step_s / 3600.0
    tps = tokens_per_step / t.step_s / c.world
    mfu = tps * model_flops_per_token(m, ctx.seq_len) / inst.gpu.peak_flops("bf16")
    price = None if ctx.price_per_hour is None else ctx.price_per_hour * c.instance_count
    return Evaluation(c, mem, t, fits_candidate(ctx, c, mem), steps, hours, tps, mfu, price)


def shard_layouts(world: int, gpus_per_instance: int) -> list[tuple[int, int]]:
    """(shard, replicate) pairs: full shard inside a node or across nodes, or hybrid (HSDP: shard
    over k whole nodes, replicate across the rest). Shard groups smaller than a node are left to
    pins: they trade NVLink all-gathers for a larger state on every GPU and rarely win."""
    if world <= gpus_per_instance:
        return [(world, 1)]
    return [
        (s, world // s)
        for s in range(gpus_per_instance, world + 1, gpus_per_instance)
        if world % s == 0
    ]


def batch_splits(g: int, dp: int, mb_pin: int | None, ga_pin: int | None) -> list[tuple[int, int]]:
    """(micro_batch, grad_accum) pairs reaching `g` sequences over `dp` ranks: exact ones if any,
    else those overshooting least."""
    if mb_pin is not None and ga_pin is not None:
        return [(mb_pin, ga_pin)]
    if ga_pin is not None:
        return [(max(1, math.ceil(g / (dp * ga_pin))), ga_pin)]
    per_rank = max(1, math.ceil(g / dp))
    mbs = [mb_pin] if mb_pin is not None else [1 << i for i in range(per_rank.bit_length())]
    if mb_pin is None and per_rank not in mbs and per_rank <= 256:
        mbs.append(per_rank)
    pairs = [(mb, max(1, math.ceil(g / (dp * mb)))) for mb in mbs]
    if mb_pin is not None:
        return pairs
    best = min(mb * ga for mb, ga in pairs)
    return [(mb, ga) for mb, ga in pairs if mb * ga == best]


class Space(NamedTuple):
    """The values each knob takes on one instance count, the pins honoured."""

    layouts: list[tuple[int, int]]  # (shard, replicate)
    modes: tuple[str, ...]
    compiles: tuple[bool, ...]
    reshards: tuple[bool, ...]  # for a shard degree over 1 (one GPU never reshards)
    offloads: tuple[bool, ...] = (False,)  # the state in host memory (planner/offload.py)

    def splits(self, ctx: Context, pins: Pins, dp: int) -> list[tuple[int, int]]:
        """The (micro-batch, accumulation) pairs over `dp` data-parallel ranks."""
        return batch_splits(ctx.global_batch_seqs, dp, pins.micro_batch_size, pins.grad_accum_steps)


def space(ctx: Context, count: int, pins: Pins) -> Space:
    """The knob values on `count` instances that honour `pins`."""
    inst = ctx.instance
    world = count * inst.gpus_per_instance
    if pins.shard_degree is not None or pins.replicate_degree is not None:
        s = pins.shard_degree or world // (pins.replicate_degree or 1)
        r = pins.replicate_degree or world // s
        layouts = [(s, r)] if s * r == world else []
    else:
        layouts = shard_layouts(world, inst.gpus_per_instance)
    modes = (pins.activation_checkpointing,) if pins.activation_checkpointing else MODES
    compiles = (
        (pins.compile,)
        if pins.compile is not None
        else ((False,) if inst.gpu.kind == "cpu" else (False, True))
    )
    reshards = (
        (pins.reshard_after_forward,) if pins.reshard_after_forward is not None else (True, False)
    )
    from blackwell_sm.planner.offload import offloadable

    if pins.offload is not None:
        offloads: tuple[bool, ...] = (pins.offload,)
    else:
        # LoRA's adapter state is small: the lever (and its model) is a full fine-tune's
        lean = offloadable(inst) and ctx.model.lora is None
        offloads = (False, True) if lean else (False,)
    return Space(layouts, modes, compiles, reshards, offloads)


def candidates(
    ctx: Context, count: int, pins: Pins, precisions: tuple[str, ...]
) -> Iterator[Candidate]:
    """Every configuration on `count` instances that honours `pins`."""
    sp = space(ctx, count, pins)
    for s, r in sp.layouts:
        for cp in cp_degrees(ctx, s, pins):
            splits = sp.splits(ctx, pins, s * r // cp)
            for p in precisions:
                for mode in sp.modes:
                    for comp in sp.compiles:
                        for rs in sp.reshards if s > 1 else (True,):
                            # micro-batch innermost and ascending: a search stops at the first
                            # that does not fit (memory grows with the micro-batch).
                            for off in sp.offloads:
                                for mb, ga in splits:
                                    yield Candidate(count, s, r, mb, ga, p, mode, comp, rs, cp, off)


def cp_degrees(ctx: Context, shard_degree: int, pins: Pins) -> list[int]:
    """Context-parallel degrees to try: the pin, else 1 and (for sequences of at least
    CP_MIN_SEQ) each power of two up to the GPUs of a node that divides the shard group and
    splits the sequence into 2 x cp chunks."""
    if pins.cp_degree is not None:  # a layout whose shard group it does not divide has none
        return [] if shard_degree % pins.cp_degree else [pins.cp_degree]
    out = [1]
    if ctx.seq_len < C.CP_MIN_SEQ:
        return out
    cp = 2
    while cp <= min(shard_degree, ctx.instance.gpus_per_instance):
        if shard_degree % cp == 0 and ctx.seq_len % (2 * cp) == 0:
            out.append(cp)
        cp *= 2
    return out


def group_of(c: Candidate) -> tuple:
    """The knobs but the micro-batch: within a group, memory grows with the micro-batch."""
    return (
        c.shard_degree,
        c.cp_degree,
        c.precision,
        c.activation_checkpointing,
        c.compile,
        c.reshard_after_forward,
        c.offload,
    )


def precisions_for(ctx: Context, pins: Pins) -> tuple[str, ...]:
    """The precisions searched: the pinned one, else every one the GPU supports."""
    if pins.precision:
        return (pins.precision,)
    if ctx.model.lora is not None:  # LoRA adapters run on bf16 linears (spec/peft.py)
        return ("bf16",)
    return tuple(p for p in PRECISIONS if ctx.instance.gpu.supports(p))


def lean(pins: Pins) -> Pins:
    """Pins for the quickest memory check: the leanest value of every free knob but compile
    (which one needs less memory depends on the model: both are tried)."""
    return pins._replace(
        activation_checkpointing=pins.activation_checkpointing or "full",
        reshard_after_forward=True
        if pins.reshard_after_forward is None
        else pins.reshard_after_forward,
    )


def min_memory(
    ctx: Context, count: int, pins: Pins, precisions: tuple[str, ...]
) -> Evaluation | None:
    """The candidate needing the least memory (None if the pins allow no candidate)."""
    return min(
        (evaluate(ctx, c) for c in candidates(ctx, count, pins, precisions)),
        key=lambda e: e.mem.total,
        default=None,
    )


def fits_somewhere(ctx: Context, count: int, pins: Pins) -> bool:
    """Whether any candidate on `count` instances fits (checked on the leanest knobs)."""
    leanest = lean(pins)
    return any(
        fits_candidate(ctx, c, memory_of(ctx, c))
        for c in candidates(ctx, count, leanest, precisions_for(ctx, pins))
    )
