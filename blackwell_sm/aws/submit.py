"""`submit(spec)`: plan, build the request, find or book capacity, upload, create, check.

Order matters, so that no failure leaves partial state that a job would use:
1. plan and build the request (pure; a dry run stops here: no AWS call, nothing uploaded);
2. refuse REPLACE-ME placeholders before any call;
3. reattach: a job with the spec's deterministic name and spec-hash tag is returned as is
   (a CI rerun never duplicates a job or books a second plan), once its live ResourceConfig
   is checked against the capacity asked for (capacity is part of the name's hash, so a
   difference means the job was changed outside the toolkit: refused, never reused);
4. resolve the training plan (ARN, name or 'auto' → search and reserve with consent) and check
   that the run fits it;
5. check the bucket is in the job's region (GetBucketLocation), upload the code bundle (once
   per content hash, verified) and only then create the job;
6. describe the job and fail loudly if SageMaker did not keep the plan ARN or instance type.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.errors import AwsError, InfeasiblePlanError, SpecError

if TYPE_CHECKING:
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.training_plans import Confirm, Consent, PlanFit, TrainingPlanInfo
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.spec.run import RunSpec

Notify = Callable[[str], None]
AUTO_OFFERINGS_SHOWN = 3


def as_spec(spec: RunSpec | str | Path | dict[str, Any]) -> RunSpec:
    from blackwell_sm.spec.run import RunSpec, load_spec, parse_spec

    if isinstance(spec, RunSpec):
        return spec
    if isinstance(spec, dict):
        return parse_spec(spec)
    if isinstance(spec, (str, Path)):
        return load_spec(spec)
    raise SpecError(f"submit() takes a RunSpec, a path or a mapping, not {type(spec).__name__}")


def region_choice(spec: RunSpec, flag: str | None = None) -> Any:
    """The job's region and where it came from: --region, job.region, environment, profile."""
    from blackwell_sm.aws.session import choose_region

    return choose_region(flag, spec.job.region if spec.job else None)


def _region(spec: RunSpec) -> str | None:
    return region_choice(spec).region


def prepare(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    training_plan: str | None = None,
    new: bool = False,
    run_index: int = 1,
    done_steps: int = 0,
) -> tuple[RunSpec, Any, Any]:
    """(spec, plan, JobRequest) without any AWS call: what a dry run shows. With
    `compute.instance_preferences` the plan is a PreferencePlans (a plan per type)."""
    from blackwell_sm.job.request import build_job_request
    from blackwell_sm.job.wheels import fetch_for
    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.planner.profile import profile_for
    from blackwell_sm.spec.run import with_overrides

    rs = as_spec(spec)
    run = {"run_index": run_index, "done_steps": done_steps}
    if training_plan is not None:
        rs = with_overrides(rs, {"compute.training_plan": training_plan})
    from blackwell_sm.spec.hf_files import check_init_from

    check_init_from(rs)  # a local init_from's headers against the model, before planning
    if rs.compute.instance_preferences:
        from blackwell_sm.planner.preferences import plan_preferences

        plans = plan_preferences(rs, profile_for(rs))
        plans.require_feasible()  # exit 3 naming each preference that cannot fit
        wheels = fetch_for(rs, plans.primary, plans.plans[1:])
        jr = build_job_request(rs, plans, new=new, region=_region(rs), wheelhouse=wheels, **run)
        return rs, plans, jr
    plan = make_plan(rs, calibration=profile_for(rs))
    if not plan.feasible:
        raise InfeasiblePlanError(
            f"no configuration of {rs.model.name} fits {plan.instance.count} x "
            f"{plan.instance.type}",
            plan=plan,
            hint="; ".join(plan.advice) or "see `bsm plan SPEC`",
        )
    wheels = fetch_for(rs, plan)  # the container's wheels: downloaded once, then cached
    jr = build_job_request(rs, plan, new=new, region=_region(rs), wheelhouse=wheels, **run)
    return rs, plan, jr


