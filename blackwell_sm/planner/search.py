"""Candidates and their evaluation: the second and third steps of the planner's pipeline
(frame → candidates → evaluate → pick → explain, `planner/pipeline.py`).

`candidates` enumerates the configurations one instance count allows under the pins; `evaluate`
predicts one (memory, step time, hours, cost). `Table` holds the evaluations per count, made
when the pick step first asks and kept: `contenders` (what choosing needs: every fitting
candidate within the tie margin of the fastest, found by branch and bound on a compute-only
lower bound of the time), `evaluated` (every candidate, for the runner-ups) and `fits` (a quick
memory check). Nothing here chooses. Plain tuples inside; pydantic only for the final Plan.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import NamedTuple, get_args

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import GIB, MemoryTerms, Shape, memory_terms
from blackwell_sm.planner.step_time import (
    Comm,
    StepTime,
    comm_per_micro_batch,
    compute_terms_per_token,
    exposed,
    optimizer_time,
    step_seconds,
    step_time,
)
from blackwell_sm.spec import Checkpointing

# Every activation-checkpointing mode the spec accepts is searched (a new mode in
# spec.training.Checkpointing joins the search, the alternatives and the round-trip test).
MODES: tuple[str, ...] = get_args(Checkpointing)
PRECISIONS = ("bf16", "fp8", "mxfp8")
TRAINING_PLAN_COUNTS = (1, 2, 4, 8, 16, 32, 64)
MAX_INSTANCES = 64


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

    @property
    def world(self) -> int:
        return self.shard_degree * self.replicate_degree

    @property
    def global_batch_seqs(self) -> int:
        return self.micro_batch_size * self.grad_accum_steps * self.world


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


class Context(NamedTuple):
    """What does not change between candidates. `model` is the spec's `memory.Shape`, made once
    where the planner is entered (`pipeline.frame`, `calibrate_sources.csv_row`)."""

    model: Shape
    instance: InstanceType
    seq_len: int
    global_batch_seqs: int
    total_tokens: int | None
    total_steps: int | None
    price_per_hour: float | None
    compiled_loss: bool = False  # the loop does not compile its loss; rows of other stacks may
    packed: bool = False  # task: finetune: packed rows, a block-diagonal attention mask
    constants: C.Constants | None = None  # a calibration profile's; None: calibration.py's


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


def constants(ctx: Context) -> C.Constants:
    return ctx.constants or C.constants_for(ctx.instance.gpu.name)


def steps_for(ctx: Context, c: Candidate) -> int:
    """Optimizer steps of the run: the spec's, or its tokens over this candidate's batch."""
    if ctx.total_steps is not None:
        return ctx.total_steps
    return max(1, math.ceil((ctx.total_tokens or 0) / (c.global_batch_seqs * ctx.seq_len)))


def memory_of(ctx: Context, c: Candidate) -> MemoryTerms:
    return memory_terms(
        ctx.model,
        shard_degree=c.shard_degree,
        replicate_degree=c.replicate_degree,
        micro_batch=c.micro_batch_size,
        seq_len=ctx.seq_len,
        precision=c.precision,
        mode=c.activation_checkpointing,
        compile=c.compile,
        reshard_after_forward=c.reshard_after_forward,
        kind=ctx.instance.gpu.kind,
        compiled_loss=ctx.compiled_loss,
        packed=ctx.packed,
        fragmentation=constants(ctx).fragmentation,
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
        shard_degree=c.shard_degree,
        replicate_degree=c.replicate_degree,
        micro_batch=c.micro_batch_size,
        grad_accum=c.grad_accum_steps,
        seq_len=ctx.seq_len,
        precision=c.precision,
        mode=c.activation_checkpointing,
        compile=c.compile,
        reshard_after_forward=c.reshard_after_forward,
        packed=ctx.packed,
        constants=k,
        per_token=per_token,
        comm=comm,
    )
    tokens_per_step = c.global_batch_seqs * ctx.seq_len
    steps = steps_for(ctx, c)
    hours = steps * t.step_s / 3600.0
    tps = tokens_per_step / t.step_s / c.world
    mfu = tps * m.spec.flops_per_token(ctx.seq_len) / inst.gpu.peak_flops("bf16")
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
    compiles = (
        (pins.compile,)
        if pins.compile is not None
        else ((False,) if inst.gpu.kind == "cpu" else (False, True))
    )
    reshards = (
        (pins.reshard_after_forward,) if pins.reshard_after_forward is not None else (True, False)
    )
    for s, r in layouts:
        splits = _batch_splits(
            ctx.global_batch_seqs, s * r, pins.micro_batch_size, pins.grad_accum_steps
        )
        for p in precisions:
            for mode in modes:
                for comp in compiles:
                    for rs in reshards if s > 1 else (True,):
                        # micro-batch innermost and ascending: a search stops at the first that
                        # does not fit (memory grows with the micro-batch).
                        for mb, ga in splits:
                            yield Candidate(count, s, r, mb, ga, p, mode, comp, rs)


def _group(c: Candidate) -> tuple:
    """The knobs but the micro-batch: within a group, memory grows with the micro-batch."""
    return (
        c.shard_degree,
        c.precision,
        c.activation_checkpointing,
        c.compile,
        c.reshard_after_forward,
    )


def check_pins(ctx: Context, count: int, pins: Pins) -> None:
    """Pins that no configuration can honour are bad input (exit 2), not infeasibility."""
    problem = pin_problem(ctx, count, pins)
    if problem is not None:
        raise problem


def pin_problem(ctx: Context, count: int, pins: Pins) -> SpecError | None:
    """Why no configuration on `count` instances can honour `pins`, or None."""
    world = count * ctx.instance.gpus_per_instance
    s, r = pins.shard_degree, pins.replicate_degree
    if s is not None and world % s:
        return SpecError(
            f"training.pins.shard_degree {s} must divide the GPU count {world} "
            f"({count} x {ctx.instance.gpus_per_instance}); allowed: "
            + ", ".join(str(d) for d in range(1, world + 1) if world % d == 0),
            field="training.pins.shard_degree",
        )
    if r is not None and world % r:
        return SpecError(
            f"training.pins.replicate_degree {r} must divide the GPU count {world}",
            field="training.pins.replicate_degree",
        )
    if s is not None and r is not None and s * r != world:
        return SpecError(
            f"training.pins.shard_degree x replicate_degree = {s * r} must equal the GPU count "
            f"{world} ({count} instances x {ctx.instance.gpus_per_instance})",
            field="training.pins.shard_degree",
        )
    if pins.precision and not ctx.instance.gpu.supports(pins.precision):
        return SpecError(
            f"training.precision {pins.precision} is not supported on {ctx.instance.gpu.name}; "
            f"allowed: {', '.join(ctx.instance.gpu.peak_tflops)}",
            field="training.precision",
        )
    return None


def precisions_for(ctx: Context, pins: Pins) -> tuple[str, ...]:
    """The precisions searched: the pinned one, else every one the GPU supports."""
    if pins.precision:
        return (pins.precision,)
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
        fits(ctx.instance, memory_of(ctx, c))
        for c in candidates(ctx, count, leanest, precisions_for(ctx, pins))
    )


class Table:
    """The evaluations of one planning problem, per instance count and precision, made when first
    asked for and kept: a pure function of the context and the pins.

    A candidate's hours need no memory model, and the parts they are made of repeat across
    candidates (compute per token, collectives per layout), so `hours` is cheap and exact. The
    memory terms are what is dear: `contenders` and `any_within` take candidates by ascending
    hours and model memory only until the answer is known."""

    def __init__(self, ctx: Context, pins: Pins) -> None:
        self.ctx, self.pins = ctx, pins
        self.precisions = precisions_for(ctx, pins)
        self._fits: dict[tuple[int, tuple[str, ...]], bool] = {}
        self._all: dict[tuple[int, str], list[Evaluation]] = {}
        self._contenders: dict[tuple[int, str, float], list[Evaluation]] = {}
        self._per_token: dict[tuple[str, str, bool], tuple[float, float]] = {}
        self._memory: dict[tuple, MemoryTerms] = {}
        self._comm: dict[tuple, Comm] = {}
        self._opt: dict[int, float] = {}
        self._ranked: dict[int, list[tuple[float, Candidate]]] = {}
        self._mb: dict[int, int] = {}

    def memory(self, c: Candidate) -> MemoryTerms:
        """`c`'s memory terms. The key leaves out what `memory_terms` does not read (the count,
        the accumulation) and counts replicas only as one or more than one, the only way the
        memory model sees them (`tests/test_planner_pipeline.py` holds it to that), so an HSDP
        layout is computed once for every count it appears on."""
        key = (
            c.shard_degree,
            min(c.replicate_degree, 2),
            c.micro_batch_size,
            c.precision,
            c.activation_checkpointing,
            c.compile,
            c.reshard_after_forward,
        )
        mem = self._memory.get(key)
        if mem is None:
            mem = self._memory[key] = memory_of(self.ctx, c)
        return mem

    def per_token(self, c: Candidate) -> tuple[float, float]:
        """(compute, recompute) seconds per token: the same for every count and layout."""
        key = (c.precision, c.activation_checkpointing, c.compile)
        if key not in self._per_token:
            ctx = self.ctx
            self._per_token[key] = compute_terms_per_token(
                ctx.model,
                ctx.instance,
                ctx.seq_len,
                c.precision,
                c.activation_checkpointing,
                c.compile,
                ctx.packed,
                constants(ctx),
            )
        return self._per_token[key]

    def comm(self, c: Candidate) -> Comm:
        """One micro-batch's collectives: the same for every candidate of a layout."""
        key = (c.shard_degree, c.replicate_degree, c.precision, c.reshard_after_forward)
        got = self._comm.get(key)
        if got is None:
            ctx = self.ctx
            got = self._comm[key] = comm_per_micro_batch(
                ctx.model, ctx.instance, *key, constants(ctx)
            )
        return got

    def hours(self, c: Candidate) -> float:
        """`c`'s hours to train, exactly as `evaluate` has them, without its memory."""
        ctx, k = self.ctx, constants(self.ctx)
        base, rec = self.per_token(c)
        t_opt = self._opt.get(c.shard_degree)
        if t_opt is None:
            t_opt = self._opt[c.shard_degree] = optimizer_time(
                ctx.model, ctx.instance, c.shard_degree, k
            )
        t_comp = c.micro_batch_size * ctx.seq_len * (base + rec)
        step = step_seconds(t_comp, self.comm(c), k.comm_overlap, c.grad_accum_steps, t_opt)
        return steps_for(ctx, c) * step / 3600.0

    def evaluate(self, c: Candidate, mem: MemoryTerms | None = None) -> Evaluation:
        return evaluate(
            self.ctx, c, mem=mem or self.memory(c), per_token=self.per_token(c), comm=self.comm(c)
        )

    def fits(self, count: int, precisions: tuple[str, ...] | None = None) -> bool:
        """Whether anything fits on `count` instances (`fits_somewhere`), at `precisions`
        (default: every one searched)."""
        key = (count, precisions or self.precisions)
        if key not in self._fits:
            inst, leanest = self.ctx.instance, lean(self.pins)
            self._fits[key] = any(
                fits(inst, self.memory(c)) for c in candidates(self.ctx, count, leanest, key[1])
            )
        return self._fits[key]

    def evaluated(self, count: int, precision: str) -> list[Evaluation]:
        """Every candidate on `count` at `precision`; within a group of knobs, micro-batches past
        the first that does not fit are left out (they need more memory still)."""
        key = (count, precision)
        if key not in self._all:
            out: list[Evaluation] = []
            too_big = None
            for c in candidates(self.ctx, count, self.pins, (precision,)):
                if _group(c) == too_big:
                    continue
                e = self.evaluate(c)
                out.append(e)
                if not e.fits:
                    too_big = _group(c)
            self._all[key] = out
        return self._all[key]

    def contenders(self, count: int, precision: str, within: float) -> list[Evaluation]:
        """Every fitting candidate on `count` at `precision` whose hours are within `within` of
        the fastest fitting one (empty: none fits)."""
        key = (count, precision, within)
        if key in self._contenders:
            return self._contenders[key]
        if (count, precision) in self._all:
            ok = [e for e in self._all[count, precision] if e.fits]
            fastest = min((e.hours for e in ok), default=0.0)
            out = [e for e in ok if e.hours <= fastest * (1.0 + within)]
        else:
            out = []
            limit = math.inf
            for hours, c in self._fitting(count, (precision,)):
                if hours > limit:
                    break
                limit = min(limit, hours * (1.0 + within))
                out.append(self.evaluate(c))
        self._contenders[key] = out
        return out

    def any_within(
        self, count: int, hours: float, precisions: tuple[str, ...] | None = None
    ) -> bool:
        """Whether some fitting candidate on `count` instances at `precisions` (default: every
        one searched) takes at most `hours`. A group of knobs that cannot (`_group_floor`) is
        passed over whole."""
        ctx = self.ctx
        floor: dict[tuple, float] = {}
        too_big: dict[tuple, int] = {}
        for c in candidates(ctx, count, self.pins, precisions or self.precisions):
            group = (*_group(c), c.replicate_degree)
            if group not in floor:
                floor[group] = self._group_floor(c)
            if floor[group] > hours or c.micro_batch_size >= too_big.get(group, math.inf):
                continue
            if self.hours(c) > hours:
                continue
            if fits(ctx.instance, self.memory(c)):
                return True
            too_big[group] = min(c.micro_batch_size, too_big.get(group, math.inf))
        return False

    def _group_floor(self, c: Candidate) -> float:
        """A lower bound of the hours of every candidate of `c`'s group (its knobs but the
        micro-batch split): the run's tokens over the group's GPUs at its compute per token,
        plus the least communication any split of it leaves exposed per micro-batch (at the
        largest micro-batch) times the fewest micro-batches that carry the tokens."""
        ctx, k = self.ctx, constants(self.ctx)
        if ctx.total_steps is not None:
            tokens = ctx.total_steps * ctx.global_batch_seqs * ctx.seq_len
        else:
            tokens = ctx.total_tokens or 0
        base, rec = self.per_token(c)
        per_gpu = tokens / c.world
        mb = self._largest_micro_batch(c.world)
        least = exposed(self.comm(c), mb * ctx.seq_len * (base + rec), k.comm_overlap)
        return (per_gpu * (base + rec) + per_gpu / (mb * ctx.seq_len) * least) / 3600.0

    def _largest_micro_batch(self, world: int) -> int:
        mb = self._mb.get(world)
        if mb is None:
            pins = self.pins
            splits = _batch_splits(
                self.ctx.global_batch_seqs, world, pins.micro_batch_size, pins.grad_accum_steps
            )
            mb = self._mb[world] = max(m for m, _ in splits)
        return mb

    def ranked(self, count: int) -> list[tuple[float, Candidate]]:
        """Every candidate on `count` instances (all precisions) by ascending hours."""
        if count not in self._ranked:
            self._ranked[count] = sorted(
                (self.hours(c), c) for c in candidates(self.ctx, count, self.pins, self.precisions)
            )
        return self._ranked[count]

    def _fitting(
        self, count: int, precisions: tuple[str, ...], until: float = math.inf
    ) -> Iterator[tuple[float, Candidate]]:
        """The fitting candidates by ascending hours (up to `until`): memory is modelled only
        for the candidates reached. Within a group of knobs, a micro-batch that does not fit
        rules out the larger ones."""
        too_big: dict[tuple, int] = {}  # group -> smallest micro-batch that did not fit
        for hours, c in self.ranked(count):
            if hours > until:
                return
            if c.precision not in precisions:
                continue
            group = _group(c)
            if c.micro_batch_size >= too_big.get(group, math.inf):
                continue
            if fits(self.ctx.instance, self.memory(c)):
                yield hours, c
            else:
                too_big[group] = c.micro_batch_size
