"""AWS failures turned into messages a person can act on.

Every boto3 call of this package runs inside `translate(action)`, which raises `AwsError`
(exit 4) naming what failed, why, and what to do: the quota to raise, the permission to add,
the capacity problem and its way out. botocore has already retried throttling and 5xx by then.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from blackwell_sm.errors import AwsError, SpecError

THROTTLING = frozenset(
    {
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "TooManyRequestsException",
        "RequestLimitExceeded",
        "RequestThrottled",
        "RequestThrottledException",
        "SlowDown",
        "ProvisionedThroughputExceededException",
    }
)
ACCESS_DENIED = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Forbidden", "403"}
)
BAD_CREDENTIALS = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "InvalidAccessKeyId",
        "SignatureDoesNotMatch",
        "InvalidSignatureException",
    }
)
IAM_POLICY_HINT = "`bsm iam-policy SPEC.yaml` prints the least-privilege policy this toolkit needs"

# Capacity and stop reasons that SageMaker puts in FailureReason, and what to do about them.
FAILURE_EXPLANATIONS: list[tuple[re.Pattern[str], str]] = [
    (
        re.compile(r"InsufficientCapacity|insufficient capacity", re.I),
        "SageMaker could not get enough instances of this type. On a training plan the job "
        "waits up to 2 days for free instances of the plan, then fails like this. Retry later, "
        "check the plan's AvailableInstanceCount (`bsm plans describe NAME`), or book capacity "
        "with `bsm plans search`.",
    ),
    (
        re.compile(
            r"CapacityError|capacity (block|reservation).*(expired|ended)|plan.*expired", re.I
        ),
        "The reserved capacity ended while the job ran (instances are reclaimed about 30 "
        "minutes before a plan's end). The last complete checkpoint is in the job's checkpoint "
        "S3 prefix: `bsm submit SPEC --new --training-plan NEXT_PLAN` resumes from it.",
    ),
    (
        re.compile(r"ResourceLimitExceeded|quota", re.I),
        "An account quota was hit: raise it in Service Quotas (Amazon SageMaker), e.g. "
        "'<instance type> for training job usage'.",
    ),
    (
        re.compile(r"MaxRuntimeExceeded|max(imum)? ?runtime", re.I),
        "The job ran past StoppingCondition.MaxRuntimeInSeconds (job.max_runtime_hours). It "
        "saved a checkpoint on SIGTERM: `bsm submit SPEC --new` resumes from it.",
    ),
    (
        re.compile(r"AlgorithmError|non-zero exit|exit code", re.I),
        "The training code failed. `bsm logs JOB` shows each host's log; the failing rank "
        "wrote its exception to /opt/ml/output/failure (the start of FailureReason).",
    ),
    (
        re.compile(r"AccessDenied|not authorized|403", re.I),
        "The job's role lacks a permission (S3 data, checkpoints, KMS or ECR). " + IAM_POLICY_HINT,
    ),
]


def explain_failure(reason: str | None) -> str | None:
    """What a job's FailureReason means and how to get past it (None when unknown)."""
    if not reason:
        return None
    for pattern, text in FAILURE_EXPLANATIONS:
        if pattern.search(reason):
            return text
    return None


def _permission(operation: str, service: str, message: str) -> str:
    m = re.search(r"perform:\s*([A-Za-z0-9-]+:[A-Za-z0-9*]+)", message)
    if m:
        return m.group(1)
    # IAM actions that differ from the API operation's name.
    action = {"HeadObject": "GetObject", "ListObjectsV2": "ListBucket"}.get(operation, operation)
    return f"{service}:{action}"


_SERVICE_PREFIX = {"sagemaker": "sagemaker", "s3": "s3", "logs": "logs", "cloudwatch-logs": "logs"}


