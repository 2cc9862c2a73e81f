"""The training plans a job runs on (the AWS half of the capacity, beside job/capacity.py):
`compute.training_plan` (an ARN, a name, or 'auto', which reserves the spec's own plan at most
once: `aws/reserve.py`) or each instance preference's plan, resolved and checked against the run
(status, type, count, window); a plan too short names the `bsm plans extend` command that would
make it fit. `find_preference_plans` (describe only, before the reattach check) and
`take_capacity` (after consent; may reserve) are submit's two capacity steps, for either plan
shape; neither builds the request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.plan_fit import PlanFit
from blackwell_sm.aws.training_plans import Consent, TrainingPlanInfo
from blackwell_sm.errors import AwsError, InfeasiblePlanError, SpecError

if TYPE_CHECKING:
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.planner.preferences import PlanSet, PreferencePlans
    from blackwell_sm.spec.run import RunSpec

Notify = Callable[[str], None]


class CapacityChoice(BaseModel):
    """Submit's capacity step: what the request is built with, and what it rests on."""

    model_config = ConfigDict(extra="forbid")

    training_plan_arn: str | None = None
    preference_arns: dict[int, str] = Field(default_factory=dict)
    info: TrainingPlanInfo | None = Field(None, description="The one-type job's plan, if any.")
    fit: PlanFit | None = Field(None, description="Whether the run fits it.")
    warnings: list[str] = Field(default_factory=list)


def find_preference_plans(aws: AwsContext, plans: PlanSet) -> dict[int, TrainingPlanInfo]:
    """Before the reattach check: each instance preference's plan, described (no purchase), so
    that a reattach compares the very list of ARNs. A one-type job's plan is taken later
    (`take_capacity`: 'auto' may reserve)."""
    if plans.preferences is None:
        return {}
    return resolve_preference_plans(aws, plans.preferences)


def take_capacity(
    aws: AwsContext,
    spec: RunSpec,
    plans: PlanSet,
    infos: dict[int, TrainingPlanInfo],
    *,
    base_name: str,
    run_index: int,
    done_steps: int = 0,
    consent: Consent,
    allow_partial: bool,
    say: Notify,
) -> CapacityChoice:
    """After consent: the training plans the job runs on, checked against the run (each
    preference's, or `compute.training_plan` resolved or reserved), sized by
    `job/capacity_need.py`."""
    if plans.preferences is not None:
        fits = check_preference_fits(
            infos, plans.preferences, allow_partial=allow_partial, done_steps=done_steps
        )
        return CapacityChoice(
            preference_arns={i: info.arn for i, info in infos.items()},
            warnings=[w for f in fits for w in f.warnings],
        )
    if spec.compute.training_plan is None:
        return CapacityChoice()
    info, fit = resolve_training_plan(
        aws,
        spec,
        plans.primary,
        base_name=base_name,
        run_index=run_index,
        done_steps=done_steps,
        consent=consent,
        allow_partial=allow_partial,
        say=say,
    )
    return CapacityChoice(training_plan_arn=info.arn, info=info, fit=fit, warnings=fit.warnings)


def resolve_preference_plans(
    aws: AwsContext, preferences: PreferencePlans
) -> dict[int, TrainingPlanInfo]:
    """DescribeTrainingPlan for each instance preference that names a plan (index -> plan)."""
    from blackwell_sm.aws import training_plans as tp

    out = {}
    for pp in preferences.preferences:
        if pp.training_plan is None:
            continue
        try:
            out[pp.index] = tp.describe_plan(aws.plans, pp.training_plan)
        except SpecError as e:
            e.field = f"compute.instance_preferences.{pp.index}.training_plan"
            raise
    return out


def check_preference_fits(
    infos: dict[int, TrainingPlanInfo],
    preferences: PreferencePlans,
    *,
    allow_partial: bool,
    done_steps: int = 0,
) -> list[PlanFit]:
    """Each preference's plan can take that preference's run (type, count, status, window)."""
    from blackwell_sm.aws.plan_fit import check_plan, require_fit
    from blackwell_sm.job.capacity_need import capacity_need

    fits = []
    for index, info in sorted(infos.items()):
        pp = preferences.preferences[index]
        fit = check_plan(
            info,
            instance_type=pp.instance_type,
            instance_count=pp.instance_count,
            need=capacity_need(pp.plan, done_steps=done_steps),
        )
        try:
            require_fit(fit, allow_partial=allow_partial)
        except (SpecError, InfeasiblePlanError) as e:
            e.message = f"instance_preferences[{index}] ({pp.instance_type}): {e.message}"
            if isinstance(e, SpecError):
                e.field = f"compute.instance_preferences.{index}.training_plan"
            raise
        fits.append(fit)
    return fits


def resolve_training_plan(
    aws: AwsContext,
    spec: RunSpec,
    plan: Plan,
    *,
    base_name: str,
    run_index: int = 1,
    done_steps: int = 0,
    consent: Consent,
    allow_partial: bool,
    say: Notify,
) -> tuple[TrainingPlanInfo, PlanFit]:
    """compute.training_plan (ARN, name or 'auto') → a checked plan the run can use."""
    from blackwell_sm.aws.plan_fit import check_plan, require_fit
    from blackwell_sm.aws.training_plans import describe_plan
    from blackwell_sm.job.capacity_need import capacity_need

    ref = spec.compute.training_plan
    assert ref is not None
    sm = aws.plans
    need = capacity_need(plan, done_steps=done_steps)
    if ref != "auto":
        info = describe_plan(sm, ref)
        fit = check_plan(
            info, instance_type=plan.instance.type, instance_count=plan.instance.count, need=need
        )
        try:
            require_fit(fit, allow_partial=allow_partial)
        except InfeasiblePlanError as e:
            e.hint = extension_advice(sm, info, fit) or e.hint
            raise
        return info, fit

    # 'auto': the plan named after the spec, reserved at most once (aws/reserve.py)
    from blackwell_sm.aws.reserve import reserve_auto

    return reserve_auto(
        aws,
        plan,
        base_name=base_name,
        run_index=run_index,
        consent=consent,
        allow_partial=allow_partial,
        say=say,
        need=need,
    )


def extension_advice(sm: Any, info: TrainingPlanInfo, fit: PlanFit) -> str | None:
    """For a plan too short: the `bsm plans extend` command with the best extension offering
    (the shortest that covers the missing hours), or None when there is none to name."""
    from blackwell_sm.aws.extensions import best_extension, search_extensions

    try:
        best = best_extension(search_extensions(sm, info), fit.extension_hours)
    except AwsError:  # the advice is a courtesy; the refusal stands without it
        return None
    if best is None:
        return None
    return (
        f"extend the plan by the {fit.extension_hours} h it lacks: bsm plans extend {info.name} "
        f"--to-fit SPEC.yaml (buys the shortest offering that makes the run fit; a retry buys "
        f"nothing), here --offering {best.offering_id} ({best.describe()}); or submit with "
        "--allow-partial to run until the plan ends and resume on the next one"
    )
