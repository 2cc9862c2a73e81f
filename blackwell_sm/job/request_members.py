"""The CreateTrainingJob members, one small pure builder each (`build_job_request` calls them in
the order SageMaker documents the request). Each takes what it reads and returns the member's
value; a builder that finds something to tell the user appends it to `warnings`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from blackwell_sm import __version__
from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import get_instance
from blackwell_sm.job.bundle import BUNDLE_FILE, ENTRYPOINT_SCRIPT, PLAN_FILE
from blackwell_sm.job.capacity import Capacity
from blackwell_sm.job.images import default_image_uri
from blackwell_sm.job.native import tracker_environment
from blackwell_sm.job.request_checks import INIT_CHANNEL
from blackwell_sm.metrics import METRIC_REGEXES
from blackwell_sm.opt_ml import DEFAULT_ROOT, ENV_MAX_RUNTIME_S, ENV_OPT_ML, OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec.job import JobSpec, is_placeholder
from blackwell_sm.spec.run import RunSpec

CODE_CHANNEL = "code"
CHECKPOINT_LOCAL_PATH = str(OptMl(Path(DEFAULT_ROOT)).checkpoints)
# `exec` makes the launcher PID 1, so SageMaker's SIGTERM (stop, max runtime) reaches it.
# BSM_OPT_ML lets a test run the very same command against a temporary /opt/ml tree.
CONTAINER_COMMAND = (
    f"set -e; R=${{{ENV_OPT_ML}:-{DEFAULT_ROOT}}}; mkdir -p $R/code; "
    f"tar -xzf $R/input/data/{CODE_CHANNEL}/{BUNDLE_FILE} -C $R/code; cd $R/code; "
    f"exec python {ENTRYPOINT_SCRIPT} --plan {PLAN_FILE} --opt-ml $R"
)
CONTAINER_ENTRYPOINT = ["bash", "-c", CONTAINER_COMMAND]

_TAG_UNSAFE = re.compile(r"[^\w\s.:/=+\-@]")  # outside the TagValue pattern of the API model


def nvme_only(job: JobSpec, instance_types: list[str]) -> bool:
    """Whether any type the job may start on has local NVMe storage only (no EBS volume, so
    VolumeKmsKeyId is refused there)."""
    nvme = [get_instance(t) for t in instance_types if get_instance(t).local_nvme_tb > 0]
    if nvme and job.volume_kms_key_id:
        raise SpecError(
            f"job.volume_kms_key_id cannot be used on {nvme[0].name}: its storage is local "
            "NVMe only, which SageMaker encrypts with a hardware key and which takes no KMS key",
            field="job.volume_kms_key_id",
            hint="remove job.volume_kms_key_id; job.output_kms_key_id still encrypts the output",
        )
    return bool(nvme)


def algorithm_specification(job: JobSpec, region: str) -> dict[str, Any]:
    return {
        "TrainingImage": job.image_uri or default_image_uri(region),
        "TrainingInputMode": "File",
        "ContainerEntrypoint": list(CONTAINER_ENTRYPOINT),
        "MetricDefinitions": [{"Name": k, "Regex": v} for k, v in METRIC_REGEXES.items()],
        "EnableSageMakerMetricsTimeSeries": True,
    }


def hyperparameters(digest: str, plan_sha: str, bundle_sha: str, plan: Plan) -> dict[str, str]:
    """Few and informative: the container reads plan.json, not these."""
    return {
        "bsm_spec_hash": digest,
        "bsm_plan_sha256": plan_sha,
        "bsm_bundle_sha256": bundle_sha,
        "bsm_version": __version__,
        "bsm_tokens_per_step": str(plan.config.global_batch_sequences * plan.config.seq_len),
    }


def s3_channel(name: str, uri: str, distribution: str, input_mode: str) -> dict[str, Any]:
    return {
        "ChannelName": name,
        "DataSource": {
            "S3DataSource": {
                "S3DataType": "S3Prefix",
                "S3Uri": uri,
                "S3DataDistributionType": distribution,
            }
        },
        "InputMode": input_mode,
    }


def input_data_config(
    job: JobSpec, bundle_uri: str, init_uri: str | None, warnings: list[str]
) -> list[dict[str, Any]]:
    """The code channel, the spec's channels (by name) and `init` for training.init_from."""
    channels = [s3_channel(CODE_CHANNEL, bundle_uri, "FullyReplicated", "File")]
    for cname, ch in sorted(job.channels.items()):
        last = ch.s3_uri.rsplit("/", 1)[-1]
        if not ch.s3_uri.endswith("/") and "." not in last and not is_placeholder(ch.s3_uri):
            warnings.append(
                f"job.channels.{cname}.s3_uri {ch.s3_uri} has no trailing '/': as an S3 prefix "
                f"it also matches {ch.s3_uri}-old/..., {ch.s3_uri}2/..."
            )
        channels.append(s3_channel(cname, ch.s3_uri, ch.distribution, ch.input_mode))
    if init_uri is not None:
        channels.append(s3_channel(INIT_CHANNEL, init_uri, "FullyReplicated", "FastFile"))
    return channels


def output_data_config(job: JobSpec) -> dict[str, Any]:
    output: dict[str, Any] = {
        "S3OutputPath": job.output_prefix,
        "CompressionType": job.output_compression,
    }
    if job.output_kms_key_id:
        output["KmsKeyId"] = job.output_kms_key_id
    return output


def resource_config(job: JobSpec, capacity: Capacity) -> dict[str, Any]:
    """The capacity's members (a type and count, or the preferences), then the volume's."""
    resource = dict(capacity.resource)
    resource["VolumeSizeInGB"] = job.volume_size_gb
    if job.volume_kms_key_id:
        resource["VolumeKmsKeyId"] = job.volume_kms_key_id
    if job.keep_alive_minutes is not None:
        resource["KeepAlivePeriodInSeconds"] = job.keep_alive_minutes * 60
    if capacity.training_plan_arn:
        resource["TrainingPlanArn"] = capacity.training_plan_arn
    return resource


def checkpoint_config(checkpoint_uri: str) -> dict[str, str]:
    return {"S3Uri": checkpoint_uri, "LocalPath": CHECKPOINT_LOCAL_PATH}


def environment(spec: RunSpec, job: JobSpec, job_name: str, runtime_s: int) -> dict[str, str]:
    """The user's variables (sorted), the runtime limit the launcher saves before, trackers'."""
    return {
        **dict(sorted(job.environment.items())),
        ENV_MAX_RUNTIME_S: str(runtime_s),
        **tracker_environment(spec, job, job_name),
    }


def tags(job: JobSpec, model: str, digest: str, plan_sha: str, plan_tag: str | None) -> list:
    """The user's tags (sorted), then bsm's own for cost allocation and reattaching."""
    auto = {
        "bsm:model": _TAG_UNSAFE.sub("-", model)[:256],
        "bsm:spec-hash": digest,
        "bsm:plan-hash": plan_sha[:12],
    }
    if plan_tag:
        auto["bsm:training-plan"] = plan_tag
    merged = {**dict(sorted(job.tags.items())), **auto}
    return [{"Key": k, "Value": v} for k, v in merged.items()]


def optional_members(job: JobSpec) -> dict[str, Any]:
    """VpcConfig and RetryStrategy, each only when the spec sets it."""
    out: dict[str, Any] = {}
    if job.subnets:
        out["VpcConfig"] = {
            "Subnets": list(job.subnets),
            "SecurityGroupIds": list(job.security_group_ids),
        }
    if job.max_retry_attempts is not None:
        out["RetryStrategy"] = {"MaximumRetryAttempts": job.max_retry_attempts}
    return out
