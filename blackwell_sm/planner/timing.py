"""Time and scale, part of the explain step: a plan longer than the deadline says so (one longer
than a SageMaker job: planner/jobs.py), with the instance count, token count or sequence length that would finish
in time; a plan whose instance count passes a quota the planner knows, or the counts its search
covers, says which.
"""

from __future__ import annotations

import math
from typing import NamedTuple

from blackwell_sm.planner.frame import MAX_INSTANCES, Context
from blackwell_sm.planner.notes import Note, advice, warning
from blackwell_sm.planner.pick import Choice
from blackwell_sm.planner.search import evaluate
from blackwell_sm.planner.units import hours_text


class Quota(NamedTuple):
    """An account quota with its default value, as AWS documents it."""

    name: str
    default: int
    source: str


#: The instance-count quotas whose defaults the planner knows. A count above a default is not an
#: error (accounts raise quotas) but is said, with the quota's name, before anything is paid for.
QUOTAS: tuple[Quota, ...] = (
    Quota(
        "Maximum number of instances per training job",
        20,
        "SageMaker AI quotas, 'training limits per region' (docs.aws.amazon.com/sagemaker/latest/"
        "dg/feature-store-feature-processor-quotas.html), checked 2026-12-03",
    ),
)

#: Above this many instances a plan is beyond what the search covers and its tests check.
SCALE_WARNING_INSTANCES = MAX_INSTANCES


def deadline_notes(
    ctx: Context,
    choice: Choice,
    allowed: list[int],
    deadline: float | None,
    user_deadline: float | None,
) -> list[Note]:
    """Warnings (and, for a late instance_count auto, advice) for the chosen configuration's
    time past `deadline` (the time objective's: the user's, else 28 days; None: the cost
    objective without a user deadline, no time limit). A run longer than one job: jobs.py."""
    best, n = choice.best, choice.count
    hours = best.hours
    out: list[Note] = []
    if deadline is None or hours <= deadline:
        return out
    if user_deadline is not None:
        out.append(
            warning(
                "over_deadline",
                f"predicted {hours_text(hours)} exceeds compute.deadline_hours {user_deadline:g}",
            )
        )
    tips = _tips(ctx, choice, allowed, deadline)
    out.append(
        warning("misses_deadline", f"{n} instance(s) miss the {deadline:g} h limit; {tips[0].text}")
    )
    return out + (tips if choice.late else [])


def _tips(ctx: Context, choice: Choice, allowed: list[int], deadline: float) -> list[Note]:
    """What would finish within `deadline`: more instances, fewer tokens, a shorter sequence."""
    best, n = choice.best, choice.count
    faster = choice.in_time
    if faster is not None and faster.hours <= deadline:
        tips = [
            advice(
                "deadline_instances",
                f"compute.instance_count: {faster.count} finishes in {hours_text(faster.hours)} "
                f"(within {deadline:g} h)",
            )
        ]
    else:
        # Time falls at best as 1/count, so the fastest count found bounds what is needed.
        k, h = (faster.count, faster.hours) if faster else (n, best.hours)
        need = max(math.ceil(k * h / deadline), allowed[-1] + 1 if faster else 0)
        tips = [
            advice(
                "deadline_instances",
                f"at least {need} instances would be needed at this speed (the search covers up "
                f"to {allowed[-1]}: {k} take {hours_text(h)}); set compute.instance_count to "
                "plan one",
            )
        ]
    if ctx.total_steps is None and ctx.total_tokens:
        fit = int(ctx.total_tokens * deadline / best.hours * 0.99)
        tips.append(
            advice(
                "deadline_tokens",
                f"training.total_tokens: {fit:.4g} finishes within {deadline:g} h on {n}",
            )
        )
    c = best.cand
    if ctx.seq_len >= 512:
        shorter = ctx._replace(
            seq_len=ctx.seq_len // 2, global_batch_seqs=ctx.global_batch_seqs * 2
        )
        e = evaluate(shorter, c._replace(micro_batch_size=c.micro_batch_size * 2))
        if e.hours <= deadline:
            tips.append(
                advice(
                    "deadline_seq_len",
                    f"seq_len: {shorter.seq_len} finishes in {hours_text(e.hours)}",
                )
            )
    return tips


def scale_notes(count: int, instance_type: str, gpus_per_instance: int) -> list[Note]:
    """A note for every known quota default the count passes, and for a count beyond the
    search's range."""
    out = [
        warning(
            "quota_instances_per_job",
            f"{count} instances is above the default SageMaker quota '{q.name}' ({q.default}): "
            f"check it, and '{instance_type} for training job usage', in Service Quotas before "
            "submitting",
        )
        for q in QUOTAS
        if count > q.default
    ]
    if count > SCALE_WARNING_INSTANCES:
        out.append(
            warning(
                "scale_beyond_search",
                f"{count} instances ({count * gpus_per_instance:,} GPUs) is beyond the "
                f"{SCALE_WARNING_INSTANCES} the search covers: check the plan's communication "
                "terms",
            )
        )
    return out
