"""The job request builder: RunSpec + Plan -> the exact CreateTrainingJob kwargs (pure).

One source of truth for the job: the CLI's dry run prints it, the AWS layer sends it, and
`to_model_trainer` is checked against it. Deterministic: the same spec and plan give the same
job name, spec hash, request and bundle bytes (unless `new=True`).
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm import __version__
from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import get_instance
from blackwell_sm.job.bundle import (
    BUNDLE_FILE,
    ENTRYPOINT_SCRIPT,
    PLAN_FILE,
    CodeBundle,
    build_bundle,
)
from blackwell_sm.job.capacity import (
    check_preference_plans,
    plan_files,
    preference_entries,
    resolve_training_plan_arn,
)
from blackwell_sm.job.images import default_image_uri
from blackwell_sm.job.limits import MAX_RUNTIME_S
from blackwell_sm.job.names import (
    base_job_name,
    run_job_name,
    sha256_hex,
    spec_hash,
    unique_suffix,
)
from blackwell_sm.job.native import native_members, tracker_environment
from blackwell_sm.job.request_checks import (
    INIT_CHANNEL,
    check_channels,
    check_init_from,
    check_plan_matches,
)
from blackwell_sm.job.validate import request_origins, validate_request
from blackwell_sm.job.wheels import Wheelhouse, requirements_for
from blackwell_sm.metrics import METRIC_REGEXES
from blackwell_sm.opt_ml import COMPLETE_MARKER, DEFAULT_ROOT, ENV_MAX_RUNTIME_S, ENV_OPT_ML, OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PreferencePlans
from blackwell_sm.spec.job import JobSpec, is_placeholder
from blackwell_sm.spec.run import RunSpec

CODE_CHANNEL = "code"
CHECKPOINT_LOCAL_PATH = str(OptMl(Path(DEFAULT_ROOT)).checkpoints)
# Synced to CheckpointConfig.S3Uri: `step-XXXXXXXX/COMPLETE` marks a whole checkpoint (aws/run.py)
CHECKPOINT_MARKER = COMPLETE_MARKER
# `exec` makes the launcher PID 1, so SageMaker's SIGTERM (stop, max runtime) reaches it.
# BSM_OPT_ML lets a test run the very same command against a temporary /opt/ml tree.
CONTAINER_COMMAND = (
    f"set -e; R=${{{ENV_OPT_ML}:-{DEFAULT_ROOT}}}; mkdir -p $R/code; "
    f"tar -xzf $R/input/data/{CODE_CHANNEL}/{BUNDLE_FILE} -C $R/code; cd $R/code; "
    f"exec python {ENTRYPOINT_SCRIPT} --plan {PLAN_FILE} --opt-ml $R"
)
CONTAINER_ENTRYPOINT = ["bash", "-c", CONTAINER_COMMAND]
STARTUP_HOURS = 0.5  # image pull, channel download, checkpoint load and final save


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


_TAG_UNSAFE = re.compile(r"[^\w\s.:/=+\-@]")  # outside the TagValue pattern of the API model


def _tags(
    job: JobSpec,
    model: str,
    digest: str,
    plan_sha: str,
    plan_ref: str | None,
    prefs: PreferencePlans | None = None,
) -> list:
    auto = {
        "bsm:model": _TAG_UNSAFE.sub("-", model)[:256],
        "bsm:spec-hash": digest,
        "bsm:plan-hash": plan_sha[:12],
    }
    if plan_ref:
        auto["bsm:training-plan"] = plan_ref.rsplit("/", 1)[-1]
    refs = [p.training_plan.rsplit("/", 1)[-1] for p in (prefs.preferences if prefs else [])
            if p.training_plan]  # fmt: skip
    if refs:
        auto["bsm:training-plan"] = " ".join(refs)[:256]
    merged = {**dict(sorted(job.tags.items())), **auto}
    return [{"Key": k, "Value": v} for k, v in merged.items()]


def _named(plan: str | None) -> str | None:
    return None if plan == "auto" else plan


# long function: the request, member by member, as SageMaker documents it (to be split into builders: issue 25 item 3)
def build_job_request(
    spec: RunSpec,
    plan: Plan | PreferencePlans,
    *,
    new: bool = False,
    training_plan_arn: str | None = None,
    preference_arns: dict[int, str] | None = None,
    region: str | None = None,
    wheelhouse: Wheelhouse | None = None,
    run_index: int = 1,
    done_steps: int = 0,
) -> JobRequest:
    """Build and validate the CreateTrainingJob request for `spec` run as `plan`.

    `plan` is a PreferencePlans (`planner.preferences.plan_preferences`) when the spec has
    `compute.instance_preferences`: the request then lists them as
    `ResourceConfig.InstancePreferences` and the bundle carries a plan per type.
    `training_plan_arn` is the ARN the AWS layer resolved `compute.training_plan` (a name or
    'auto') into, `preference_arns` the same per preference index; `region` fills in
    `job.region` when the spec leaves it to the session.
    `run_index` > 1 names the N-th job of a run longer than one job (`<base>-rN`, the same
    checkpoint prefix) and `done_steps` (the step its checkpoint holds) sizes its MaxRuntime for
    the steps left. `wheelhouse` is `job.wheels.fetch_wheels`'s result for this spec's requirements (the one
    network-touching step, done by the caller); without it the bundle carries no wheels.
    Raises SpecError (naming the field and the limit) before anything is sent.
    """
    job = spec.job
    if job is None:
        raise SpecError(
            "the spec has no job: section; it is needed to build a SageMaker job",
            field="job",
            hint="add job: {role_arn: ..., s3_prefix: s3://bucket/prefix} (bsm init writes a spec with one)",
        )
    region = job.region or region
    if region is None:
        raise SpecError(
            "no region: set job.region, AWS_REGION or a profile region",
            field="job.region",
        )
    prefs = plan if isinstance(plan, PreferencePlans) else None
    if prefs is not None:
        check_preference_plans(spec, prefs)
        plan = prefs.primary
    elif spec.compute.instance_preferences:
        raise SpecError(
            "the spec has compute.instance_preferences: build the job from a plan per "
            "preference (planner.preferences.plan_preferences(spec)), not one plan",
            field="compute.instance_preferences",
        )
    else:
        check_plan_matches(spec, plan)
    others = prefs.plans[1:] if prefs else []
    check_channels(spec, job)
    warnings: list[str] = []
    placeholders = job.placeholders()
    for path in placeholders:
        warnings.append(f"{path} is a REPLACE-ME placeholder: set it before submitting")

    target, requirements, target_warnings = requirements_for(spec, plan, others)
    warnings += target_warnings
    if wheelhouse is None:
        wheelhouse = Wheelhouse(target=target, requirements=requirements, wheels=[])
    elif wheelhouse.requirements != requirements or wheelhouse.target != target:
        raise ValueError("the wheelhouse was fetched for other requirements than this spec's")
    plan_json = plan.to_json()
    plan_sha = sha256_hex(plan_json.encode())
    bundle = build_bundle(plan_json, wheelhouse, plan_files(prefs) if prefs else None)
    digest = spec_hash(spec, plan, others)
    base = base_job_name(spec.model.name, digest)
    name = base + unique_suffix() if new else run_job_name(base, run_index)
    bundle_uri = f"{job.code_prefix}/{bundle.sha256}/{BUNDLE_FILE}"
    checkpoint_uri = f"{job.checkpoint_prefix}/{base}"
    # One MaxRuntime whichever type SageMaker picks: the slowest preference's.
    slowest = max([plan, *others], key=lambda p: p.run.pessimistic_hours)
    if done_steps:  # a later job of a run: time for the steps left (the loop resumes)
        left = max(0.0, 1 - done_steps / slowest.run.steps)
        slowest = slowest.model_copy(update={"run": slowest.run.scaled(left)})
    runtime_s = max_runtime_seconds(job, slowest, warnings)
    pref_unresolved: list[str] = []
    if prefs is not None:
        arn, unresolved = None, None
        entries, pref_unresolved = preference_entries(prefs, region, preference_arns, warnings)
    else:
        arn, unresolved = resolve_training_plan_arn(spec, region, training_plan_arn, warnings)
    nvme = [get_instance(p.instance.type) for p in [plan, *others] if
            get_instance(p.instance.type).local_nvme_tb > 0]  # fmt: skip
    nvme_only = bool(nvme)
    if nvme_only and job.volume_kms_key_id:
        raise SpecError(
            f"job.volume_kms_key_id cannot be used on {nvme[0].name}: its storage is local "
            "NVMe only, which SageMaker encrypts with a hardware key and which takes no KMS key",
            field="job.volume_kms_key_id",
            hint="remove job.volume_kms_key_id; job.output_kms_key_id still encrypts the output",
        )

    channels = [
        {
            "ChannelName": CODE_CHANNEL,
            "DataSource": {
                "S3DataSource": {
                    "S3DataType": "S3Prefix",
                    "S3Uri": bundle_uri,
                    "S3DataDistributionType": "FullyReplicated",
                }
            },
            "InputMode": "File",
        }
    ]
    for cname, ch in sorted(job.channels.items()):
        last = ch.s3_uri.rsplit("/", 1)[-1]
        if not ch.s3_uri.endswith("/") and "." not in last and not is_placeholder(ch.s3_uri):
            warnings.append(
                f"job.channels.{cname}.s3_uri {ch.s3_uri} has no trailing '/': as an S3 prefix "
                f"it also matches {ch.s3_uri}-old/..., {ch.s3_uri}2/..."
            )
        channels.append(
            {
                "ChannelName": cname,
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": ch.s3_uri,
                        "S3DataDistributionType": ch.distribution,
                    }
                },
                "InputMode": ch.input_mode,
            }
        )
    init_uri = check_init_from(spec, job)
    if init_uri is not None:
        channels.append(
            {
                "ChannelName": INIT_CHANNEL,
                "DataSource": {
                    "S3DataSource": {
                        "S3DataType": "S3Prefix",
                        "S3Uri": init_uri,
                        "S3DataDistributionType": "FullyReplicated",
                    }
                },
                "InputMode": "FastFile",
            }
        )

    resource: dict[str, Any] = (
        {"InstancePreferences": entries}
        if prefs is not None
        else {"InstanceType": plan.instance.type, "InstanceCount": plan.instance.count}
    )
    resource["VolumeSizeInGB"] = job.volume_size_gb
    if job.volume_kms_key_id:
        resource["VolumeKmsKeyId"] = job.volume_kms_key_id
    if job.keep_alive_minutes is not None:
        resource["KeepAlivePeriodInSeconds"] = job.keep_alive_minutes * 60
    if arn:
        resource["TrainingPlanArn"] = arn

    output: dict[str, Any] = {
        "S3OutputPath": job.output_prefix,
        "CompressionType": job.output_compression,
    }
    if job.output_kms_key_id:
        output["KmsKeyId"] = job.output_kms_key_id

    environment = {**dict(sorted(job.environment.items())), ENV_MAX_RUNTIME_S: str(runtime_s),
                   **tracker_environment(spec, job, name)}  # fmt: skip
    request: dict[str, Any] = {
        "TrainingJobName": name,
        "RoleArn": job.role_arn,
        "AlgorithmSpecification": {
            "TrainingImage": job.image_uri or default_image_uri(region),
            "TrainingInputMode": "File",
            "ContainerEntrypoint": list(CONTAINER_ENTRYPOINT),
            "MetricDefinitions": [{"Name": k, "Regex": v} for k, v in METRIC_REGEXES.items()],
            "EnableSageMakerMetricsTimeSeries": True,
        },
        # Few and informative: the container reads plan.json, not these.
        "HyperParameters": {
            "bsm_spec_hash": digest,
            "bsm_plan_sha256": plan_sha,
            "bsm_bundle_sha256": bundle.sha256,
            "bsm_version": __version__,
            "bsm_tokens_per_step": str(plan.config.global_batch_sequences * plan.config.seq_len),
        },
        "InputDataConfig": channels,
        "OutputDataConfig": output,
        "ResourceConfig": resource,
        "StoppingCondition": {"MaxRuntimeInSeconds": runtime_s},
        "CheckpointConfig": {"S3Uri": checkpoint_uri, "LocalPath": CHECKPOINT_LOCAL_PATH},
        "Environment": environment,
        "EnableNetworkIsolation": job.enable_network_isolation,
        "EnableInterContainerTrafficEncryption": job.encrypt_inter_container_traffic,
        "Tags": _tags(job, spec.model.name, digest, plan_sha, arn or _named(unresolved), prefs),
    }
    if job.subnets:
        request["VpcConfig"] = {
            "Subnets": list(job.subnets),
            "SecurityGroupIds": list(job.security_group_ids),
        }
    if job.max_retry_attempts is not None:
        request["RetryStrategy"] = {"MaximumRetryAttempts": job.max_retry_attempts}
    types = [p.instance.type for p in [plan, *others]]
    request.update(native_members(spec, job, job_name=name, job_base=base, region=region,
                                  instance_types=types))  # fmt: skip

    if not wheelhouse.wheels:
        warnings.append(
            "the code bundle carries no wheels (none were fetched): the container stops at its "
            "first second unless the image has "
            + ", ".join(r.pip_spec for r in requirements if r.carried)
        )
    validate_request(request, nvme_only=nvme_only, origins=request_origins(request, job))
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
        training_plan_arn=arn,
        unresolved_training_plan=unresolved,
        unresolved_preference_plans=pref_unresolved,
        placeholders=placeholders,
        warnings=warnings,
    )
