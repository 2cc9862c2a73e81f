"""Time as a constraint: a plan longer than the deadline or than one SageMaker job says so, with
the instance count, token count or sequence length that would finish in time; and the warnings
for an absurd scale (more instances than the search covers).
"""

from __future__ import annotations

import math

from blackwell_sm.planner.counts import choose_count
from blackwell_sm.planner.search import MAX_INSTANCES, Context, Evaluation, Pins, evaluate
from blackwell_sm.planner.units import hours_text
from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

#: Above this many instances a plan is flagged as an unusual scale (the search's own ceiling).
SCALE_WARNING_INSTANCES = MAX_INSTANCES


def _faster_count(
    ctx: Context, pins: Pins, allowed: list[int], n: int, deadline: float
) -> tuple[int, float] | None:
    """Among the counts above `n`, the fewest that finish within the deadline, else the
    fastest found (count, hours); None when no larger count fits."""
    above = [k for k in allowed if k > n]
    if not above:
        return None
    k, res, _, _ = choose_count(ctx, pins, above, deadline)
    return (k, res.best.hours) if res.feasible else None


def time_limit_notes(
    ctx: Context,
    pins: Pins,
    allowed: list[int],
    best: Evaluation,
    deadline: float,
    user_deadline: float | None,
) -> tuple[list[str], list[str]]:
    """(warnings, what would finish in time) for the chosen evaluation `best`."""
    warnings: list[str] = []
    tips: list[str] = []
    hours, n = best.hours, best.cand.instance_count
    if hours > MAX_RUNTIME_HOURS:
        jobs = math.ceil(hours / MAX_RUNTIME_HOURS)
        warnings.append(
            f"predicted {hours_text(hours)} is longer than one SageMaker job (28-day "
            f"MaxRuntime, {MAX_RUNTIME_HOURS} h): the run needs at least {jobs} jobs, each resuming "
            "from the same checkpoints (bsm submit --new resumes)"
        )
    if hours <= deadline:
        return warnings, tips
    if user_deadline is not None:
        warnings.append(
            f"predicted {hours_text(hours)} exceeds compute.deadline_hours {user_deadline:g}"
        )
    faster = _faster_count(ctx, pins, allowed, n, deadline)
    if faster and faster[1] <= deadline:
        k, h = faster
        tips.append(
            f"compute.instance_count: {k} finishes in {hours_text(h)} (within {deadline:g} h)"
        )
    else:
        # Time falls at best as 1/count, so the fastest count found bounds what is needed.
        k, h = faster or (n, hours)
        need = max(math.ceil(k * h / deadline), allowed[-1] + 1 if faster else 0)
        tips.append(
            f"at least {need} instances would be needed at this speed (the search covers up "
            f"to {allowed[-1]}: {k} take {hours_text(h)}); set compute.instance_count to plan one"
        )
    warnings.append(f"{n} instance(s) miss the {deadline:g} h limit; {tips[0]}")
    if ctx.total_steps is None and ctx.total_tokens:
        fit = int(ctx.total_tokens * deadline / hours * 0.99)
        tips.append(f"training.total_tokens: {fit:.4g} finishes within {deadline:g} h on {n}")
    c = best.cand
    if ctx.seq_len >= 512:
        shorter = ctx._replace(
            seq_len=ctx.seq_len // 2, global_batch_seqs=ctx.global_batch_seqs * 2
        )
        e = evaluate(shorter, c._replace(micro_batch_size=c.micro_batch_size * 2))
        if e.hours <= deadline:
            tips.append(f"seq_len: {shorter.seq_len} finishes in {hours_text(e.hours)}")
    return warnings, tips


def scale_warnings(count: int) -> list[str]:
    """Warnings for a scale beyond what the toolkit's search and tests cover."""
    if count > SCALE_WARNING_INSTANCES:
        return [
            f"{count} instances ({count * 8:,} GPUs) is beyond the {SCALE_WARNING_INSTANCES} the "
            "search covers: check the account quota and the plan's communication terms"
        ]
    return []
