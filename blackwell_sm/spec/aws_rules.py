"""AWS naming and credential rules for the spec: S3 bucket names, ECR image references, and
credentials that must never travel in a job's environment. Each rule names its source.
"""

from __future__ import annotations

import re

PLACEHOLDER = "REPLACE-ME"

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


def is_placeholder(value: str | None) -> bool:
    return value is not None and PLACEHOLDER.lower() in value.lower()


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
