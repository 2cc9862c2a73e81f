"""AWS failures turned into messages a person can act on.

Every boto3 call of this package runs inside `translate(action)`, which raises `AwsError`
(exit 4) naming what failed, why, and what to do: the quota to raise, the permission to add,
the capacity problem and its way out. botocore has already retried throttling and 5xx by then.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from blackwell_sm.aws.session import CallDeadlineExceeded
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


def _resource(message: str) -> str | None:
    m = re.search(r"on resource:?\s*(\S+)", message)
    return m.group(1).rstrip(".,;") if m else None


def one_line(message: str, limit: int = 300) -> str:
    """A service message on one line: an XML error's <Message>, never an HTML page."""
    text = message.strip()
    if text.startswith("<"):
        m = re.search(r"<Message>(.*?)</Message>", text, re.S)
        if m:
            text = m.group(1)
        else:
            title = re.search(r"<title>(.*?)</title>", text, re.S | re.I)
            text = title.group(1) if title else re.sub(r"<[^>]+>", " ", text)
            text = f"a non-JSON answer ({text.strip()[:120]})" if text.strip() else "an HTML page"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


_SERVICE_PREFIX = {"sagemaker": "sagemaker", "s3": "s3", "logs": "logs", "cloudwatch-logs": "logs"}
NOT_FOUND = frozenset(
    {"ResourceNotFound", "ResourceNotFoundException", "NoSuchKey", "NoSuchBucket", "404"}
)
VALIDATION = frozenset({"ValidationException", "ValidationError", "InvalidParameterValue"})


def _retry_hint(action: str) -> str:
    if action.startswith("creating training job"):
        return "run the command again; a submit reattaches to a job that was created"
    return "run the command again in a minute"


