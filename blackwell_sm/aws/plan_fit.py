"""Whether a run fits a training plan (`check_plan`) and the refusal when it does not
(`require_fit`): status, instance type and count, and the hours the run needs
(`job/capacity_need.py`, the one sizing rule) against the hours left before the plan's
instances are reclaimed."""

from __future__ import annotations

import math
from datetime import datetime

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.training_plans import (
    TARGET,
    USABLE_STATUSES,
    TrainingPlanInfo,
    fmt_time,
    utcnow,
)
from blackwell_sm.errors import InfeasiblePlanError, SpecError
from blackwell_sm.job.capacity_need import RECLAIM_HOURS, CapacityNeed


class PlanFit(BaseModel):
    """Whether a run fits a plan, and if not, what it would take."""

    model_config = ConfigDict(extra="forbid")

    plan: str
    usable: bool  # status, instance type and count are right
    fits: bool  # ... and the predicted run ends before the plan does
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    needed_hours: float
    usable_hours: float
    need: CapacityNeed = Field(description="What the run needs, and which estimate it rests on.")
    resume_cycles: int = Field(description="Plans of this length the run needs (1 = fits).")
    extension_hours: int = Field(description="ExtendTrainingPlan hours that would make it fit.")


def check_plan(
    info: TrainingPlanInfo,
    *,
    instance_type: str,
    instance_count: int,
    need: CapacityNeed,
    now: datetime | None = None,
) -> PlanFit:
    """Can a run that needs `need` (`api.capacity.capacity_need`) on `instance_count` x
    `instance_type` use this plan?"""
    now = now or utcnow()
    problems: list[str] = []
    warnings: list[str] = []
    if info.status not in USABLE_STATUSES:
        problems.append(
            f"training plan {info.name} is {info.status}"
            f"{f' ({info.status_message})' if info.status_message else ''}; a job can only "
            "use a Scheduled or Active plan"
        )
    if TARGET not in info.target_resources and info.target_resources:
        problems.append(
            f"training plan {info.name} is for {', '.join(info.target_resources)}, not training jobs"
        )
    if info.instance_types and instance_type not in info.instance_types:
        problems.append(
            f"training plan {info.name} reserves {', '.join(info.instance_types)}, but the job "
            f"asks for {instance_type} (the types must be equal)"
        )
    total = info.total_instance_count
    free = info.available_instance_count
    if total is not None and total < instance_count:
        problems.append(
            f"training plan {info.name} has {total} instances in all; the job needs "
            f"{instance_count}"
        )
    elif free is not None and info.status == "Active" and free < instance_count:
        warnings.append(
            f"training plan {info.name} has {free} of {total} instances free "
            f"({info.in_use_instance_count or 0} in use); the job waits until {instance_count} "
            "are free (up to 2 days, then InsufficientCapacityError)"
        )

    run_hours, startup_hours, needed = need.run_hours, need.startup_hours, need.needed_hours
    start = max(now, info.start_time) if info.start_time else now
    left = (info.end_time - start).total_seconds() / 3600 if info.end_time else math.inf
    usable_hours = max(0.0, left - RECLAIM_HOURS)
    fits = needed <= usable_hours
    per_plan = (info.duration_hours or left) - RECLAIM_HOURS - startup_hours
    cycles = 1 if fits else (math.ceil(run_hours / per_plan) if per_plan > 0 else 0)
    extension = 0 if fits else math.ceil(needed - usable_hours)
    if not fits:
        warnings.append(
            f"the predicted run ({run_hours:.1f} h, the range's high end, + {startup_hours:g} h "
            "start-up) does not fit the "
            f"{usable_hours:.1f} usable hours left on {info.name} (it ends {fmt_time(info.end_time)}, "
            f"instances are reclaimed {RECLAIM_HOURS:g} h before): it needs "
            + (f"{cycles} checkpoint-resume cycles on plans of this length" if cycles else "")
            + f" or ExtendTrainingPlan by {extension} h"
        )
    return PlanFit(
        plan=info.name,
        usable=not problems,
        fits=fits and not problems,
        problems=problems,
        warnings=warnings,
        needed_hours=round(needed, 3),
        usable_hours=round(usable_hours, 3) if math.isfinite(usable_hours) else 1e9,
        need=need,
        resume_cycles=cycles,
        extension_hours=extension,
    )


def require_fit(fit: PlanFit, *, allow_partial: bool = False) -> None:
    """Refuse a plan that cannot take the job (SpecError), or one too short (Infeasible)."""
    if fit.problems:
        raise SpecError(
            "cannot submit on this training plan: " + "; ".join(fit.problems),
            field="compute.training_plan",
            hint="`bsm plans list` shows your plans; `bsm plans search` finds capacity",
        )
    if not fit.fits and not allow_partial:
        raise InfeasiblePlanError(
            "the run does not fit the training plan: " + "; ".join(fit.warnings[-1:]),
            hint="submit with --allow-partial to run until the plan ends (a checkpoint is saved "
            "and `bsm submit --new` on the next plan resumes), or extend the plan",
        )
