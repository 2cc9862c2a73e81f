"""`submit(spec)`: one pipeline, each step a function of its own, called once, in this order,
so that no failure leaves partial state that a job would use and nothing is built twice:

1. `plan_run`: the spec, its plans (one per instance preference) and the container's wheels;
2. `identify`: the job's name, spec hash, region and checkpoint prefix (`job/identity.py`);
3. `build_request`: the CreateTrainingJob request and its code bundle, built and validated
   once, with the capacity as written (a plan name or 'auto' not resolved yet): a request
   SageMaker would refuse is refused here, before any call and before any money is spent. A
   dry run stops here (no AWS call, nothing uploaded). `refuse_placeholders` refuses
   REPLACE-ME values, then `check_submit_data` (`aws/data_check.py`) each data channel's
   manifest against the spec and the model (one GET per channel), before any lock or purchase.
4. under this machine's lock on the checkpoint prefix (`aws/one_job.py`), so that concurrent
   submits of one spec here take turns:
   a. `reattach`: a job with the spec's deterministic name and spec-hash tag is returned as is
      (a CI rerun never duplicates a job or books a second plan), once its live ResourceConfig
      is checked against the capacity asked for (each preference's plan described first);
   b. consent to the cost, then `take_capacity` (`aws/job_plans.py`): the training plan (ARN,
      name, or 'auto' reserved once per name) checked against the hours the run needs
      (`job/capacity_need.py`), attached to the request (`job/capacity_attach.py`, pure: the
      bundle and every other member stay as built);
   c. `send`: refuse when another job of the spec is live on the prefix (exit 5), check the
      bucket is in the job's region, upload the bundle (once per content hash, verified),
      CreateTrainingJob (`created` is True only in the process whose call made it), describe
      it (a dropped plan ARN or instance type fails loudly), and stop it if another job on the
      prefix came first;
5. the handle (`TrainingJob`) carries the receipt: created or reattached, the upload, the plan
   and its fit, the warnings.

No callbacks: the AWS steps return what they found (`CapacityChoice`), and the pure job layer
turns it into the request.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.errors import AwsError, SpecError

if TYPE_CHECKING:
    from blackwell_sm.aws.s3 import UploadResult
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.training_plans import Confirm, TrainingPlanInfo
    from blackwell_sm.job.identity import JobIdentity
    from blackwell_sm.job.request import JobRequest
    from blackwell_sm.job.requirements import Wheelhouse
    from blackwell_sm.planner.preferences import PlanSet
    from blackwell_sm.spec.run import RunSpec

Notify = Callable[[str], None]
Progress = Callable[..., None]


class PlannedRun(NamedTuple):
    """Step 1: the spec as submitted, its plans and the container's wheels."""

    spec: RunSpec
    plans: PlanSet
    wheels: Wheelhouse


class Sent(NamedTuple):
    """Step 4d: the bundle's upload and whether this process's CreateTrainingJob made the job."""

    upload: UploadResult
    created: bool


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


def plan_run(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    training_plan: str | None = None,
    progress: Progress | None = None,
) -> PlannedRun:
    """Step 1, without any AWS call: the spec (with `training_plan` over
    `compute.training_plan`), its plans, refused when infeasible, and the wheels (cached)."""
    from blackwell_sm.job.wheels import fetch_for
    from blackwell_sm.planner.preferences import plan_set
    from blackwell_sm.planner.profile import profile_for
    from blackwell_sm.spec.hf_files import check_init_from
    from blackwell_sm.spec.run import with_overrides

    rs = as_spec(spec)
    if training_plan is not None:
        rs = with_overrides(rs, {"compute.training_plan": training_plan})
    check_init_from(rs)  # a local init_from's headers against the model, before planning
    plans = plan_set(rs, profile_for(rs))
    plans.require_feasible()  # exit 3 naming each preference (or the one type) that cannot fit
    wheels = fetch_for(rs, plans.primary, plans.others, progress=progress)
    return PlannedRun(rs, plans, wheels)


def identify(run: PlannedRun, *, new: bool = False, run_index: int = 1) -> JobIdentity:
    """Step 2: the job's name, spec hash, region and checkpoint prefix, decided once."""
    from blackwell_sm.job.identity import job_identity

    return job_identity(run.spec, run.plans, new=new, run_index=run_index, region=_region(run.spec))


