"""The job request builder: RunSpec + Plan -> the exact CreateTrainingJob kwargs (pure).

One source of truth for the job: the CLI's dry run prints it, the AWS layer sends it, and
`to_model_trainer` is checked against it. Deterministic: the same spec and plan give the same
job name, spec hash, request and bundle bytes (unless `new=True`).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.job.bundle import BUNDLE_FILE, CodeBundle, build_bundle
from blackwell_sm.job.capacity import capacity_for, check_plan_set, instance_types, plan_files
from blackwell_sm.job.capacity_need import STARTUP_HOURS, fraction_left
from blackwell_sm.job.identity import JobIdentity, job_and_region, job_identity
from blackwell_sm.job.limits import MAX_RUNTIME_S
from blackwell_sm.job.names import sha256_hex
from blackwell_sm.job.native import native_members
from blackwell_sm.job.request_checks import check_channels, check_init_from
from blackwell_sm.job.request_members import (
    CHECKPOINT_LOCAL_PATH,
    CODE_CHANNEL,
    CONTAINER_COMMAND,
    CONTAINER_ENTRYPOINT,
    algorithm_specification,
    checkpoint_config,
    environment,
    hyperparameters,
    input_data_config,
    nvme_only,
    optional_members,
    output_data_config,
    resource_config,
    tags,
)
from blackwell_sm.job.requirements import Wheelhouse, requirements_for
from blackwell_sm.job.validate import request_origins, validate_request
from blackwell_sm.opt_ml import COMPLETE_MARKER
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PlanSet, PreferencePlans, as_plan_set
from blackwell_sm.spec.job import JobSpec
from blackwell_sm.spec.placeholders import spec_placeholders
from blackwell_sm.spec.run import RunSpec

__all__ = [
    "CHECKPOINT_LOCAL_PATH",
    "CHECKPOINT_MARKER",
    "CODE_CHANNEL",
    "CONTAINER_COMMAND",
    "CONTAINER_ENTRYPOINT",
    "STARTUP_HOURS",
    "JobRequest",
    "build_job_request",
    "max_runtime_seconds",
]

# Synced to CheckpointConfig.S3Uri: `step-XXXXXXXX/COMPLETE` marks a whole checkpoint (aws/run.py)
CHECKPOINT_MARKER = COMPLETE_MARKER


class JobRequest(BaseModel):
    """A built, validated job: the request to send and what it needs."""

    model_config = ConfigDict(extra="forbid")

    job_name: str
    base_job_name: str = Field(description="bsm-<model>-<hash>: the name a rerun reattaches to.")
    spec_hash: str
    region: str
    request: dict[str, Any] = Field(description="The exact CreateTrainingJob kwargs.")
    bundle: CodeBundle
    wheelhouse: Wheelhouse = Field(
        description="The container's requirements and carried wheels (fetch once, reuse)."
    )
    bundle_s3_uri: str = Field(description="<code prefix>/<sha256>/bundle.tar.gz")
    checkpoint_s3_uri: str
    max_runtime_s: int
    training_plan_arn: str | None = None
    unresolved_training_plan: str | None = Field(
        None, description="compute.training_plan name or 'auto' not yet resolved to an ARN."
    )
    unresolved_preference_plans: list[str] = Field(
        default_factory=list,
        description="'[i] NAME' for instance preferences whose plan name is not an ARN yet.",
    )
    placeholders: list[str] = Field(
        default_factory=list, description="Spec fields still holding REPLACE-ME values."
    )
    warnings: list[str] = Field(default_factory=list)


def max_runtime_seconds(job: JobSpec, plan: Plan, warnings: list[str]) -> int:
    """The job's MaxRuntimeInSeconds: the user's, or the plan's estimate with a margin. SDKs
    default to one hour; this follows the prediction's pessimistic end (a run stopped early costs
    more than a limit never reached), capped at SageMaker's 28 days."""
    if job.max_runtime_hours is not None:
        seconds = math.ceil(job.max_runtime_hours * 3600)
        if job.max_runtime_hours < plan.run.hours:
            warnings.append(
                f"job.max_runtime_hours {job.max_runtime_hours:g} is shorter than the predicted "
                f"{plan.run.hours:.2f} h: the job will be stopped early (`bsm submit SPEC "
                "--until-done` follows with the next job, which resumes from its checkpoint)"
            )
        return seconds
    predicted = plan.run.pessimistic_hours
    hours = predicted * job.runtime_margin + STARTUP_HOURS
    seconds = math.ceil(hours * 3600)
    if seconds > MAX_RUNTIME_S:
        n = math.ceil(hours * 3600 / MAX_RUNTIME_S)
        warnings.append(
            f"predicted {predicted:.1f} h (pessimistic) x margin {job.runtime_margin:g} exceeds the "
            f"28-day limit: MaxRuntimeInSeconds capped at {MAX_RUNTIME_S}; the run needs {n} jobs: "
            "`bsm submit SPEC --until-done` submits them in turn"
        )
        seconds = MAX_RUNTIME_S
    return seconds


def runtime_seconds(job: JobSpec, plans: PlanSet, done_steps: int, warnings: list[str]) -> int:
    """One MaxRuntime whichever type SageMaker picks: the slowest plan's; for a later job of a
    run (`done_steps` > 0), the time for the steps left (the loop resumes)."""
    slowest = max(plans.plans, key=lambda p: p.run.pessimistic_hours)
    if done_steps:
        left = fraction_left(slowest.run, done_steps)
        slowest = slowest.model_copy(update={"run": slowest.run.scaled(left)})
    return max_runtime_seconds(job, slowest, warnings)