def map_client_error(
    error: Exception,
    *,
    action: str,
    service: str = "sagemaker",
    instance_type: str | None = None,
) -> AwsError:
    """A botocore ClientError as an AwsError with a stable `code` and what to do.

    Codes: credentials_rejected, access_denied, throttled, quota, capacity, not_found,
    resource_in_use, rejected_request, service_error, aws_error (anything else). The AWS error
    code is kept in the message.
    """
    from blackwell_sm.aws.session import credential_source

    response = getattr(error, "response", {}) or {}
    err = response.get("Error", {})
    code = str(err.get("Code", "Unknown"))
    raw = str(err.get("Message", ""))
    found = re.search(r"<Code>([A-Za-z.]+)</Code>", raw) if code.isdigit() else None
    if found:  # an XML error document where JSON was expected: its code is the real one
        code = found.group(1)
    message = one_line(raw or str(error))
    operation = getattr(error, "operation_name", "") or ""
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    attempts = response.get("ResponseMetadata", {}).get("RetryAttempts")
    tried = f" after {attempts + 1} attempts" if attempts else ""
    service = _SERVICE_PREFIX.get(service, service)

    if code in BAD_CREDENTIALS:  # before access denied: S3 answers these with HTTP 403
        return AwsError(
            f"{action}: AWS rejected the credentials ({code}: {message}); they come from "
            f"{credential_source()}",
            code="credentials_rejected",
            hint="refresh them (`aws sso login`, `aws configure`, or a new session token), or "
            "point AWS_PROFILE at a profile that works; `aws sts get-caller-identity` checks them",
        )
    if code in THROTTLING:
        return AwsError(
            f"{action}: AWS is throttling {operation or 'the call'}{tried} ({code}); nothing "
            "was changed by the failed call",
            code="throttled",
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
            f"{action}: a SageMaker quota is exhausted ({code}): {message}",
            code="quota",
            hint=f"request an increase of {quota} in Service Quotas → Amazon SageMaker "
            "(console, or `aws service-quotas list-service-quotas --service-code sagemaker` to "
            "find its code), or stop other jobs using it",
        )
    if code in {"InsufficientCapacityError", "CapacityError"} or "insufficient capacity" in (
        message.lower()
    ):
        return AwsError(
            f"{action}: not enough capacity ({code}): {message}",
            code="capacity",
            hint="retry later, use fewer instances, or book capacity with `bsm plans search`",
        )
    if code in ACCESS_DENIED or status == 403:
        perm = _permission(operation, service, message)
        resource = _resource(message)
        on = f" on {resource}" if resource else ""
        return AwsError(
            f"{action}: access denied: the caller lacks {perm}{on} ({code}: {message})",
            code="access_denied",
            hint=f"grant {perm}{on} to your IAM identity; {IAM_POLICY_HINT}",
        )
    if code == "ResourceInUse":
        return AwsError(f"{action}: {message}", code="resource_in_use")
    if code in NOT_FOUND:
        hint = "create the bucket or fix job.s3_prefix" if code == "NoSuchBucket" else None
        return AwsError(f"{action}: not found ({code}): {message}", code="not_found", hint=hint)
    if code in VALIDATION:
        field = re.search(r"at '([A-Za-z0-9_.\[\]]+)'", message)
        where = f" (field {field.group(1)})" if field else ""
        return AwsError(
            f"{action}: AWS rejected the request{where}: {message}", code="rejected_request"
        )
    if (isinstance(status, int) and status >= 500) or code in {
        "InternalFailure",
        "ServiceUnavailable",
    }:
        return AwsError(
            f"{action}: AWS had an internal error{tried} ({code}: {message}); botocore "
            "retried and gave up",
            code="service_error",
            hint=_retry_hint(action),
        )
    endpoint_set = any(k.startswith("AWS_ENDPOINT_URL") for k in os.environ)
    if code.isdigit() or not err.get("Code"):  # no AWS error document: a proxy or wrong endpoint
        return AwsError(
            f"{action}: the endpoint answered HTTP {status or code} without an AWS error "
            f"({message or 'empty body'})",
            code="service_error",
            hint="check AWS_ENDPOINT_URL: it must point at the service this call needs"
            if endpoint_set
            else "check the region and any proxy between you and AWS",
        )
    return AwsError(f"{action}: {code}: {message}", code="aws_error")


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
    except CallDeadlineExceeded as e:
        if e.response is not None:  # the service answered (throttled, 5xx): its error, bounded
            err = map_client_error(
                bx.ClientError(e.response[1], e.operation),
                action=action,
                service=service,
                instance_type=instance_type,
            )
            err.message += (
                f" (gave up after {e.waited_s:.0f} s and {e.attempts} attempts: "
                "the call deadline, BSM_AWS_CALL_DEADLINE_S)"
            )
            raise err from None
        raise _unreachable(action, e.last, waited=e) from None
    except bx.NoCredentialsError:
        raise AwsError(
            f"{action}: no AWS credentials found",
            code="no_credentials",
            hint="set AWS_PROFILE, run `aws configure` / `aws sso login`, or use an instance role",
        ) from None
    except bx.NoRegionError:
        raise AwsError(
            f"{action}: no AWS region", code="no_region", hint="set job.region or AWS_REGION"
        ) from None
    except bx.ParamValidationError as e:
        raise SpecError(
            f"{action}: the request does not match the AWS API: {e}", code="bad_request"
        ) from None
    except (bx.EndpointConnectionError, bx.ConnectTimeoutError, bx.ReadTimeoutError) as e:
        raise _unreachable(action, e) from None
    except bx.BotoCoreError as e:
        raise AwsError(f"{action}: {one_line(str(e))}", code="aws_error") from None


def _unreachable(action: str, error: Any, *, waited: Any = None) -> AwsError:
    """A connection that failed or an endpoint that never answered, with what to check."""
    from botocore import exceptions as bx

    endpoint = os.environ.get("AWS_ENDPOINT_URL")
    where = f"AWS_ENDPOINT_URL={endpoint}" if endpoint else "the network, proxy and region"
    timed_out = isinstance(error, bx.ReadTimeoutError) or (
        waited is not None and not isinstance(error, bx.EndpointConnectionError)
    )
    spent = f" after {waited.waited_s:.0f} s and {waited.attempts} attempts" if waited else ""
    if timed_out:
        return AwsError(
            f"{action}: the endpoint accepted the connection but did not answer{spent} "
            f"({one_line(str(error)) if error else 'no answer'})",
            code="timeout",
            hint=f"check {where}; a proxy or firewall that holds connections open causes this "
            "(BSM_AWS_READ_TIMEOUT_S / BSM_AWS_CALL_DEADLINE_S set the limits)",
        )
    return AwsError(
        f"{action}: cannot reach the AWS endpoint{spent} ({one_line(str(error))})",
        code="endpoint_unreachable",
        hint=f"check {where}",
    )
