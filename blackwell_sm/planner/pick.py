"""The pick step of the pipeline: from the evaluated candidates to one configuration, in three
steps, each over the result of the one before:

1. configuration: on one instance count and precision, the fastest; candidates within
   TIE_FRACTION are ties, among which the simplest that leaves COMFORT_FRACTION of the usable
   memory free wins (`best_of`);
2. precision: on one count, `precision.choose_precision` among the precisions' bests
   (`on_count`);
3. instance count, by the objective (`choose`): "time" (the default) takes the fewest instances
   whose pick finishes within the deadline (the user's, else one SageMaker job's 28 days), and the
   fastest count found when none does; "cost" takes the cheapest pick over every allowed count
   (within the user's deadline, if one is set; counts taken upward, a larger one only when
   cheaper than the low end of the pick so far's cost range: a saving inside the prediction's
   uncertainty is a tie, and ties go to fewer nodes), so one node for twice as long can win at
   half the price.

With a fixed count only steps 1 and 2 choose; the other objective would pick the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.frame import Problem
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.notes import Note, reason, warning
from blackwell_sm.planner.precision import RANK, bf16_unless_it_cannot_fit, choose_precision
from blackwell_sm.planner.search import Candidate, Evaluation, constants, usable_bytes
from blackwell_sm.planner.table import Table
from blackwell_sm.planner.uncertainty import speed_range
from blackwell_sm.planner.units import usd_text

# Simplicity rank for ties: less recompute is simpler (selective-op recomputes half the matmuls);
# a mode without an entry ranks as selective.
_MODE_RANK = {"none": 0, "selective": 1, "selective-op": 2, "full": 3}


def complexity(c: Candidate) -> tuple:
    """Smaller is simpler: fewer instances, plain FSDP, no context parallelism, less
    checkpointing, bf16, eager, the FSDP2 default reshard_after_forward=True, larger
    micro-batches (fewer steps to accumulate)."""
    return (
        c.instance_count,
        c.replicate_degree > 1,
        c.cp_degree,
        _MODE_RANK.get(c.activation_checkpointing, 1),
        RANK[c.precision],
        c.compile,
        not c.reshard_after_forward,
        c.grad_accum_steps,
    )


def best_of(ok: list[Evaluation], usable: float) -> tuple[Evaluation, Note | None]:
    """The choice among fitting evaluations: the fastest, where candidates within TIE_FRACTION
    are ties; among ties the simplest that leaves COMFORT_FRACTION of the usable memory free,
    else (all ties are tight) the one needing the least memory."""
    fastest = min(e.hours for e in ok)
    ties = [e for e in ok if e.hours <= fastest * (1.0 + C.TIE_FRACTION)]

    def key(e: Evaluation) -> tuple:
        return (complexity(e.cand), e.hours)

    simplest = min(ties, key=key)
    comfy = [e for e in ties if e.mem.total <= C.COMFORT_FRACTION * usable]
    best = min(comfy, key=key) if comfy else min(ties, key=lambda e: (e.mem.total, key(e)))
    if best is simplest:
        return best, None
    return best, reason(
        "tie_free_memory",
        f"chose {best.memory_gib:.1f} GiB over {simplest.memory_gib:.1f} GiB (of the usable "
        f"{usable / GIB:.1f}): within {C.TIE_FRACTION:.0%} of the fastest, with more free memory",
    )


@dataclass(frozen=True)  # not a NamedTuple: its `count` would shadow tuple.count
class CountChoice:
    """Steps 1 and 2 on one instance count where something fits."""

    count: int
    best: Evaluation
    notes: list[Note]  # the precision's reasons, and the tie rule's when it decided

    @property
    def hours(self) -> float:
        return self.best.hours

    @property
    def cost(self) -> float:
        return self.best.cost_usd if self.best.cost_usd is not None else self.best.hours


def on_count(table: Table, count: int) -> CountChoice | None:
    """The configuration chosen on `count` instances (None: nothing fits there): the best of
    each precision, then the precision (pinned, or `choose_precision`'s)."""
    usable = usable_bytes(table.ctx.instance)
    picks: dict[str, tuple[Evaluation, Note | None] | None] = {}
    for p in table.precisions:
        ok = table.contenders(count, p, C.TIE_FRACTION)
        picks[p] = best_of(ok, usable) if ok else None
    precision, notes = precision_step(
        table, {p: pick[0] if pick else None for p, pick in picks.items()}
    )
    pick = picks[precision]
    if pick is None:
        return None
    best, tie = pick
    return CountChoice(count, best, notes + ([tie] if tie else []))


def precision_step(table: Table, bests: dict[str, Evaluation | None]) -> tuple[str, list[Note]]:
    """The pinned precision, or `choose_precision` among each precision's best (None: nothing
    fits at that precision)."""
    if table.pins.precision:
        return table.pins.precision, []
    ctx = table.ctx  # packed rows: the spec's task finetune (frame.context)
    return choose_precision(ctx.model.spec, ctx.instance.gpu, bests, finetune=ctx.packed)


@dataclass(frozen=True)
class Choice:
    """What the pick step hands on: the chosen configuration, whether it stands, and why."""

    objective: str
    count: int
    best: Evaluation  # the chosen one; with nothing fitting, the one needing least memory
    feasible: bool  # it fits in memory
    late: bool  # instance_count auto and even the chosen count misses the deadline
    evaluated: list[Evaluation]  # every candidate on the chosen count (for the runner-ups)
    notes: list[Note]  # the count step's
    config_notes: list[Note]  # the precision step's and the tie rule's
    other: tuple[str, CountChoice] | None  # the other objective's pick
    in_time: CountChoice | None  # when `best` misses the deadline: the time pick above it


class _Counts:
    """The count step over one table, each count's choice made once."""

    def __init__(self, table: Table) -> None:
        self.table = table
        self._done: dict[int, CountChoice | None] = {}

    def on(self, n: int) -> CountChoice | None:
        """The choice on `n`, or None when nothing fits there."""
        if n not in self._done:
            self._done[n] = on_count(self.table, n) if self.table.fits(n) else None
        return self._done[n]

    def by_time(self, allowed: list[int], deadline: float) -> tuple[CountChoice | None, bool]:
        """(the fewest count whose choice finishes within `deadline`, True), else (the fastest
        count found, False), else (None, False) when nothing fits."""
        fastest: CountChoice | None = None
        i = 0
        while i < len(allowed):
            cc = self.on(allowed[i])
            if cc is None:
                i += 1
                continue
            if cc.hours <= deadline:
                return cc, True
            if fastest is None or cc.hours < fastest.hours:
                fastest = cc
            # Time falls roughly as 1/n: jump close to the count that would meet the deadline.
            target = allowed[i] * cc.hours / deadline * 0.9
            j = i + 1
            while j < len(allowed) - 1 and allowed[j] < target:
                j += 1
            i = j
        return fastest, False

    def by_cost(self, allowed: list[int], deadline: float | None) -> CountChoice | None:
        """The cheapest choice over the allowed counts (each within `deadline` when given),
        counts taken upward: a count replaces the pick so far only when it costs less than the
        low end of the cost range of every smaller count's choice (a saving inside the
        prediction's uncertainty is a tie, which fewer nodes win). None: no count qualifies.

        Exact without choosing on every count: a count none of whose candidates could cost
        less than `floor` x `reach` is passed over on `Table.any_within`'s answer."""
        pick: CountChoice | None = None
        floor = math.inf  # the lowest cost-range low end of the counts chosen on so far
        price = self.table.ctx.price_per_hour or 1.0  # every catalogued type has a price
        # the most a choice's cost lies above its range's low end: the speed range's fast side
        reach = max(1.0 + C.TIE_FRACTION, 1.0 + constants(self.table.ctx).range[1])
        for n in allowed:
            if not self.table.fits(n):
                continue
            hours = floor * reach / (price * n)
            if deadline is not None:
                hours = min(hours, deadline)
            if pick is not None and not self._could_cost(n, hours, allowed[-1]):
                continue
            cc = self.on(n)
            if cc is None or (deadline is not None and cc.hours > deadline):
                continue
            if cc.cost < floor:
                pick = cc
            floor = min(floor, cc.cost / self.tie(cc))
        return pick

    def tie(self, cc: CountChoice) -> float:
        """How many times cheaper than `cc` another count must be to win: past the low end of
        `cc`'s cost range (its speed range's fast end), and at least TIE_FRACTION."""
        ctx, e = self.table.ctx, cc.best
        tps = e.tokens_per_s_per_gpu
        sr = speed_range(
            tps, ctx.instance.gpu, ctx.model.spec, e.cand.precision, ctx.seq_len, ctx.constants
        )
        return max(1.0 + C.TIE_FRACTION, sr.high / tps if tps > 0 else 1.0)

    def _could_cost(self, n: int, hours: float, top: int) -> bool:
        """Whether the choice on `n` could take at most `hours`: some candidate of a precision
        the precision step could choose there does."""
        table = self.table
        if (
            table.pins.precision is None
            and "bf16" in table.precisions
            and bf16_unless_it_cannot_fit(table.ctx.model.spec, table.ctx.packed)
            and table.fits(n, ("bf16",))
        ):
            return table.any_within(n, hours, ("bf16",), top)
        return table.any_within(n, hours, top=top)

    def evaluated(self, n: int) -> list[Evaluation]:
        return [e for p in self.table.precisions for e in self.table.evaluated(n, p)]


def _by_time_notes(cc: CountChoice, met: bool, allowed: list[int], deadline: float) -> list[Note]:
    if met:
        return [
            reason(
                "count_auto",
                f"instance_count auto: {cc.count} is the fewest instances that finish within "
                f"the deadline of {deadline:g} h ({cc.hours:.1f} h)",
            )
        ]
    return [
        warning(
            "no_count_meets_deadline",
            f"no instance count up to {allowed[-1]} meets the deadline of {deadline:g} h; "
            f"the fastest is {cc.count} instances at {cc.hours:.1f} h",
        ),
        reason("count_auto", f"instance_count auto: {cc.count} instances is the fastest found"),
    ]


def _by_cost_note(cc: CountChoice, allowed: list[int], deadline: float | None, tie: float) -> Note:
    within = f" that finish within compute.deadline_hours {deadline:g}" if deadline else ""
    return reason(
        "count_auto",
        f"instance_count auto: {cc.count} is the cheapest ({usd_text(cc.cost)}) of the instance "
        f"counts {allowed[0]}-{allowed[-1]}{within}; more instances only when cheaper than "
        f"{usd_text(cc.cost / tie)}, this cost range's low end (a smaller saving is inside the "
        "prediction's uncertainty: a tie, which fewer nodes win)",
    )


def choose(table: Table, problem: Problem) -> Choice:
    """Step 3 and the choice handed on, for `problem` (its fixed count, or the counts auto may
    choose; its objective and deadlines)."""
    count, allowed, objective = problem.count, problem.allowed, problem.objective
    deadline, user_deadline = problem.deadline, problem.user_deadline
    counts = _Counts(table)
    notes: list[Note] = []
    late = False
    other: tuple[str, CountChoice] | None = None
    if count is not None:
        n, cc = count, counts.on(count)
    else:
        timed, met = counts.by_time(allowed, deadline)
        cheap = counts.by_cost(allowed, user_deadline)
        if objective == "cost" and cheap is not None:
            cc = cheap
            notes = [_by_cost_note(cheap, allowed, user_deadline, counts.tie(cheap))]
            other = ("time", timed) if timed else None
        else:
            cc, late = timed, timed is not None and not met
            notes = _by_time_notes(timed, met, allowed, deadline) if timed else []
            if objective == "cost" and timed is not None:
                notes.append(
                    warning(
                        "no_count_meets_deadline",
                        "optimize cost: no instance count finishes within "
                        f"compute.deadline_hours {user_deadline:g}; the fastest is shown",
                    )
                )
            other = ("cost", cheap) if cheap else None
        n = cc.count if cc is not None else allowed[-1]
    if cc is None:
        evaluated = counts.evaluated(n)
        least = min(evaluated, key=lambda e: (e.mem.total, e.hours))
        if count is None:
            notes = [warning("no_count_fits", f"no instance count up to {n} fits; showing {n}")]
        why = precision_step(table, dict.fromkeys(table.precisions))[1]
        return Choice(objective, n, least, False, False, evaluated, notes, why, None, None)
    in_time = None
    limit = problem.time_limit
    if limit is not None and cc.hours > limit and not problem.local:
        above = [k for k in allowed if k > n]
        in_time = counts.by_time(above, limit)[0] if above else None
    return Choice(
        objective, n, cc.best, True, late, counts.evaluated(n), notes, cc.notes, other, in_time
    )
