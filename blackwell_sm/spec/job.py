"""JobSpec: the SageMaker side of a run (role, region, S3 locations, image, channels, security).

Instance type, count and training plan live in `compute` (ComputeSpec), not here.
Values containing ``REPLACE-ME`` are placeholders: they validate (so templates plan and dry-run
as shipped) and the request builder lists them as warnings; the AWS layer refuses to submit them.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from blackwell_sm.spec.types import Bool, Float, Int, KeyedValueError, PosInt

PLACEHOLDER = "REPLACE-ME"
MAX_RUNTIME_HOURS = 28 * 24  # CreateTrainingJob's MaxRuntimeInSeconds ceiling (28 days)

ROLE_ARN_RE = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/[a-zA-Z_0-9+=,.@\-/]{1,512}$")
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d$")
S3_URI_RE = re.compile(r"^s3://(?P<bucket>[^/]+)(?P<key>/.*)?$")
# S3 general purpose bucket naming rules (Amazon S3 User Guide, "Bucket naming rules").
BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]$")
BUCKET_RULES_SOURCE = "Amazon S3 User Guide, general purpose bucket naming rules"
_BUCKET_IP_RE = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_BUCKET_RESERVED_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_RESERVED_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
# ECR image reference: ACCOUNT.dkr.ecr[-fips].REGION.amazonaws.com[.cn]/REPO[:TAG|@sha256:DIGEST].
# The repository part is ECR's RepositoryName pattern (botocore ecr model; a test compares).
ECR_REPOSITORY_PATTERN = r"[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*"
ECR_IMAGE_RE = re.compile(
    r"^(?P<account>\d{12})\.dkr\.ecr(?:-fips)?\.(?P<region>[a-z]{2}(?:-[a-z]+)+-\d)"
    r"\.amazonaws\.com(?:\.cn)?/(?P<repo>" + ECR_REPOSITORY_PATTERN + r")"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.\-]{0,127})|@sha256:(?P<digest>[a-f0-9]{64}))?$"
)
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
# Credentials never travel in a job's environment: the job role provides them. Names (compared
# upper-cased) from the AWS SDKs and Tools reference guide (environment variables), boto3's
# credential providers and the legacy EC2 API tools; the container-credential and profile
# variables are included because they would replace the role's credentials.
FORBIDDEN_ENV_KEYS = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_ACCESS_KEY",
        "AWS_SECRET_KEY",
        "AWS_CREDENTIAL_EXPIRATION",
        "AWS_CREDENTIAL_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_CONFIG_FILE",
        "AWS_PROFILE",
        "AWS_DEFAULT_PROFILE",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN",
        "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE",
        "EC2_ACCESS_KEY",
        "EC2_SECRET_KEY",
    }
)
# Published credential formats: access key ids are 20 characters, a 4-letter prefix (AKIA
# long-term, ASIA temporary; ABIA, ACCA, A3T* older) then 16 base32 characters (IAM User Guide,
# "Unique identifiers"); secret access keys are 40 characters of base64.
ACCESS_KEY_ID_RE = re.compile(
    r"(?<![A-Z0-9])(?:AKIA|ASIA|ABIA|ACCA|A3T[A-Z0-9])[A-Z2-7]{16}(?![A-Z0-9])"
)
SECRET_KEY_RE = re.compile(r"(?<![A-Za-z0-9/+=])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+=])")
_SECRETISH_NAME = re.compile(r"SECRET|KEY|TOKEN|CRED|PASS", re.IGNORECASE)
RESERVED_CHANNELS = frozenset({"code"})  # the code bundle's channel
RESERVED_ENV_PREFIX = "BSM_"  # set by the builder (BSM_MAX_RUNTIME_S, ...)


def is_placeholder(value: str | None) -> bool:
    return value is not None and PLACEHOLDER.lower() in value.lower()


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


def bucket_problem(bucket: str) -> str | None:
    """Why S3 would refuse `bucket` as a general purpose bucket name, or None."""
    if not BUCKET_RE.match(bucket):
        return (
            "3-63 lowercase letters, digits, dots and hyphens, starting and ending with a "
            "letter or digit"
        )
    if ".." in bucket:
        return "two adjacent dots"
    if _BUCKET_IP_RE.match(bucket):
        return "formatted as an IP address"
    for prefix in _BUCKET_RESERVED_PREFIXES:
        if bucket.startswith(prefix):
            return f"the prefix {prefix!r} is reserved"
    for suffix in _BUCKET_RESERVED_SUFFIXES:
        if bucket.endswith(suffix):
            return f"the suffix {suffix!r} is reserved"
    return None


def check_image_uri(v: str) -> str:
    """An ECR image reference; anything else gets a message saying where the image must live."""
    if is_placeholder(v) or ECR_IMAGE_RE.match(v):
        return v
    first = v.split("/", 1)[0]
    if "/" not in v or ("." not in first and ":" not in first and first != "localhost"):
        where = "a Docker Hub image"
    elif "amazonaws.com" in first and ".dkr.ecr" not in first:
        where = "an AWS address that is not an ECR registry"
    elif ".dkr.ecr" in first:
        where = "not a well-formed ECR image reference"
    else:
        where = f"an image on another registry ({first})"
    raise ValueError(
        f"{v!r} is {where}: SageMaker training pulls its image from Amazon ECR; "
        "push the image to an ECR repository and give ACCOUNT.dkr.ecr.REGION.amazonaws.com/"
        "REPOSITORY[:TAG|@sha256:DIGEST] (12-digit account, lowercase repository)"
    )


def credential_problem(env: dict[str, str]) -> tuple[str, str] | None:
    """(key, message) for the first environment entry that carries AWS credentials."""
    tail = (
        "must not be set in the job environment: the job's IAM role (job.role_arn) provides "
        "credentials inside the container, and the environment is visible to anyone who can "
        "call DescribeTrainingJob"
    )
    has_key_id = any(ACCESS_KEY_ID_RE.search(value) for value in env.values())
    for key, value in env.items():
        if key.upper() in FORBIDDEN_ENV_KEYS:
            return key, f"{key} is an AWS credential variable and {tail}"
        if ACCESS_KEY_ID_RE.search(value):
            return key, f"the value of {key} holds an AWS access key id; credentials {tail}"
        if SECRET_KEY_RE.search(value) and (has_key_id or _SECRETISH_NAME.search(key)):
            return key, (
                f"the value of {key} looks like an AWS secret access key (40 characters of "
                f"base64); credentials {tail}"
            )
    return None


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
        "<model>-<spec hash> folder, shared by --new reruns so they resume.",
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
                raise ValueError("torch comes with the image and is never installed; choose "
                                 "job.image_uri for another torch")  # fmt: skip
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

    @field_validator("s3_prefix", "code_s3_prefix", "output_s3_prefix", "checkpoint_s3_prefix")
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
