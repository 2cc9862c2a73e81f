"""The evaluations of one planning problem, kept: the search's answer to what the pick step
asks, per instance count and precision (`planner/pipeline.py`).

A candidate's hours need no memory model, and the parts they are made of repeat across
candidates (compute per token, collectives per layout), so `Table.hours` is cheap and exact.
The memory terms are what is dear: `contenders` and `any_within` take candidates by ascending
hours and model memory only until the answer is known; nothing is evaluated twice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

from blackwell_sm.planner.batch import data_parallel_ranks
from blackwell_sm.planner.memory import MemoryTerms
from blackwell_sm.planner.offload import seconds as offload_seconds
from blackwell_sm.planner.search import (
    Candidate,
    Context,
    Evaluation,
    Pins,
    batch_splits,
    candidates,
    constants,
    cp_degrees,
    evaluate,
    fits_candidate,
    group_of,
    lean,
    memory_of,
    precisions_for,
    space,
    steps_for,
)
from blackwell_sm.planner.step_time import (
    Comm,
    comm_per_micro_batch,
    compute_terms_per_token,
    context_parallel_comm_s,
    dense_mask,
    exposed,
    micro_batch_compute_s,
    optimizer_time,
    step_seconds,
)


class Table:
    """The evaluations of one planning problem, per instance count and precision, made when first
    asked for and kept: a pure function of the context and the pins."""

    def __init__(self, ctx: Context, pins: Pins) -> None:
        self.ctx, self.pins = ctx, pins
        self.precisions = precisions_for(ctx, pins)
        self._fits: dict[tuple[int, tuple[str, ...]], bool] = {}
        self._all: dict[tuple[int, str], list[Evaluation]] = {}
        self._contenders: dict[tuple[int, str, float], list[Evaluation]] = {}
        self._per_token: dict[tuple[str, str, bool, bool], tuple[float, float]] = {}
        self._memory: dict[tuple, MemoryTerms] = {}
        self._comm: dict[tuple, Comm] = {}
        self._opt: dict[int, float] = {}
        self._ranked: dict[int, list[tuple[float, Candidate]]] = {}
        self._split_cache: dict[int, list[tuple[int, int]]] = {}
        self._frontier: dict[tuple, int] = {}

    def memory(self, c: Candidate) -> MemoryTerms:
        """`c`'s memory terms. The key leaves out what `memory_terms` does not read (the count)
        and counts replicas and micro-batches accumulated only as one or more than one, the
        only way the memory model sees them (`tests/test_planner_pipeline.py` holds it to
        that), so an HSDP layout is computed once for every count it appears on."""
        key = (
            min(c.grad_accum_steps, 2),
            c.shard_degree,
            min(c.replicate_degree, 2),
            c.micro_batch_size,
            c.precision,
            c.activation_checkpointing,
            c.compile,
            c.reshard_after_forward,
            c.cp_degree,
            c.offload,
        )
        mem = self._memory.get(key)
        if mem is None:
            mem = self._memory[key] = memory_of(self.ctx, c)
        return mem

    def per_token(self, c: Candidate, dense: bool | None = None) -> tuple[float, float]:
        """(compute, recompute) seconds per token: the same for every count and layout with the
        same attention mask (`dense`: given, else `c`'s; a dense mask is the dearest)."""
        ctx = self.ctx
        if dense is None:
            dense = dense_mask(
                ctx.packed, c.cp_degree, c.micro_batch_size, ctx.seq_len, ctx.instance
            )
        key = (c.precision, c.activation_checkpointing, c.compile, dense)
        if key not in self._per_token:
            self._per_token[key] = compute_terms_per_token(
                ctx.model,
                ctx.instance,
                ctx.seq_len,
                c.precision,
                c.activation_checkpointing,
                c.compile,
                dense,
                constants(ctx),
                ctx.loss_impl,
            )
        return self._per_token[key]

    def cp_s(self, c: Candidate) -> float:
        """One micro-batch's context-parallel collectives (all exposed)."""
        ctx = self.ctx
        return context_parallel_comm_s(
            ctx.model,
            ctx.instance,
            c.micro_batch_size,
            ctx.seq_len,
            c.cp_degree,
            c.activation_checkpointing,
            constants(ctx),
        )

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
        t_opt = self._opt.get(c.shard_degree)
        if t_opt is None:
            t_opt = self._opt[c.shard_degree] = optimizer_time(
                ctx.model, ctx.instance, c.shard_degree, k
            )
        if c.offload:  # the CPU steps, PCIe moves the state (as `evaluate` has it)
            t_opt = sum(
                offload_seconds(
                    ctx.model,
                    ctx.instance,
                    shard_degree=c.shard_degree,
                    grad_accum=c.grad_accum_steps,
                )
            )
        t_comp = micro_batch_compute_s(
            c.micro_batch_size, ctx.seq_len, c.cp_degree, self.per_token(c)
        )
        step = step_seconds(
            t_comp, self.comm(c), k.comm_overlap, c.grad_accum_steps, t_opt, self.cp_s(c)
        )
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
            leanest = lean(self.pins)
            self._fits[key] = any(
                fits_candidate(self.ctx, c, self.memory(c))
                for c in candidates(self.ctx, count, leanest, key[1])
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
                if group_of(c) == too_big:
                    continue
                e = self.evaluate(c)
                out.append(e)
                if not e.fits:
                    too_big = group_of(c)
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
        self,
        count: int,
        hours: float,
        precisions: tuple[str, ...] | None = None,
        top: int | None = None,
    ) -> bool:
        """Whether some fitting candidate on `count` instances at `precisions` (default: every
        one searched) takes at most `hours` (`top`: the largest count that will be asked).
        Knob values are passed over as soon as a lower bound shows they cannot: a (precision,
        checkpointing, compile) whose compute alone (the run's tokens over the GPUs, without a
        dense mask) takes longer; a resharding choice whose leanest layout (the most sharding,
        the smallest micro-batch, at any context-parallel degree) does not fit, as no other
        layout can; a layout whose least unhidden communication makes it too slow. Only what is
        left is evaluated."""
        ctx, pins = self.ctx, self.pins
        if ctx.total_steps is not None:
            tokens = ctx.total_steps * ctx.global_batch_seqs * ctx.seq_len
        else:
            tokens = ctx.total_tokens or 0
        per_gpu = tokens / (count * ctx.instance.gpus_per_instance)
        sp = space(ctx, count, pins)
        if not sp.layouts:
            return False
        s_max, r_max = max(sp.layouts)
        monotone = (  # full shard on offer, micro-batch not tied to the count
            pins.shard_degree is None
            and pins.replicate_degree is None
            and pins.grad_accum_steps is None
        )
        for p in precisions or self.precisions:
            for mode in sp.modes:
                for comp in sp.compiles:
                    # offload (when offered) is the leanest: the probe's memory check takes it
                    probe = Candidate(
                        count, s_max, r_max, 1, 1, p, mode, comp, True, offload=max(sp.offloads)
                    )
                    per_token = sum(self.per_token(probe, dense=False))
                    if per_gpu * per_token / 3600.0 > hours:
                        continue
                    for rs in sp.reshards if s_max > 1 else (True,):
                        leanest = probe._replace(reshard_after_forward=rs)
                        if not self._leanest_fits(leanest, monotone, top or count):
                            continue
                        for s, r in sp.layouts:
                            if s == 1 and not rs:
                                continue
                            for cp in cp_degrees(ctx, s, pins):
                                c = probe._replace(
                                    shard_degree=s,
                                    replicate_degree=r,
                                    reshard_after_forward=rs,
                                    cp_degree=cp,
                                )
                                if self._within(c, per_gpu, per_token, hours):
                                    return True
        return False

    def _leanest_fits(self, c: Candidate, monotone: bool, top: int) -> bool:
        """Whether `c`'s knobs fit on a count's most sharded layout at the smallest micro-batch
        and some context-parallel degree. When full sharding is on offer and the smallest
        micro-batch does not depend on the count, that layout shards over every GPU and needs
        less memory on more instances (`monotone`): per knob set the smallest count up to `top`
        where it fits is found once (a binary search) and every count is answered from it."""
        cps = cp_degrees(self.ctx, c.shard_degree, self.pins)

        def fits_at(probe: Candidate) -> bool:
            for cp in cps:
                if probe.world % cp:  # a count too small for a pinned degree
                    continue
                mb = min(m for m, _ in self._splits(data_parallel_ranks(probe.world, cp)))
                lean = probe._replace(cp_degree=cp, micro_batch_size=mb)
                if fits_candidate(self.ctx, lean, self.memory(lean)):
                    return True
            return False

        if not monotone:
            return fits_at(c)
        key = (
            c.precision,
            c.activation_checkpointing,
            c.compile,
            c.reshard_after_forward,
            c.offload,
        )
        if key not in self._frontier:
            lo, hi = 0, top + 1  # lo does not fit (or is 0); hi fits (or is past top)
            while hi - lo > 1:
                mid = (lo + hi) // 2
                gpus = mid * self.ctx.instance.gpus_per_instance
                if fits_at(c._replace(instance_count=mid, shard_degree=gpus, replicate_degree=1)):
                    hi = mid
                else:
                    lo = mid
            self._frontier[key] = hi
        return c.instance_count >= self._frontier[key]

    def _within(self, group: Candidate, per_gpu: float, per_token: float, hours: float) -> bool:
        """Whether a fitting split (micro-batch, accumulation) of `group`'s knobs takes at most
        `hours`; a lower bound first: its compute and its least unhidden communication."""
        ctx = self.ctx
        splits = self._splits(group.data_parallel)
        mb = max(m for m, _ in splits)
        tokens_mb = mb * ctx.seq_len // group.cp_degree
        cp_s = self.cp_s(group._replace(micro_batch_size=mb))
        least = exposed(self.comm(group), tokens_mb * per_token, constants(ctx).comm_overlap, cp_s)
        if (per_gpu * per_token + per_gpu / tokens_mb * least) / 3600.0 > hours:
            return False
        for off in space(ctx, group.instance_count, self.pins).offloads:
            missed = False
            for m, ga in splits:  # ascending: memory grows with the micro-batch, but
                if missed and ga > 1:  # accumulating keeps the sharded gradients: ga 1 may fit
                    continue
                c = group._replace(micro_batch_size=m, grad_accum_steps=ga, offload=off)
                if self.hours(c) <= hours:
                    if fits_candidate(ctx, c, self.memory(c)):
                        return True
                    missed = True
        return False

    def _splits(self, dp: int) -> list[tuple[int, int]]:
        """The (micro-batch, accumulation) pairs over `dp` data-parallel ranks
        (`search.batch_splits`)."""
        got = self._split_cache.get(dp)
        if got is None:
            pins = self.pins
            got = self._split_cache[dp] = batch_splits(
                self.ctx.global_batch_seqs, dp, pins.micro_batch_size, pins.grad_accum_steps
            )
        return got

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
            group = group_of(c)
            if c.micro_batch_size >= too_big.get(group, math.inf):
                continue
            if fits_candidate(self.ctx, c, self.memory(c)):
                yield hours, c
            else:
                too_big[group] = c.micro_batch_size