def map_client_error(
    error: Exception,
    *,
    action: str,
    service: str = "sagemaker",
    instance_type: str | None = None,
) -> AwsError:
    """A botocore ClientError as an AwsError with what to do."""
    response = getattr(error, "response", {}) or {}
    err = response.get("Error", {})
    code = str(err.get("Code", "Unknown"))
    message = str(err.get("Message", "")) or str(error)
    operation = getattr(error, "operation_name", "") or ""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    attempts = response.get("ResponseMetadata", {}).get("RetryAttempts")
    tried = f" after {attempts + 1} attempts" if attempts else ""
    service = _SERVICE_PREFIX.get(service, service)

    if code in THROTTLING:
        return AwsError(
            f"{action}: AWS is throttling {operation or 'the call'}{tried} ({code}); nothing "
            "was changed by the failed call",
            code=code,
            hint="wait a minute and run the command again, or set AWS_MAX_ATTEMPTS higher",
        )
    if code == "ResourceLimitExceeded":
        quota = (
            f"'{instance_type} for training job usage'"
            if instance_type
            else "the SageMaker quota named in the message"
        )
        if operation in {"CreateTrainingPlan", "SearchTrainingPlanOfferings"}:
            quota = f"the training-plan quota for {instance_type or 'the instance type'}"
        return AwsError(
            f"{action}: a SageMaker quota is exhausted: {message}",
            code=code,
            hint=f"request an increase of {quota} in Service Quotas → Amazon SageMaker "
            "(console, or `aws service-quotas list-service-quotas --service-code sagemaker` to "
            "find its code), or stop other jobs using it",
        )
    if code in ACCESS_DENIED or status == 403:
        perm = _permission(operation, service, message)
        return AwsError(
            f"{action}: access denied: the caller lacks {perm} ({message})",
            code=code,
            hint=f"grant {perm} to your IAM identity; {IAM_POLICY_HINT}",
        )
    if code in BAD_CREDENTIALS:
        return AwsError(
            f"{action}: AWS rejected the credentials ({code})",
            code=code,
            hint="refresh them (`aws sso login`, or a new session token) or check AWS_PROFILE",
        )
    if code == "ResourceInUse":
        return AwsError(f"{action}: {message}", code=code)
    if code in {"ResourceNotFound", "ResourceNotFoundException", "NoSuchKey", "NoSuchBucket"}:
        hint = None
        if code == "NoSuchBucket":
            hint = "create the bucket or fix job.s3_prefix"
        return AwsError(f"{action}: not found: {message}", code=code, hint=hint)
    if code in {"ValidationException", "ValidationError", "InvalidParameterValue"}:
        field = re.search(r"at '([A-Za-z0-9_.\[\]]+)'", message)
        where = f" (field {field.group(1)})" if field else ""
        return AwsError(f"{action}: SageMaker rejected the request{where}: {message}", code=code)
    if isinstance(status, int) and status >= 500:
        return AwsError(
            f"{action}: AWS had an internal error{tried} ({code}: {message}); botocore "
            "retried and gave up",
            code=code,
            hint="run the command again; submits reattach to a job that was created",
        )
    return AwsError(f"{action}: {code}: {message}", code=code)


@contextmanager
def translate(
    action: str, *, service: str = "sagemaker", instance_type: str | None = None
) -> Iterator[None]:
    """Run boto3 calls; turn botocore's exceptions into AwsError (or SpecError)."""
    from botocore import exceptions as bx

    try:
        yield
    except bx.ClientError as e:
        raise map_client_error(
            e, action=action, service=service, instance_type=instance_type
        ) from None
    except bx.NoCredentialsError:
        raise AwsError(
            f"{action}: no AWS credentials found",
            code="NoCredentials",
            hint="set AWS_PROFILE, run `aws configure` / `aws sso login`, or use an instance role",
        ) from None
    except bx.NoRegionError:
        raise AwsError(
            f"{action}: no AWS region", code="NoRegion", hint="set job.region or AWS_REGION"
        ) from None
    except bx.ParamValidationError as e:
        raise SpecError(f"{action}: the request does not match the AWS API: {e}") from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as e:
        raise AwsError(
            f"{action}: cannot reach AWS ({e}) after retries",
            code="Connection",
            hint="check the network, AWS_ENDPOINT_URL and the region",
        ) from None
    except bx.BotoCoreError as e:
        raise AwsError(f"{action}: {e}", code=type(e).__name__) from None
