"""The search: enumerate configurations that honour the pins, predict each, pick the fastest time
to train (ties to the simpler one). Plain tuples inside; pydantic only for the final Plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import lru_cache
from typing import NamedTuple, get_args

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import GIB, MemoryTerms, memory_terms, shape
from blackwell_sm.planner.step_time import StepTime, step_time
from blackwell_sm.spec import Checkpointing, ModelSpec

# Every activation-checkpointing mode the spec accepts is searched (a new mode in
# spec.training.Checkpointing joins the search, the alternatives and the round-trip test).
MODES: tuple[str, ...] = get_args(Checkpointing)
PRECISIONS = ("bf16", "fp8", "mxfp8")
TRAINING_PLAN_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MAX_INSTANCES = 64
# Simplicity rank for ties: less recompute is simpler (selective-op recomputes half the matmuls);
# a mode without an entry ranks as selective.
_MODE_RANK = {"none": 0, "selective": 1, "selective-op": 2, "full": 3}
_PREC_RANK = {"bf16": 0, "fp8": 1, "mxfp8": 2}


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

    @property
    def world(self) -> int:
        return self.shard_degree * self.replicate_degree

    @property
    def global_batch_seqs(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.world // self.cp_degree


class Pins(NamedTuple):
    """Fixed knobs (None = searched)."""

    shard_degree: int | None = None
    replicate_degree: int | None = None
    micro_batch_size: int | None = None
    grad_accum_steps: int | None = None
    precision: str | None = None
    activation_checkpointing: str | None = None
    compile: bool | None = None
    reshard_after_forward: bool | None = None
    cp_degree: int | None = None


class Context(NamedTuple):
    """What does not change between candidates."""

    model: ModelSpec
    instance: InstanceType
    seq_len: int
    global_batch_seqs: int
    total_tokens: int | None
    total_steps: int | None
    price_per_hour: float | None
    compiled_loss: bool = False  # the loop does not compile its loss; rows of other stacks may
    packed: bool = False  # task: finetune: packed rows, a block-diagonal attention mask
    constants: C.Constants | None = None  # a calibration profile's; None: calibration.py's
    loss_impl: str = "full-logits"  # the loop's is the spec's (chunked); other stacks' rows full


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


def complexity(c: Candidate) -> tuple:
    """Smaller is simpler: fewer instances, plain FSDP, less checkpointing, bf16, eager, the
    FSDP2 default reshard_after_forward=True, larger micro-batches (fewer steps to accumulate)."""
    return (
        c.instance_count, c.replicate_degree > 1, c.cp_degree, _MODE_RANK.get(c.activation_checkpointing, 1), _PREC_RANK[c.precision],
        c.compile, not c.reshard_after_forward, c.grad_accum_steps,
    )  # fmt: skip


def limit_bytes(instance: InstanceType) -> float:
    return instance.gpu.memory_gib * GIB


def fits(instance: InstanceType, mem: MemoryTerms) -> bool:
    return mem.total <= usable_bytes(instance)


@lru_cache(maxsize=256)
def _flops_per_token(model: ModelSpec, seq_len: int) -> float:
    return model.flops_per_token(seq_len)


def evaluate(ctx: Context, c: Candidate) -> Evaluation:
    """Predict memory, step time, time and cost to train for one candidate."""
    m, inst = ctx.model, ctx.instance
    kw = dict(shard_degree=c.shard_degree, replicate_degree=c.replicate_degree,
              micro_batch=c.micro_batch_size, seq_len=ctx.seq_len, precision=c.precision,
              mode=c.activation_checkpointing, compile=c.compile,
              reshard_after_forward=c.reshard_after_forward, cp_degree=c.cp_degree,
              loss_impl=ctx.loss_impl)  # fmt: skip
    sh = shape(m)
    k = ctx.constants or C.constants_for(inst.gpu.name)
    mem = memory_terms(sh, kind=inst.gpu.kind, compiled_loss=ctx.compiled_loss, packed=ctx.packed,
                       fragmentation=k.fragmentation, **kw)  # fmt: skip
    t = step_time(sh, inst, grad_accum=c.grad_accum_steps, packed=ctx.packed, constants=k, **kw)
    tokens_per_step = c.global_batch_seqs * ctx.seq_len
    if ctx.total_steps is not None:
        steps = ctx.total_steps
    else:
        steps = max(1, math.ceil((ctx.total_tokens or 0) / tokens_per_step))
    hours = steps * t.step_s / 3600.0
    tps = tokens_per_step / t.step_s / c.world
    mfu = tps * _flops_per_token(m, ctx.seq_len) / inst.gpu.peak_flops("bf16")
    price = None if ctx.price_per_hour is None else ctx.price_per_hour * c.instance_count
    return Evaluation(c, mem, t, fits(inst, mem), steps, hours, tps, mfu, price)


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


def _batch_splits(g: int, dp: int, mb_pin: int | None, ga_pin: int | None) -> list[tuple[int, int]]:
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


def candidates(
    ctx: Context, count: int, pins: Pins, precisions: tuple[str, ...]
) -> Iterator[Candidate]:
    """Every configuration on `count` instances that honours `pins`."""
    inst = ctx.instance
    world = count * inst.gpus_per_instance
    if pins.shard_degree is not None or pins.replicate_degree is not None:
        s = pins.shard_degree or world // (pins.replicate_degree or 1)
        r = pins.replicate_degree or world // s
        layouts = [(s, r)] if s * r == world else []
    else:
        layouts = shard_layouts(world, inst.gpus_per_instance)
    modes = (pins.activation_checkpointing,) if pins.activation_checkpointing else MODES
    compiles = (pins.compile,) if pins.compile is not None else (
        (False,) if inst.gpu.kind == "cpu" else (False, True)
    )  # fmt: skip
    reshards = (
        (pins.reshard_after_forward,) if pins.reshard_after_forward is not None else (True, False)
    )
    for s, r in layouts:
        for cp in cp_degrees(ctx, s, pins):
            splits = _batch_splits(
                ctx.global_batch_seqs, s * r // cp, pins.micro_batch_size, pins.grad_accum_steps
            )
            for p in precisions:
                for mode in modes:
                    for comp in compiles:
                        for rs in reshards if s > 1 else (True,):
                            # micro-batch innermost and ascending: search_count stops at the
                            # first that does not fit (memory grows with the micro-batch).
                            for mb, ga in splits:
                                yield Candidate(count, s, r, mb, ga, p, mode, comp, rs, cp)


def cp_degrees(ctx: Context, shard_degree: int, pins: Pins) -> list[int]:
    """Context-parallel degrees to try: the pin, else 1 and (for sequences of at least
    CP_MIN_SEQ) each power of two up to the GPUs of a node that divides the shard group and
    splits the sequence into 2 x cp chunks."""
    if pins.cp_degree is not None:
        return [pins.cp_degree]
    out = [1]
    if ctx.seq_len < C.CP_MIN_SEQ:
        return out
    cp = 2
    while cp <= min(shard_degree, ctx.instance.gpus_per_instance):
        if shard_degree % cp == 0 and ctx.seq_len % (2 * cp) == 0:
            out.append(cp)
        cp *= 2
    return out


def check_pins(ctx: Context, count: int, pins: Pins) -> None:
    """Pins that no configuration can honour are bad input (exit 2), not infeasibility."""
    world = count * ctx.instance.gpus_per_instance
    s, r = pins.shard_degree, pins.replicate_degree
    if s is not None and world % s:
        raise SpecError(
            f"training.pins.shard_degree {s} must divide the GPU count {world} "
            f"({count} x {ctx.instance.gpus_per_instance}); allowed: "
            + ", ".join(str(d) for d in range(1, world + 1) if world % d == 0),
            field="training.pins.shard_degree",
        )
    if r is not None and world % r:
        raise SpecError(
            f"training.pins.replicate_degree {r} must divide the GPU count {world}",
            field="training.pins.replicate_degree",
        )
    if s is not None and r is not None and s * r != world:
        raise SpecError(
            f"training.pins.shard_degree x replicate_degree = {s * r} must equal the GPU count "
            f"{world} ({count} instances x {ctx.instance.gpus_per_instance})",
            field="training.pins.shard_degree",
        )
    cp = pins.cp_degree
    if cp is not None and cp > 1 and (world % cp or (s is not None and s % cp)):
        of = f"shard_degree {s}" if s is not None and s % cp else f"the GPU count {world}"
        top = s if s is not None and s % cp else world
        raise SpecError(
            f"training.pins.cp_degree {cp} must divide {of} (a context-parallel group lies "
            f"inside one shard group); allowed: "
            + ", ".join(str(d) for d in range(1, top + 1) if top % d == 0),
            field="training.pins.cp_degree",
        )
    if pins.precision and not ctx.instance.gpu.supports(pins.precision):
        raise SpecError(
            f"training.precision {pins.precision} is not supported on {ctx.instance.gpu.name}; "
            f"allowed: {', '.join(ctx.instance.gpu.peak_tflops)}",
            field="training.precision",
        )


class SearchResult(NamedTuple):
    best: Evaluation  # the chosen one, or (none fits) the one needing least memory
    feasible: bool
    evaluated: list[Evaluation]  # every candidate on the chosen count
    note: str | None = None  # why the choice is not simply the simplest of the ties


def usable_bytes(instance: InstanceType) -> float:
    return limit_bytes(instance) * (1.0 - C.MEMORY_HEADROOM)


def pick(ok: list[Evaluation], usable: float) -> tuple[Evaluation, str | None]:
    """The choice among fitting evaluations: the fastest, where candidates within TIE_FRACTION
    are ties; among ties the simplest that leaves COMFORT_FRACTION of the usable memory free,
    else (all ties are tight) the one needing the least memory."""
    fastest = min(e.hours for e in ok)
    ties = [e for e in ok if e.hours <= fastest * (1.0 + C.TIE_FRACTION)]
    key = lambda e: (complexity(e.cand), e.hours)  # noqa: E731
    simplest = min(ties, key=key)
    comfy = [e for e in ties if e.mem.total <= C.COMFORT_FRACTION * usable]
    best = min(comfy, key=key) if comfy else min(ties, key=lambda e: (e.mem.total, key(e)))
    note = None
    if best is not simplest:
        note = (
            f"chose {best.memory_gib:.1f} GiB over {simplest.memory_gib:.1f} GiB (of the usable "
            f"{usable / GIB:.1f}): within {C.TIE_FRACTION:.0%} of the fastest, with more free memory"
        )
    return best, note


def search_count(ctx: Context, count: int, pins: Pins, precisions: tuple[str, ...]) -> SearchResult:
    """The best candidate on `count` instances among `precisions`."""
    evals = []
    too_big = None  # the knobs (all but the micro-batch) whose last micro-batch did not fit
    for c in candidates(ctx, count, pins, precisions):
        key = (
            c.shard_degree,
            c.cp_degree,
            c.precision,
            c.activation_checkpointing,
            c.compile,
            c.reshard_after_forward,
        )
        if key == too_big:
            continue
        e = evaluate(ctx, c)
        evals.append(e)
        if not e.fits:
            too_big = key
    ok = [e for e in evals if e.fits]
    if ok:
        best, note = pick(ok, usable_bytes(ctx.instance))
        return SearchResult(best, True, evals, note)
    best = min(evals, key=lambda e: (e.mem.total, e.hours))
    return SearchResult(best, False, evals)


def min_memory(
    ctx: Context, count: int, pins: Pins, precisions: tuple[str, ...]
) -> Evaluation | None:
    """The candidate needing the least memory (None if the pins allow no candidate)."""
    return min(
        (evaluate(ctx, c) for c in candidates(ctx, count, pins, precisions)),
        key=lambda e: e.mem.total,
        default=None,
    )
