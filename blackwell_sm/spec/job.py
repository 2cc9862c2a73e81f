"""JobSpec: the SageMaker side of a run (role, region, S3 locations, image, channels, security).

Instance type, count and training plan live in `compute` (ComputeSpec), not here.
Values containing ``REPLACE-ME`` are placeholders: they validate (so templates plan and dry-run
as shipped) and the request builder lists them as warnings; the AWS layer refuses to submit them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from blackwell_sm.spec.aws_rules import (
    BUCKET_RULES_SOURCE,
    bucket_problem,
    check_image_uri,
    credential_problem,
    is_placeholder,
)
from blackwell_sm.spec.types import Bool, Float, Int, KeyedValueError, PosInt

MAX_RUNTIME_HOURS = 28 * 24  # CreateTrainingJob's MaxRuntimeInSeconds ceiling (28 days)

ROLE_ARN_RE = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/[a-zA-Z_0-9+=,.@\-/]{1,512}$")
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
S3_URI_RE = re.compile(r"^s3://(?P<bucket>[^/]+)(?P<key>/.*)?$")
# SageMaker's ChannelName pattern and length (botocore model: ChannelName).
CHANNEL_NAME_RE = re.compile(r"^[A-Za-z0-9.\-_]{1,64}$")
ENV_KEY_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]{0,511}$")
KMS_KEY_RE = re.compile(r"^[a-zA-Z0-9:/_-]{1,2048}$")
VPC_ID_RE = re.compile(r"^[-0-9a-zA-Z]{1,32}$")
# A requirement the container's stdlib-only bootstrap can check: a PyPI name and an optional
# comma list of >=, >, <=, <, ==, != clauses on plain release numbers (entrypoints/bootstrap.py).
REQUIREMENT_RE = re.compile(
    r"^(?P<name>[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?)"
    r"(?P<spec>\s*(?:==|!=|>=|<=|>|<)\s*\d+(?:\.\d+)*(?:\s*,\s*(?:==|!=|>=|<=|>|<)\s*\d+(?:\.\d+)*)*)?$"
)
# ModelPackageGroupName and the model-package-group ARN (botocore model: EntityName,
# ModelPackageGroupArn).
PACKAGE_GROUP_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
PACKAGE_GROUP_ARN_RE = re.compile(
    r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]{9,16}:[0-9]{12}:model-package-group/[\S]{1,2048}$"
)
RESERVED_CHANNELS = frozenset({"code"})  # the code bundle's channel
RESERVED_ENV_PREFIX = "BSM_"  # set by the builder (BSM_MAX_RUNTIME_S, ...)


def check_s3_uri(v: str, *, strip: bool = True) -> str:
    """`s3://bucket[/key]` with a valid bucket name (a REPLACE-ME placeholder bucket passes).

    `strip` drops a trailing '/' (for prefixes the toolkit appends to)."""
    m = S3_URI_RE.match(v)
    if not m:
        raise ValueError(f"expected an S3 URI like s3://bucket/prefix, got {v!r}")
    bucket = m["bucket"]
    problem = None if is_placeholder(bucket) else bucket_problem(bucket)
    if problem:
        raise ValueError(f"invalid S3 bucket name {bucket!r}: {problem} ({BUCKET_RULES_SOURCE})")
    return v.rstrip("/") if strip else v


class ChannelSpec(BaseModel):
    """One SageMaker input channel, mounted at /opt/ml/input/data/<name>."""

    model_config = ConfigDict(extra="forbid")

    s3_uri: str = Field(
        description="S3 prefix (end it with '/' for a folder: S3 prefixes match by string, so "
        "s3://b/train also matches s3://b/train2/...) or a single object."
    )
    input_mode: Literal["File", "FastFile"] = Field(
        "FastFile", description="File: copied before start; FastFile: streamed from S3 on read."
    )
    distribution: Literal["FullyReplicated", "ShardedByS3Key"] = Field(
        "FullyReplicated",
        description="FullyReplicated: every instance sees all files; ShardedByS3Key: a share each.",
    )

    @field_validator("s3_uri")
    @classmethod
    def _s3(cls, v: str) -> str:
        return check_s3_uri(v, strip=False)


class JobSpec(BaseModel):
    """Where and how the training job runs on SageMaker."""

    model_config = ConfigDict(extra="forbid")

    role_arn: str = Field(description="IAM role SageMaker assumes for the job (arn:aws:iam::...).")
    region: str | None = Field(
        None, description="AWS region; default: the session's (AWS_REGION / profile)."
    )
    s3_prefix: str = Field(description="s3://bucket/prefix under which code/output/checkpoints go.")
    code_s3_prefix: str | None = Field(None, description="Code bundles; default <s3_prefix>/code.")
    output_s3_prefix: str | None = Field(
        None, description="Job output (model, output data); default <s3_prefix>/output."
    )
    checkpoint_s3_prefix: str | None = Field(
        None,
        description="Checkpoints; default <s3_prefix>/checkpoints. Each spec gets its own "
        "bsm-<model>-<hash> folder (the job name), shared by --new reruns so they resume.",
    )
    tensorboard_s3_prefix: str | None = Field(
        None,
        description="TensorBoard event files (training.report_to: [tensorboard]); default "
        "<s3_prefix>/tensorboard. Each spec gets its own <model>-<spec hash> folder.",
    )
    model_package_group: str | None = Field(
        None,
        description="Register the exported model in this SageMaker model package group (a name "
        "in the role's account, or its ARN): the request's ModelPackageConfig.",
    )
    infra_check: Bool = Field(
        False,
        description="SageMaker's infrastructure health check of the instances before training "
        "(InfraCheckConfig; GPU instance types). It lengthens start-up by the check's time.",
    )
    channels: dict[str, ChannelSpec] = Field(
        default_factory=dict, description="Input channels by name (e.g. train, validation)."
    )
    image_uri: str | None = Field(
        None,
        description="Training image; default: the pinned SageMaker PyTorch image for the region "
        "(PyTorch >= 2.7 with CUDA >= 12.8, needed for B200).",
    )
    container_requirements: list[str] = Field(
        default_factory=list,
        description="Extra Python packages the container needs, as 'name' or 'name>=1.2,<2' "
        "(>=, >, <=, <, ==, != on release numbers). bsm downloads their wheels for the image's "
        "Python and platform, the bundle carries them, and the container installs them offline "
        "only when the image lacks them. torch is never installed: it is the image's.",
    )
    volume_size_gb: PosInt = Field(
        100,
        le=16384,
        description="EBS volume per instance in GB, 1..16384 (EBS gp3 maximum; ignored on "
        "NVMe-only instances such as p6).",
    )
    max_runtime_hours: Float | None = Field(
        None,
        gt=0,
        le=MAX_RUNTIME_HOURS,
        description="Stop the job after this long, in (0, 672] hours (SageMaker's 28-day "
        "MaxRuntimeInSeconds maximum); default: the plan's predicted hours x runtime_margin + "
        "0.5 h, capped at 28 days.",
    )
    runtime_margin: Float = Field(
        1.5, ge=1.0, le=10.0, description="Multiplier on the predicted run time, in [1, 10]."
    )
    max_retry_attempts: Int | None = Field(
        None, ge=1, le=30, description="SageMaker RetryStrategy: retries on internal errors, 1..30."
    )
    tags: dict[str, str] = Field(
        default_factory=dict,
        description="Tags on the job; bsm:model, bsm:spec-hash, bsm:plan-hash and "
        "bsm:training-plan are added for cost allocation.",
    )
    subnets: list[str] = Field(default_factory=list, description="VPC subnet IDs.")
    security_group_ids: list[str] = Field(default_factory=list, description="VPC security groups.")
    output_kms_key_id: str | None = Field(None, description="KMS key for the job's S3 output.")
    volume_kms_key_id: str | None = Field(
        None, description="KMS key for the EBS volume (not allowed on NVMe-only instances)."
    )
    enable_network_isolation: Bool = Field(False, description="No network access in the container.")
    encrypt_inter_container_traffic: Bool = Field(
        False, description="Encrypt traffic between instances (slower collectives)."
    )
    keep_alive_minutes: Int | None = Field(
        None,
        ge=0,
        le=360,
        description="Warm pool: keep instances this long after the job, 0..360 minutes "
        "(ResourceConfig.KeepAlivePeriodInSeconds max 21600, botocore model).",
    )
    output_compression: Literal["NONE", "GZIP"] = Field(
        "NONE", description="model.tar.gz compression; NONE saves hours on large checkpoints."
    )
    environment: dict[str, str] = Field(
        default_factory=dict, description="Extra container environment (never credentials)."
    )

    @field_validator("container_requirements")
    @classmethod
    def _requirements(cls, v: list[str]) -> list[str]:
        for req in v:
            m = REQUIREMENT_RE.match(req.strip())
            if not m:
                raise ValueError(
                    f"{req!r} is not a requirement the container can check: use 'name' or "
                    "'name>=1.2,<2' (>=, >, <=, <, ==, != on release numbers)"
                )
            if m["name"].lower() == "torch":
                raise ValueError(
                    "torch comes with the image and is never installed; choose "
                    "job.image_uri for another torch"
                )
        return [r.strip() for r in v]

    @field_validator("role_arn")
    @classmethod
    def _role(cls, v: str) -> str:
        if not ROLE_ARN_RE.match(v):
            raise ValueError(
                f"expected an IAM role ARN like arn:aws:iam::123456789012:role/NAME, got {v!r}"
            )
        return v

    @field_validator("image_uri")
    @classmethod
    def _image(cls, v: str | None) -> str | None:
        return None if v is None else check_image_uri(v)

    @field_validator("region")
    @classmethod
    def _region(cls, v: str | None) -> str | None:
        if v is not None and not REGION_RE.match(v):
            raise ValueError(f"expected an AWS region like us-east-1, got {v!r}")
        return v

    @field_validator("model_package_group")
    @classmethod
    def _package_group(cls, v: str | None) -> str | None:
        if v is not None and not (PACKAGE_GROUP_RE.match(v) or PACKAGE_GROUP_ARN_RE.match(v)):
            raise ValueError(
                f"expected a model package group name (1-63 letters, digits and '-', starting "
                f"with a letter or digit) or its ARN, got {v!r}"
            )
        return v

    @field_validator(
        "s3_prefix",
        "code_s3_prefix",
        "output_s3_prefix",
        "checkpoint_s3_prefix",
        "tensorboard_s3_prefix",
    )
    @classmethod
    def _s3(cls, v: str | None) -> str | None:
        return None if v is None else check_s3_uri(v)

    @field_validator("channels")
    @classmethod
    def _channel_names(cls, v: dict[str, ChannelSpec]) -> dict[str, ChannelSpec]:
        for name in v:
            if not CHANNEL_NAME_RE.match(name):
                raise KeyedValueError(
                    f"invalid channel name {name!r}: 1-64 characters of letters, digits, "
                    "'.', '-' and '_' (SageMaker ChannelName)",
                    key=name,
                )
            if name in RESERVED_CHANNELS:
                raise KeyedValueError(
                    f"channel name {name!r} is reserved for the code bundle", key=name
                )
        return v

    @field_validator("environment")
    @classmethod
    def _env(cls, v: dict[str, str]) -> dict[str, str]:
        problem = credential_problem(v)
        if problem:
            raise KeyedValueError(problem[1], key=problem[0])
        for key in v:
            if not ENV_KEY_RE.match(key):
                raise KeyedValueError(
                    f"invalid environment variable name {key!r}: letters, digits and '_', "
                    "not starting with a digit",
                    key=key,
                )
            if key.startswith(RESERVED_ENV_PREFIX):
                raise KeyedValueError(
                    f"{key}: names starting with BSM_ are set by the toolkit", key=key
                )
        return v

    @field_validator("tags")
    @classmethod
    def _tags(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if key.lower().startswith(("aws:", "bsm:")):
                raise KeyedValueError(
                    f"tag key {key!r}: the aws: and bsm: prefixes are reserved", key=key
                )
        return v

    @field_validator("subnets", "security_group_ids")
    @classmethod
    def _vpc_ids(cls, v: list[str]) -> list[str]:
        for item in v:
            if not VPC_ID_RE.match(item):
                raise ValueError(f"invalid VPC resource id {item!r} (e.g. subnet-0abc, sg-0abc)")
        return v

    @field_validator("output_kms_key_id", "volume_kms_key_id")
    @classmethod
    def _kms(cls, v: str | None) -> str | None:
        if v is not None and not KMS_KEY_RE.match(v):
            raise ValueError(f"invalid KMS key id or ARN {v!r}")
        return v

    @model_validator(mode="after")
    def _vpc_pair(self) -> JobSpec:
        if bool(self.subnets) != bool(self.security_group_ids):
            raise ValueError("set both subnets and security_group_ids for a VPC, or neither")
        return self

    @property
    def code_prefix(self) -> str:
        return self.code_s3_prefix or f"{self.s3_prefix}/code"

    @property
    def output_prefix(self) -> str:
        return self.output_s3_prefix or f"{self.s3_prefix}/output"

    @property
    def tensorboard_prefix(self) -> str:
        return self.tensorboard_s3_prefix or f"{self.s3_prefix}/tensorboard"

    @property
    def checkpoint_prefix(self) -> str:
        return self.checkpoint_s3_prefix or f"{self.s3_prefix}/checkpoints"

    def placeholders(self) -> list[str]:
        """Dotted paths (under `job.`) whose values are still REPLACE-ME placeholders."""
        found = []
        for key, value in self.model_dump(mode="json").items():
            if isinstance(value, str) and is_placeholder(value):
                found.append(f"job.{key}")
            elif isinstance(value, dict):
                for sub, item in value.items():
                    text = item if isinstance(item, str) else str(item)
                    if is_placeholder(text) or is_placeholder(sub):
                        found.append(f"job.{key}.{sub}")
        return found