def build_request(run: PlannedRun, ident: JobIdentity, done_steps: int = 0) -> JobRequest:
    """Step 3: the request and its bundle, built and validated once, with the capacity as the
    spec writes it (`attach_capacity` adds the plan ARNs the capacity step finds)."""
    from blackwell_sm.job.request import build_job_request

    return build_job_request(
        run.spec,
        run.plans,
        region=ident.region,
        wheelhouse=run.wheels,
        done_steps=done_steps,
        identity=ident,
    )


def prepare(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    training_plan: str | None = None,
    new: bool = False,
    run_index: int = 1,
    done_steps: int = 0,
    progress: Progress | None = None,
) -> tuple[RunSpec, PlanSet, JobRequest]:
    """(spec, plans, JobRequest) without any AWS call: what a dry run shows. `plans` holds a
    plan per instance preference, or the spec's one plan."""
    run = plan_run(spec, training_plan=training_plan, progress=progress)
    ident = identify(run, new=new, run_index=run_index)
    return run.spec, run.plans, build_request(run, ident, done_steps)


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
    progress: Progress | None = None,
) -> TrainingJob:
    """Submit `spec` as a SageMaker training job and return its handle.

    `training_plan` overrides `compute.training_plan` (ARN, name or 'auto'). `new` forces a fresh
    job name (it still resumes from the spec's checkpoints). `yes` agrees to reserving a plan
    for 'auto'; otherwise `confirm` (a callable that asks a person, as the CLI's prompt does) is
    asked, and without one ConsentRequiredError is raised. The AWS layer never prompts itself.
    `allow_partial` accepts a plan that ends before the predicted run does. `run_index` and
    `done_steps` make the N-th job of a run longer than one job (`aws/run.py`).
    """
    from blackwell_sm.aws.cost import confirm_cost
    from blackwell_sm.aws.data_check import check_submit_data
    from blackwell_sm.aws.job_plans import find_preference_plans, take_capacity
    from blackwell_sm.aws.one_job import checkpoint_lock
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.job.capacity_attach import attach_capacity

    say = notify or (lambda _msg: None)
    consent = True if yes else confirm
    run = plan_run(spec, training_plan=training_plan, progress=progress)
    ident = identify(run, new=new, run_index=run_index)
    jr = build_request(run, ident, done_steps)
    if dry_run:
        return _dry_run_handle(run, jr)
    refuse_placeholders(jr)
    aws = aws or AwsContext(ident.region)
    check_submit_data(aws, run.spec, say)  # each channel's manifest against the spec and model
    with checkpoint_lock(ident.checkpoint_s3_uri, say=say):
        infos = find_preference_plans(aws, run.plans)
        if not new:
            found = reattach(aws, run, jr, infos, say=say)
            if found is not None:
                return found
        confirm_cost(run.spec, run.plans.primary, consent=consent)
        capacity = take_capacity(
            aws,
            run.spec,
            run.plans,
            infos,
            base_name=ident.base_job_name,
            run_index=run_index,
            done_steps=done_steps,
            consent=consent,
            allow_partial=allow_partial,
            say=say,
        )
        jr = attach_capacity(
            jr,
            run.spec,
            run.plans,
            training_plan_arn=capacity.training_plan_arn,
            preference_arns=capacity.preference_arns,
        )
        sent = send(aws, jr, progress=progress, say=say)
    say(
        f"{'created' if sent.created else 'found (created by another process or a retried call)'} "
        f"training job {jr.job_name} in {aws.region}"
        + (f" on training plan {capacity.info.name}" if capacity.info else "")
    )
    return TrainingJob(
        jr.job_name,
        aws=aws,
        plan=run.plans.primary,
        job_request=jr,
        created=sent.created,
        reattached=not sent.created,
        upload=sent.upload,
        training_plan=capacity.info,
        plan_fit=capacity.fit,
        warnings=list(jr.warnings) + capacity.warnings,
        preference_plans=run.plans.preferences,
        region_source=aws.region_source_for(run.spec.job.region if run.spec.job else None),
    )


def refuse_placeholders(jr: JobRequest) -> None:
    """Step 3: REPLACE-ME values left in the spec are refused before any call."""
    if jr.placeholders:
        raise SpecError(
            "the spec still has REPLACE-ME placeholders: " + ", ".join(jr.placeholders),
            field=jr.placeholders[0],
            hint="set them to your role ARN and S3 locations (`bsm submit SPEC --dry-run` shows "
            "the request)",
        )


