"""The explain step of the pipeline: the plan's words for the choice the pick step made. Why
each choice was made (reasons), what to watch (warnings), what single change would make an
infeasible plan fit (advice, each checked with the model), the runner-ups (`alternatives.py`),
time and scale (`timing.py`), and what the other objective would pick.

Every name shown to the user is a plan config name (the names `--set` takes).
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.advice import advice_for, memory_relief, near_miss_advice
from blackwell_sm.planner.alternatives import alternatives
from blackwell_sm.planner.batch import batch_text, plural
from blackwell_sm.planner.cp_choice import cp_reason
from blackwell_sm.planner.frame import Problem
from blackwell_sm.planner.levers import (
    offload_reason,
)
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.notes import Note, reason, warning
from blackwell_sm.planner.offload import offloadable
from blackwell_sm.planner.pick import Choice
from blackwell_sm.planner.plan import Alternative, ObjectivePick
from blackwell_sm.planner.precision import (
    PREFERRED_LOW,
    is_low,
    lowp_ineligible,
)
from blackwell_sm.planner.search import (
    Candidate,
    Context,
    Evaluation,
    Pins,
    steps_for,
)
from blackwell_sm.planner.timing import deadline_notes, scale_notes
from blackwell_sm.planner.units import hours_text, usd_text

OBJECTIVES = {
    "time": "the fewest instances that finish within the deadline, fastest on them",
    "cost": "the cheapest",
}


class Explanation(NamedTuple):
    notes: list[Note]
    alternatives: list[Alternative]
    other: ObjectivePick | None


def explain(problem: Problem, choice: Choice) -> Explanation:
    """Every note of the plan and its runner-ups, for `choice` made on `problem`."""
    ctx, pins, best = problem.ctx, problem.pins, choice.best
    c = best.cand
    notes = [*problem.notes, *choice.notes]
    line, other = objective_line(problem, choice)
    notes.append(line)
    if choice.feasible and not problem.local:
        notes += deadline_notes(
            ctx, choice, problem.allowed, problem.time_limit, problem.user_deadline
        )
    notes += reasons_for(best, ctx, pins)
    why_cp = cp_reason(choice.evaluated, best, ctx, pins)
    if why_cp:
        notes.append(why_cp)
    if offloadable(ctx.instance):
        notes.append(offload_reason(choice.evaluated, best, ctx, pins))
    tie = [n for n in choice.config_notes if n.code == "tie_free_memory"]
    if pins.precision:
        notes.append(reason("precision", f"precision {c.precision} (pinned)"))
        why = lowp_ineligible(ctx.model.spec, c.precision)
        if why:
            notes.append(
                warning(
                    "precision_partial",
                    f"precision {c.precision}: {why}; those linears stay bf16",
                )
            )
    else:
        said = [n for n in choice.config_notes if n not in tie]
        notes += said
        if not any(n.code in ("precision_chosen", "precision_kept_bf16") for n in said):
            notes.append(reason("precision", f"precision {c.precision}"))
    notes += tie
    if c.global_batch_seqs != ctx.global_batch_seqs:
        notes.append(
            warning(
                "batch_rounded",
                f"global batch is {plural(c.global_batch_seqs, 'sequence')}, not the "
                f"{ctx.global_batch_seqs:,} asked: "
                f"{batch_text(c.micro_batch_size, c.grad_accum_steps, c.data_parallel)}"
                + _epochs_kept(ctx, c),
            )
        )
    notes += memory_notes(choice, ctx, pins, problem.allowed)
    if not problem.local:
        notes += scale_notes(choice.count, ctx.instance.name, ctx.instance.gpus_per_instance)
    alts = alternatives(
        choice.evaluated, best, ctx, pins, count_auto=problem.count is None and not problem.local
    )
    return Explanation(notes, alts, other)


def _epochs_kept(ctx: Context, c: Candidate) -> str:
    """With training.epochs, how the steps follow the changed batch (the epochs stay true)."""
    if ctx.epochs is None:
        return ""
    return (
        f"; training.epochs {ctx.epochs:g} kept: {steps_for(ctx, c):,} steps of "
        f"{c.global_batch_seqs} sequences"
    )


def memory_notes(choice: Choice, ctx: Context, pins: Pins, allowed: list[int]) -> list[Note]:
    """Near the limit, a near miss, communication-bound, or (nothing fits) what would fit."""
    best, limit = choice.best, ctx.instance.gpu.memory_gib
    out: list[Note] = []
    if best.fits and best.mem.total > 0.9 * limit * GIB:
        relief = memory_relief(choice.evaluated, best, ctx)
        out.append(
            warning(
                "memory_high",
                f"predicted memory {best.memory_gib:.1f} GiB is above 90% of {limit:.1f} GiB"
                + (f"; {relief}" if relief else ""),
            )
        )
    if choice.feasible:
        out += near_miss_advice(choice.evaluated, best, ctx)
        bound = comm_bound(best, ctx)
        if bound:
            out.append(bound)
        return out
    usable = limit * (1.0 - C.MEMORY_HEADROOM)
    out += advice_for(ctx, choice.count, pins, best, allowed)
    out.append(
        warning(
            "no_fit",
            f"no configuration fits: the best candidate needs {best.memory_gib:.1f} GiB per "
            f"GPU, the usable limit is {usable:.1f} GiB ({limit:.1f} GiB less "
            f"{C.MEMORY_HEADROOM:.0%} headroom)",
        )
    )
    return out


def _pick_text(count: int, e: Evaluation) -> str:
    cost = "" if e.cost_usd is None else f", {usd_text(e.cost_usd)}"
    return f"{count} instance{'s' if count > 1 else ''}: {hours_text(e.hours)}{cost}"


def objective_line(problem: Problem, choice: Choice) -> tuple[Note, ObjectivePick | None]:
    """One reason naming the objective that chose the plan and what the other would pick."""
    mine, theirs = problem.objective, "cost" if problem.objective == "time" else "time"
    head = f"objective {mine} ({OBJECTIVES[mine]})"
    best = choice.best
    if problem.local or best.cost_usd is None:
        return reason("objective", f"{head}; no price, so cost cannot be compared"), None
    if problem.count is not None or choice.other is None:
        why = (
            "on one instance count cost follows time"
            if problem.count is not None
            else "nothing else qualifies"
        )
        pick = ObjectivePick(
            objective=theirs,
            instance_count=choice.count,
            hours=round(best.hours, 3),
            cost_usd=round(best.cost_usd, 2),
            same_as_plan=True,
        )
        return reason("objective", f"{head}; --optimize {theirs} picks the same ({why})"), pick
    _, cc = choice.other
    same = cc.best.cand == best.cand
    pick = ObjectivePick(
        objective=theirs,
        instance_count=cc.count,
        hours=round(cc.hours, 3),
        cost_usd=None if cc.best.cost_usd is None else round(cc.best.cost_usd, 2),
        same_as_plan=same,
    )
    if same:
        return reason("objective", f"{head}; --optimize {theirs} picks the same"), pick
    return reason(
        "objective",
        f"{head}: {_pick_text(choice.count, best)}; --optimize {theirs} would pick "
        f"{_pick_text(cc.count, cc.best)}",
    ), pick


def comm_bound(best: Evaluation, ctx: Context) -> Note | None:
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
    if not is_low(c.precision) and ctx.instance.gpu.supports(PREFERRED_LOW):
        helps.append(f"precision={PREFERRED_LOW} (fp8 all-gathers move half the bytes)")
    helps.append("fewer instances with more steps each (if the deadline allows)")
    return warning(
        "comm_bound",
        f"communication-bound: exposed collectives are {share:.0%} of the step "
        f"({t.exposed_comm_s:.2f} of {t.step_s:.2f} s); would help: {'; '.join(helps)}",
    )


def reasons_for(e: Evaluation, ctx: Context, pins: Pins) -> list[Note]:
    c, gpn = e.cand, ctx.instance.gpus_per_instance
    out = []
    layout = "pinned" if pins.shard_degree or pins.replicate_degree else "fastest fitting layout"
    if c.replicate_degree == 1:
        where = "inside the node" if c.shard_degree <= gpn else f"across {c.instance_count} nodes"
        text = f"shard_degree {c.shard_degree} (full shard {where}, {layout})"
    else:
        links = (
            "all-gathers stay on NVLink, only the gradient all-reduce crosses EFA"
            if c.shard_degree <= gpn
            else "shard groups span nodes; replicas all-reduce gradients over EFA"
        )
        text = f"HSDP: shard {c.shard_degree} x replicate {c.replicate_degree} ({layout}): {links}"
    out.append(reason("layout", text))
    mb_src = "pinned" if pins.micro_batch_size else "fastest that fits"
    out.append(
        reason(
            "batch",
            f"{batch_text(c.micro_batch_size, c.grad_accum_steps, c.data_parallel)} per step "
            f"(micro-batch {mb_src})",
        )
    )
    modes = {
        "none": "no checkpointing needed: fastest",
        "selective": "selective: saves matmul and attention outputs, recomputes the cheap ops",
        "selective-op": "selective-op: saves every other matmul and the attention, recomputes "
        "the rest (torchtitan's per-op policy)",
        "full": "full: only block inputs kept; recompute costs ~1/3 more block FLOPs",
    }
    mode = c.activation_checkpointing
    ac = "pinned" if pins.activation_checkpointing else modes.get(mode, "fastest that fits")
    out.append(reason("checkpointing", f"activation_checkpointing {mode} ({ac})"))
    if c.shard_degree > 1:
        what = (
            "true (frees gathered params after forward; re-gathers in backward)"
            if c.reshard_after_forward
            else "false (keeps gathered params to backward: saves one all-gather per micro-batch)"
        )
        out.append(reason("reshard", f"reshard_after_forward {what}"))
    pinned = " (pinned)" if pins.compile is not None else ""
    out.append(reason("compile", f"compile {str(c.compile).lower()}{pinned}"))
    return out
