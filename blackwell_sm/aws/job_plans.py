"""The training plans a job runs on (the AWS half of the capacity, beside job/capacity.py):
`compute.training_plan` (an ARN, a name, or 'auto', which reserves the spec's own plan at most
once: `aws/reserve.py`) or each instance preference's plan, resolved and checked against the run
(status, type, count, window); a plan too short names the `bsm plans extend` command that would
make it fit. `resolve_plan_names` and `take_capacity` are submit's two capacity steps, for
either plan shape.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from blackwell_sm.errors import AwsError, InfeasiblePlanError, SpecError

if TYPE_CHECKING:
    from blackwell_sm.aws.plan_fit import PlanFit
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.training_plans import Consent, TrainingPlanInfo
    from blackwell_sm.job.request import JobRequest
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.planner.preferences import PlanSet, PreferencePlans
    from blackwell_sm.spec.run import RunSpec

Notify = Callable[[str], None]
Rebuild = Callable[..., "JobRequest"]  # build_job_request with the submit's own arguments


def resolve_plan_names(
    aws: AwsContext, plans: PlanSet, jr: JobRequest, rebuild: Rebuild
) -> tuple[JobRequest, dict[int, TrainingPlanInfo]]:
    """Before the reattach check: each instance preference's plan name becomes its ARN
    (describe only) and the request is rebuilt with them, so a reattach compares the very list.
    A one-type job's plan is taken later (`take_capacity`: 'auto' may reserve)."""
    if plans.preferences is None:
        return jr, {}
    infos = resolve_preference_plans(aws, plans.preferences)
    return rebuild(preference_arns={i: info.arn for i, info in infos.items()}), infos


def take_capacity(
    aws: AwsContext,
    spec: RunSpec,
    plans: PlanSet,
    jr: JobRequest,
    infos: dict[int, TrainingPlanInfo],
    rebuild: Rebuild,
    *,
    run_index: int,
    done_steps: int = 0,
    consent: Consent,
    allow_partial: bool,
    say: Notify,
) -> tuple[JobRequest, TrainingPlanInfo | None, PlanFit | None, list[str]]:
    """After consent: the training plans the job runs on, checked against the run (each
    preference's, or `compute.training_plan` resolved or reserved). Returns the request (with
    the plan ARN), the one-type job's plan and fit, and the warnings so far."""
    if plans.preferences is not None:
        fits = check_preference_fits(
            infos, plans.preferences, allow_partial=allow_partial, done_steps=done_steps
        )
        return jr, None, None, list(jr.warnings) + [w for f in fits for w in f.warnings]
    if spec.compute.training_plan is None:
        return jr, None, None, list(jr.warnings)
    info, fit = resolve_training_plan(
        aws,
        spec,
        plans.primary,
        base_name=jr.base_job_name,
        run_index=run_index,
        done_steps=done_steps,
        consent=consent,
        allow_partial=allow_partial,
        say=say,
    )
    jr = rebuild(training_plan_arn=info.arn)
    return jr, info, fit, list(jr.warnings) + fit.warnings


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