def _dry_run_handle(run: PlannedRun, jr: JobRequest) -> TrainingJob:
    job = TrainingJob(
        jr.job_name,
        region=jr.region,
        plan=run.plans.primary,
        job_request=jr,
        dry_run=True,
        warnings=jr.warnings,
        preference_plans=run.plans.preferences,
    )
    job.region_source = region_choice(run.spec).source
    return job


def reattach(
    aws: AwsContext,
    run: PlannedRun,
    jr: JobRequest,
    infos: dict[int, TrainingPlanInfo],
    *,
    say: Notify,
) -> TrainingJob | None:
    """Step 4a: the spec's job if it exists (made from this spec, on the capacity asked for)."""
    from blackwell_sm.aws.jobs import JobInfo, find_job, owned_by_spec
    from blackwell_sm.job.capacity_attach import attach_capacity

    existing = find_job(aws.sagemaker, jr.job_name)
    if existing is None:
        return None
    name = jr.job_name
    if not owned_by_spec(aws.sagemaker, existing, jr.spec_hash):
        raise AwsError(
            f"a training job named {name} exists but was not made from this spec "
            "(its bsm:spec-hash tag differs)",
            code="resource_in_use",
            hint="submit with --new for a fresh job name",
        )
    arns = {i: info.arn for i, info in infos.items()}
    jr = attach_capacity(jr, run.spec, run.plans, preference_arns=arns)
    asked = jr.request["ResourceConfig"]
    _require_same_capacity(existing, name, asked, run.spec.compute.training_plan)
    info = JobInfo.from_describe(existing)
    if info.training_plan_arn and jr.training_plan_arn is None:  # 'auto' or a name
        jr = jr.model_copy(update={"training_plan_arn": info.training_plan_arn})
    say(f"reattached to {name} ({info.status}): the same spec was submitted before")
    if info.status in ("Failed", "Stopped"):
        say(
            f"note: {name} ended {info.status}"
            + (f" ({info.failure_reason})" if info.failure_reason else "")
            + "; submit with --new to run the spec again (it resumes from its checkpoints)"
        )
    return TrainingJob(
        name,
        aws=aws,
        plan=run.plans.primary,
        job_request=jr,
        reattached=True,
        warnings=jr.warnings,
        preference_plans=run.plans.preferences,
        region_source=aws.region_source_for(run.spec.job.region if run.spec.job else None),
    )


def send(aws: AwsContext, jr: JobRequest, *, progress: Progress | None, say: Notify) -> Sent:
    """Step 4d: no live job of the spec on the prefix, the bundle uploaded once, the job
    created and verified, and the first job on the prefix kept."""
    from blackwell_sm.aws import one_job
    from blackwell_sm.aws.jobs import create_job
    from blackwell_sm.aws.s3 import check_bucket_region, upload_bundle

    sm = aws.sagemaker
    one_job.refuse_if_live(sm, jr.base_job_name, jr.checkpoint_s3_uri, own_name=jr.job_name)
    check_bucket_region(aws.s3, jr.bundle_s3_uri, aws.region or jr.region)
    upload = upload_bundle(
        aws.s3, jr.bundle.data, jr.bundle_s3_uri, sha256=jr.bundle.sha256, progress=progress
    )
    say(
        ("uploaded" if upload.uploaded else "reusing")
        + f" code bundle {jr.bundle_s3_uri} ({upload.size_bytes} bytes)"
    )
    _described, created = create_job(sm, jr.request, spec_hash=jr.spec_hash)
    one_job.keep_first(sm, jr.job_name, jr.base_job_name, jr.checkpoint_s3_uri, say=say)
    return Sent(upload, created)


def _require_same_capacity(
    described: dict[str, Any], name: str, asked: dict[str, Any], plan_ref: str | None
) -> None:
    """Refuse to reattach to a job whose live capacity is not the one asked for."""
    from blackwell_sm.aws.jobs import capacity_differences

    ref = plan_ref if asked.get("TrainingPlanArn") is None else None
    problems = capacity_differences(described.get("ResourceConfig", {}), asked, plan_ref=ref)
    if problems:
        raise AwsError(
            f"training job {name} exists with other capacity than this submit asks for: "
            + "; ".join(problems)
            + ". It was not reattached.",
            code="capacity_mismatch",
            hint=f"submit with --new for a fresh job on the capacity asked for, or stop the "
            f"other job first (`bsm stop {name}`)",
        )