def _wheelhouse(
    spec: RunSpec, plans: PlanSet, wheelhouse: Wheelhouse | None, warnings: list[str]
) -> Wheelhouse:
    """The caller's wheelhouse, checked to be for this spec's requirements, or an empty one."""
    target, requirements, target_warnings = requirements_for(spec, plans.primary, plans.others)
    warnings += target_warnings
    if wheelhouse is None:
        return Wheelhouse(target=target, requirements=requirements, wheels=[])
    if wheelhouse.requirements != requirements or wheelhouse.target != target:
        raise ValueError("the wheelhouse was fetched for other requirements than this spec's")
    return wheelhouse


def build_job_request(
    spec: RunSpec,
    plan: Plan | PreferencePlans | PlanSet,
    *,
    new: bool = False,
    training_plan_arn: str | None = None,
    preference_arns: dict[int, str] | None = None,
    region: str | None = None,
    wheelhouse: Wheelhouse | None = None,
    run_index: int = 1,
    done_steps: int = 0,
    identity: JobIdentity | None = None,
) -> JobRequest:
    """Build and validate the CreateTrainingJob request for `spec` run as `plan`.

    `plan` is taken as a `PlanSet` (`planner.preferences.as_plan_set`: a Plan, or what
    `plan_preferences` gives for a spec with `compute.instance_preferences`, whose request then
    lists them as `ResourceConfig.InstancePreferences` and whose bundle carries a plan per type).
    `training_plan_arn` is the ARN the AWS layer resolved `compute.training_plan` (a name or
    'auto') into, `preference_arns` the same per preference index; `region` fills in
    `job.region` when the spec leaves it to the session.
    `run_index` > 1 names the N-th job of a run longer than one job (`<base>-rN`, the same
    checkpoint prefix) and `done_steps` (the step its checkpoint holds) sizes its MaxRuntime for
    the steps left. `wheelhouse` is `job.wheels.fetch_wheels`'s result for this spec's
    requirements (the one network-touching step, done by the caller); without it the bundle
    carries no wheels. `identity` is the job's name and hash decided before (`job_identity`:
    submit decides it once, before capacity); without it they are decided here. Raises
    SpecError (naming the field and the limit) before anything is sent.
    """
    job, region = job_and_region(spec, region)
    plans = as_plan_set(plan)
    check_plan_set(spec, plans)
    primary = plans.primary
    check_channels(spec, job)
    warnings: list[str] = []
    placeholders = spec_placeholders(spec)  # every field, and the files the client reads
    for path in placeholders:
        warnings.append(f"{path} is a REPLACE-ME placeholder: set it before submitting")

    wheelhouse = _wheelhouse(spec, plans, wheelhouse, warnings)
    plan_json = primary.to_json()
    plan_sha = sha256_hex(plan_json.encode())
    bundle = build_bundle(plan_json, wheelhouse, plan_files(plans))
    ident = identity or job_identity(spec, plans, new=new, run_index=run_index, region=region)
    if identity is not None and identity != job_identity(spec, plans, region=region).model_copy(
        update={"job_name": identity.job_name}
    ):
        raise ValueError("the job identity was decided for another spec, plan or region")
    digest, base, name = ident.spec_hash, ident.base_job_name, ident.job_name
    bundle_uri = f"{job.code_prefix}/{bundle.sha256}/{BUNDLE_FILE}"
    checkpoint_uri = ident.checkpoint_s3_uri
    runtime_s = runtime_seconds(job, plans, done_steps, warnings)
    capacity = capacity_for(
        spec,
        plans,
        region,
        training_plan_arn=training_plan_arn,
        preference_arns=preference_arns,
        warnings=warnings,
    )
    types = instance_types(plans)
    local_nvme = nvme_only(job, types)
    channels = input_data_config(job, bundle_uri, check_init_from(spec, job), warnings)
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": job.role_arn,
        "AlgorithmSpecification": algorithm_specification(job, region),
        "HyperParameters": hyperparameters(digest, plan_sha, bundle.sha256, primary),
        "InputDataConfig": channels,
        "OutputDataConfig": output_data_config(job),
        "ResourceConfig": resource_config(job, capacity),
        "StoppingCondition": {"MaxRuntimeInSeconds": runtime_s},
        "CheckpointConfig": checkpoint_config(checkpoint_uri),
        "Environment": environment(spec, job, name, runtime_s),
        "EnableNetworkIsolation": job.enable_network_isolation,
        "EnableInterContainerTrafficEncryption": job.encrypt_inter_container_traffic,
        "Tags": tags(job, spec.model.name, digest, plan_sha, capacity.plan_tag),
        **optional_members(job),
    }
    request.update(
        native_members(spec, job, job_name=name, job_base=base, region=region, instance_types=types)
    )

    if not wheelhouse.wheels:
        warnings.append(
            "the code bundle carries no wheels (none were fetched): the container stops at its "
            "first second unless the image has "
            + ", ".join(r.pip_spec for r in wheelhouse.requirements if r.carried)
        )
    validate_request(request, nvme_only=local_nvme, origins=request_origins(request, job))
    return JobRequest(
        job_name=name,
        base_job_name=base,
        spec_hash=digest,
        region=region,
        request=request,
        bundle=bundle,
        wheelhouse=wheelhouse,
        bundle_s3_uri=bundle_uri,
        checkpoint_s3_uri=checkpoint_uri,
        max_runtime_s=runtime_s,
        training_plan_arn=capacity.training_plan_arn,
        unresolved_training_plan=capacity.unresolved_training_plan,
        unresolved_preference_plans=capacity.unresolved_preference_plans,
        placeholders=placeholders,
        warnings=warnings,
    )