def submit(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    training_plan: str | None = None,
    new: bool = False,
    yes: bool = False,
    dry_run: bool = False,
    allow_partial: bool = False,
    aws: AwsContext | None = None,
    confirm: Confirm | None = None,
    notify: Notify | None = None,
    run_index: int = 1,
    done_steps: int = 0,
) -> TrainingJob:
    """Submit `spec` as a SageMaker training job and return its handle.

    `training_plan` overrides `compute.training_plan` (ARN, name or 'auto'). `new` forces a fresh
    job name (it still resumes from the spec's checkpoints). `yes` agrees to reserving a plan
    for 'auto'; otherwise `confirm` (a callable that asks a person, as the CLI's prompt does) is
    asked, and without one ConsentRequiredError is raised. The AWS layer never prompts itself.
    `allow_partial` accepts a plan that ends before the predicted run does. `run_index` and
    `done_steps` make the N-th job of a run longer than one job (`aws/run.py`).
    """
    say = notify or (lambda _msg: None)
    rs, plan, jr = prepare(
        spec, training_plan=training_plan, new=new, run_index=run_index, done_steps=done_steps
    )
    run = {"run_index": run_index, "done_steps": done_steps}
    prefs = None
    if rs.compute.instance_preferences:
        prefs, plan = plan, plan.primary
    if dry_run:
        job = TrainingJob(
            jr.job_name,
            region=jr.region,
            plan=plan,
            job_request=jr,
            dry_run=True,
            warnings=jr.warnings,
            preference_plans=prefs,
        )
        job.region_source = region_choice(rs).source
        return job
    if jr.placeholders:
        raise SpecError(
            "the spec still has REPLACE-ME placeholders: " + ", ".join(jr.placeholders),
            field=jr.placeholders[0],
            hint="set them to your role ARN and S3 locations (`bsm submit SPEC --dry-run` shows "
            "the request)",
        )

    from blackwell_sm.aws.jobs import JobInfo, create_job, find_job, owned_by_spec
    from blackwell_sm.aws.s3 import check_bucket_region, upload_bundle
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.job.request import build_job_request

    aws = aws or AwsContext(jr.region)
    sm = aws.sagemaker
    pref_fits: list[PlanFit] = []
    if prefs is not None:
        # Plan names become ARNs first (describe only), so a reattach compares the very list.
        infos = resolve_preference_plans(aws, prefs)
        jr = build_job_request(
            rs, prefs, new=new, region=jr.region, wheelhouse=jr.wheelhouse,
            preference_arns={i: info.arn for i, info in infos.items()}, **run,
        )  # fmt: skip
    if not new:
        existing = find_job(sm, jr.job_name)
        if existing is not None:
            if not owned_by_spec(sm, existing, jr.spec_hash):
                raise AwsError(
                    f"a training job named {jr.job_name} exists but was not made from this spec "
                    "(its bsm:spec-hash tag differs)",
                    code="resource_in_use",
                    hint="submit with --new for a fresh job name",
                )
            info = JobInfo.from_describe(existing)
            _require_same_capacity(existing, jr, rs.compute.training_plan)
            say(f"reattached to {jr.job_name} ({info.status}): the same spec was submitted before")
            if info.status in ("Failed", "Stopped"):
                say(
                    f"note: {jr.job_name} ended {info.status}"
                    + (f" ({info.failure_reason})" if info.failure_reason else "")
                    + "; submit with --new to run the spec again (it resumes from its checkpoints)"
                )
            return TrainingJob(
                jr.job_name, aws=aws, plan=plan, job_request=jr, reattached=True,
                warnings=jr.warnings, preference_plans=prefs,
            )  # fmt: skip

    from blackwell_sm.aws.cost import confirm_cost

    confirm_cost(rs, plan, consent=True if yes else confirm)
    plan_info: TrainingPlanInfo | None = None
    fit: PlanFit | None = None
    warnings = list(jr.warnings)
    if prefs is not None:
        pref_fits = check_preference_fits(infos, prefs, allow_partial=allow_partial)
        warnings += [w for f in pref_fits for w in f.warnings]
    elif rs.compute.training_plan is not None:
        plan_info, fit = resolve_training_plan(
            aws,
            rs,
            plan,
            base_name=jr.base_job_name,
            consent=True if yes else confirm,
            allow_partial=allow_partial,
            say=say,
        )
        jr = build_job_request(
            rs, plan, new=new, training_plan_arn=plan_info.arn, region=jr.region,
            wheelhouse=jr.wheelhouse, **run,
        )  # fmt: skip
        warnings = list(jr.warnings) + fit.warnings

    check_bucket_region(aws.s3, jr.bundle_s3_uri, aws.region)
    upload = upload_bundle(aws.s3, jr.bundle.data, jr.bundle_s3_uri, sha256=jr.bundle.sha256)
    say(
        ("uploaded" if upload.uploaded else "reusing")
        + f" code bundle {jr.bundle_s3_uri} ({upload.size_bytes} bytes)"
    )
    _described, created = create_job(sm, jr.request, spec_hash=jr.spec_hash)
    say(
        f"{'created' if created else 'found (created by a retried call)'} training job "
        f"{jr.job_name} in {aws.region}"
        + (f" on training plan {plan_info.name}" if plan_info else "")
    )
    return TrainingJob(
        jr.job_name,
        aws=aws,
        plan=plan,
        job_request=jr,
        created=True,
        upload=upload,
        training_plan=plan_info,
        plan_fit=fit,
        warnings=warnings,
        preference_plans=prefs,
    )


