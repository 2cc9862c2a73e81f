"""Capacity, asked from a notebook or by `bsm plans ...`: how many hours a spec's run needs from
a training plan (`job/capacity_need.py`, the one rule: the predicted range's high end +
start-up + the reclaim before a plan ends), and whether a training plan can take that run.

    from blackwell_sm.api.capacity import need_for
    plan, need = need_for("spec.yaml")
    need.plan_hours, need.describe()
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from blackwell_sm.job.capacity_need import CapacityNeed, capacity_need

if TYPE_CHECKING:
    from blackwell_sm.aws.plan_fit import PlanFit
    from blackwell_sm.aws.training_plans import TrainingPlanInfo
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.spec.run import RunSpec

__all__ = ["CapacityNeed", "capacity_need", "fit", "need_for", "plan_on", "plan_on_training_plan"]


def _spec(spec: RunSpec | str | Path) -> RunSpec:
    from blackwell_sm.spec import load_spec

    return spec if not isinstance(spec, (str, Path)) else load_spec(spec)


def plan_on(spec: RunSpec | str | Path, instance_type: str | None = None) -> Plan:
    """The spec's plan on `instance_type` (None: the spec's own type, or its first preference)."""
    from blackwell_sm.planner.preferences import plan_for_type
    from blackwell_sm.planner.profile import profile_for

    rs = _spec(spec)
    return plan_for_type(rs, instance_type, profile_for(rs))


def need_for(
    spec: RunSpec | str | Path, instance_type: str | None = None, *, done_steps: int = 0
) -> tuple[Plan, CapacityNeed]:
    """(the spec's plan on `instance_type`, the hours its run needs from a training plan)."""
    plan = plan_on(spec, instance_type)
    return plan, capacity_need(plan, done_steps=done_steps)


def plan_on_training_plan(spec: RunSpec | str | Path, info: TrainingPlanInfo) -> Plan:
    """The spec's plan on the training plan's instance type (its preference's, with
    preferences; the spec's own when the plan reserves several types)."""
    only = info.instance_types[0] if len(info.instance_types) == 1 else None
    return plan_on(spec, only)


def fit(
    info: TrainingPlanInfo,
    plan: Plan,
    *,
    end: datetime | None = None,
    now: datetime | None = None,
    done_steps: int = 0,
) -> PlanFit:
    """Whether `plan`'s run fits training plan `info` (as if it ended at `end`, when given)."""
    from blackwell_sm.aws.plan_fit import check_plan

    if end is not None:
        info = info.model_copy(update={"end_time": end})
    return check_plan(
        info,
        instance_type=plan.instance.type,
        instance_count=plan.instance.count,
        need=capacity_need(plan, done_steps=done_steps),
        now=now,
    )
