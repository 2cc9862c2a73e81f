"""`submit(spec)`: plan, build the request, find or book capacity, upload, create, check.

Order matters, so that no failure leaves partial state that a job would use:
1. plan and build the request (pure; a dry run stops here: no AWS call, nothing uploaded);
2. refuse REPLACE-ME placeholders before any call; then check each data channel's manifest
   against the spec and the model (`aws/data_check.py`: one GET per channel);
3. take this machine's lock on the spec's checkpoint prefix (`aws/one_job.py`), so that
   concurrent submits of one spec here take turns;
4. reattach: a job with the spec's deterministic name and spec-hash tag is returned as is
   (a CI rerun never duplicates a job or books a second plan), once its live ResourceConfig
   is checked against the capacity asked for (capacity is part of the name's hash, so a
   difference means the job was changed outside the toolkit: refused, never reused);
5. resolve the training plan (ARN, name or 'auto' → reserved once per name, `aws/reserve.py`)
   and check that the run fits it;
6. refuse when another job of the spec is live on the checkpoint prefix (exit 5);
7. check the bucket is in the job's region (GetBucketLocation), upload the code bundle (once
   per content hash, verified) and only then create the job; `created` is True only in the
   process whose CreateTrainingJob made it (the others report `reattached`);
8. describe the job and fail loudly if SageMaker did not keep the plan ARN or instance type;
   list the prefix's live jobs again and stop this one if another came first.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.errors import AwsError, SpecError

if TYPE_CHECKING:
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.training_plans import Confirm, TrainingPlanInfo
    from blackwell_sm.job.request import JobRequest
    from blackwell_sm.planner.preferences import PlanSet
    from blackwell_sm.spec.run import RunSpec

Notify = Callable[[str], None]


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
    progress: Callable[..., None] | None = None,
) -> tuple[RunSpec, PlanSet, JobRequest]:
    """(spec, plans, JobRequest) without any AWS call: what a dry run shows. `plans` holds a
    plan per instance preference, or the spec's one plan."""
    from blackwell_sm.job.request import build_job_request
    from blackwell_sm.job.wheels import fetch_for
    from blackwell_sm.planner.preferences import plan_set
    from blackwell_sm.planner.profile import profile_for
    from blackwell_sm.spec.run import with_overrides

    rs = as_spec(spec)
    run = {"run_index": run_index, "done_steps": done_steps}
    if training_plan is not None:
        rs = with_overrides(rs, {"compute.training_plan": training_plan})
    from blackwell_sm.spec.hf_files import check_init_from

    check_init_from(rs)  # a local init_from's headers against the model, before planning
    plans = plan_set(rs, profile_for(rs))
    plans.require_feasible()  # exit 3 naming each preference (or the one type) that cannot fit
    # the container's wheels: fetched once, cached
    wheels = fetch_for(rs, plans.primary, plans.others, progress=progress)
    jr = build_job_request(rs, plans, new=new, region=_region(rs), wheelhouse=wheels, **run)
    return rs, plans, jr


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
    progress: Callable[..., None] | None = None,
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
    run = {"run_index": run_index, "done_steps": done_steps}
    rs, plans, jr = prepare(spec, training_plan=training_plan, new=new, progress=progress, **run)
    if dry_run:
        job = TrainingJob(
            jr.job_name,
            region=jr.region,
            plan=plans.primary,
            job_request=jr,
            dry_run=True,
            warnings=jr.warnings,
            preference_plans=plans.preferences,
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

    from blackwell_sm.aws.job_plans import resolve_plan_names
    from blackwell_sm.aws.session import AwsContext

    aws = aws or AwsContext(jr.region)
    # The data against the spec and the model: manifests read from S3 (aws/data_check.py).
    from blackwell_sm.aws.data_check import check_submit_data

    check_submit_data(aws, rs, say)
    jr, infos = resolve_plan_names(aws, plans, jr, _rebuild(rs, plans, jr, new=new, run=run))
    from blackwell_sm.aws.one_job import checkpoint_lock

    with checkpoint_lock(jr.checkpoint_s3_uri, say=say):
        return _submit_locked(
            aws,
            rs,
            plans,
            jr,
            infos,
            new=new,
            yes=yes,
            confirm=confirm,
            allow_partial=allow_partial,
            say=say,
            run=run,
            progress=progress,
        )


def _rebuild(rs: RunSpec, plans: PlanSet, jr: JobRequest, *, new: bool, run: dict[str, int]) -> Any:
    """The request again, with what the AWS layer resolved (plan ARNs)."""
    from blackwell_sm.job.request import build_job_request

    def rebuild(**capacity: Any) -> JobRequest:
        return build_job_request(
            rs, plans, new=new, region=jr.region, wheelhouse=jr.wheelhouse, **run, **capacity
        )

    return rebuild


def _submit_locked(
    aws: AwsContext,
    rs: RunSpec,
    plans: PlanSet,
    jr: JobRequest,
    infos: dict[int, TrainingPlanInfo],
    *,
    new: bool,
    yes: bool,
    confirm: Confirm | None,
    allow_partial: bool,
    say: Notify,
    run: dict[str, int],
    progress: Callable[..., None] | None = None,
) -> TrainingJob:
    """Steps 4-8 of the module docstring, under this machine's lock on the prefix."""
    from blackwell_sm.aws import one_job
    from blackwell_sm.aws.cost import confirm_cost
    from blackwell_sm.aws.job_plans import take_capacity
    from blackwell_sm.aws.jobs import JobInfo, create_job, find_job, owned_by_spec
    from blackwell_sm.aws.s3 import check_bucket_region, upload_bundle

    sm = aws.sagemaker
    plan = plans.primary
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
            if info.training_plan_arn and jr.training_plan_arn is None:  # 'auto' or a name
                jr = jr.model_copy(update={"training_plan_arn": info.training_plan_arn})
            say(f"reattached to {jr.job_name} ({info.status}): the same spec was submitted before")
            if info.status in ("Failed", "Stopped"):
                say(
                    f"note: {jr.job_name} ended {info.status}"
                    + (f" ({info.failure_reason})" if info.failure_reason else "")
                    + "; submit with --new to run the spec again (it resumes from its checkpoints)"
                )
            return TrainingJob(
                jr.job_name,
                aws=aws,
                plan=plan,
                job_request=jr,
                reattached=True,
                warnings=jr.warnings,
                preference_plans=plans.preferences,
                region_source=aws.region_source_for(rs.job.region if rs.job else None),
            )

    confirm_cost(rs, plan, consent=True if yes else confirm)
    jr, plan_info, fit, warnings = take_capacity(
        aws,
        rs,
        plans,
        jr,
        infos,
        _rebuild(rs, plans, jr, new=new, run=run),
        run_index=run["run_index"],
        consent=True if yes else confirm,
        allow_partial=allow_partial,
        say=say,
    )

    one_job.refuse_if_live(sm, jr.base_job_name, jr.checkpoint_s3_uri)
    check_bucket_region(aws.s3, jr.bundle_s3_uri, aws.region)
    upload = upload_bundle(
        aws.s3, jr.bundle.data, jr.bundle_s3_uri, sha256=jr.bundle.sha256, progress=progress
    )
    say(
        ("uploaded" if upload.uploaded else "reusing")
        + f" code bundle {jr.bundle_s3_uri} ({upload.size_bytes} bytes)"
    )
    _described, created = create_job(sm, jr.request, spec_hash=jr.spec_hash)
    say(
        f"{'created' if created else 'found (created by another process or a retried call)'} "
        f"training job {jr.job_name} in {aws.region}"
        + (f" on training plan {plan_info.name}" if plan_info else "")
    )
    one_job.keep_first(sm, jr.job_name, jr.base_job_name, jr.checkpoint_s3_uri, say=say)
    return TrainingJob(
        jr.job_name,
        aws=aws,
        plan=plan,
        job_request=jr,
        created=created,
        reattached=not created,
        upload=upload,
        training_plan=plan_info,
        plan_fit=fit,
        warnings=warnings,
        preference_plans=plans.preferences,
        region_source=aws.region_source_for(rs.job.region if rs.job else None),
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