def resolve_preference_plans(aws: AwsContext, prefs: Any) -> dict[int, TrainingPlanInfo]:
    """DescribeTrainingPlan for each instance preference that names a plan (index -> plan)."""
    from blackwell_sm.aws import training_plans as tp

    out = {}
    for pp in prefs.preferences:
        if pp.training_plan is None:
            continue
        try:
            out[pp.index] = tp.describe_plan(aws.plans, pp.training_plan)
        except SpecError as e:
            e.field = f"compute.instance_preferences.{pp.index}.training_plan"
            raise
    return out


def check_preference_fits(
    infos: dict[int, TrainingPlanInfo], prefs: Any, *, allow_partial: bool
) -> list[PlanFit]:
    """Each preference's plan can take that preference's run (type, count, status, window)."""
    from blackwell_sm.aws import training_plans as tp
    from blackwell_sm.job.request import STARTUP_HOURS

    fits = []
    for index, info in sorted(infos.items()):
        pp = prefs.preferences[index]
        fit = tp.check_plan(
            info,
            instance_type=pp.instance_type,
            instance_count=pp.instance_count,
            run_hours=pp.plan.run.pessimistic_hours,  # the range's high end, as for one type
            startup_hours=STARTUP_HOURS,
        )
        try:
            tp.require_fit(fit, allow_partial=allow_partial)
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
    consent: Consent,
    allow_partial: bool,
    say: Notify,
) -> tuple[TrainingPlanInfo, PlanFit]:
    """compute.training_plan (ARN, name or 'auto') → a checked plan the run can use."""
    from blackwell_sm.aws import training_plans as tp
    from blackwell_sm.job.request import STARTUP_HOURS

    ref = spec.compute.training_plan
    assert ref is not None
    sm = aws.plans
    kw = dict(
        instance_type=plan.instance.type,
        instance_count=plan.instance.count,
        run_hours=plan.run.pessimistic_hours,  # capacity is sized from the range's high end
        startup_hours=STARTUP_HOURS,
    )
    if ref != "auto":
        info = tp.describe_plan(sm, ref)
        fit = tp.check_plan(info, **kw)
        try:
            tp.require_fit(fit, allow_partial=allow_partial)
        except InfeasiblePlanError as e:
            e.hint = extension_advice(sm, info, fit) or e.hint
            raise
        return info, fit

    # 'auto': a plan this spec booked before (same name) is reused, never bought twice.
    name = tp.auto_plan_name(base_name)
    existing = tp.find_plan(sm, name)
    if existing is not None:
        fit = tp.check_plan(existing, **kw)
        if fit.usable:
            tp.require_fit(fit, allow_partial=allow_partial)
            say(f"using training plan {name}, reserved for this spec before")
            return existing, fit
    hours = plan.run.pessimistic_hours + STARTUP_HOURS + tp.RECLAIM_HOURS
    offers = tp.search_offerings(
        sm,
        instance_type=plan.instance.type,
        instance_count=plan.instance.count,
        duration_hours=hours,
        start_after=tp.utcnow(),
    )
    if not offers:
        raise AwsError(
            f"no training plan offerings for {plan.instance.count} x {plan.instance.type} for "
            f"{hours:.0f} h",
            code="capacity",
            hint="try fewer instances, a shorter run (training.total_tokens), another region, "
            "or `bsm plans search` with a later window",
        )
    say("best training plan offerings:")
    for i, o in enumerate(offers[:AUTO_OFFERINGS_SHOWN], 1):
        say(f"  {i}. {o.describe()}")
    info = tp.reserve(sm, offers[0], name, consent=consent, tags={"bsm:job": base_name})
    info = tp.wait_until_booked(sm, info)
    fit = tp.check_plan(info, **kw)
    tp.require_fit(fit, allow_partial=allow_partial)
    say(f"reserved training plan {info.name} ({info.arn})")
    return info, fit


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
        f"--offering {best.offering_id} ({best.describe()}); or submit with --allow-partial to "
        "run until the plan ends and resume on the next one"
    )


def _require_same_capacity(described: dict[str, Any], jr: Any, plan_ref: str | None) -> None:
    """Refuse to reattach to a job whose live capacity is not the one asked for."""
    from blackwell_sm.aws.jobs import capacity_differences

    asked = jr.request["ResourceConfig"]
    ref = plan_ref if asked.get("TrainingPlanArn") is None else None
    problems = capacity_differences(described.get("ResourceConfig", {}), asked, plan_ref=ref)
    if problems:
        name = jr.job_name
        raise AwsError(
            f"training job {name} exists with other capacity than this submit asks for: "
            + "; ".join(problems)
            + ". It was not reattached.",
            code="capacity_mismatch",
            hint=f"submit with --new for a fresh job on the capacity asked for, or stop the "
            f"other job first (`bsm stop {name}`)",
        )
