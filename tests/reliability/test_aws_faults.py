"""AWS faults on every call `submit` (and the log reader) makes: retried, or reported without
partial state.

Errors are injected with botocore's own mechanisms, never by patching toolkit functions:
- `before-send` hooks (tests/aws_support.HttpFaults) answer a request with an HTTP 500/503 or a
  throttling error body without moto's backend executing it, so the fault travels botocore's
  real parsing and standard-mode retry path and the rejected call changes nothing;
- botocore's `Stubber.add_client_error` for the training-plan API, which moto lacks.
Back-off sleeps are recorded instead of slept (`no_sleep`), so the suite stays fast.

The promises: a transient fault is retried and the end state is exactly that of a clean submit;
a persistent fault ends in AwsError (exit 4) and leaves no job without its code bundle, no bundle
that a job would use half there, and never a second job for the same spec.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import boto3
import pytest
from aws_support import (
    BUCKET,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    HttpFaults,
    no_sleep,
    plan_response,
    spec_dict,
)
from botocore.awsrequest import AWSResponse
from botocore.stub import Stubber

from blackwell_sm.aws.logs import LOG_GROUP, job_streams, read_new_events
from blackwell_sm.aws.session import AwsContext
from blackwell_sm.aws.submit import submit
from blackwell_sm.errors import AwsError

SLOW_DOWN = (503, "SlowDown", "Please reduce your request rate.")
S3_500 = (500, "InternalError", "We encountered an internal error. Please try again.")
THROTTLE = (400, "ThrottlingException", "Rate exceeded")
SM_500 = (500, "InternalFailure", "An internal error occurred.")
ALWAYS = 12  # more faults than botocore's attempts: the call fails for good


@pytest.fixture
def aws(aws, monkeypatch):
    """conftest's moto context, with 4 attempts per call and back-off sleeps recorded."""
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "4")
    aws.slept = no_sleep(monkeypatch)
    return aws


def jobs(aws: AwsContext) -> list[str]:
    side = boto3.client("sagemaker", region_name=REGION)  # no fault hooks on this one
    return [j["TrainingJobName"] for j in side.list_training_jobs()["TrainingJobSummaries"]]


def bundles(aws: AwsContext) -> dict[str, bytes]:
    side = boto3.client("s3", region_name=REGION)
    keys = [o["Key"] for o in side.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    return {k: side.get_object(Bucket=BUCKET, Key=k)["Body"].read() for k in keys}


def assert_clean_submit(aws: AwsContext, job: Any) -> None:
    """Exactly one job, whose code channel points at a complete bundle of the right hash."""
    assert jobs(aws) == [job.name]
    d = boto3.client("sagemaker", region_name=REGION).describe_training_job(
        TrainingJobName=job.name
    )
    (code,) = [c for c in d["InputDataConfig"] if c["ChannelName"] == "code"]
    key = code["DataSource"]["S3DataSource"]["S3Uri"].removeprefix(f"s3://{BUCKET}/")
    data = bundles(aws)[key]
    assert hashlib.sha256(data).hexdigest() == job.job_request.bundle.sha256
    assert data == job.job_request.bundle.data
    assert d["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN


def _plans_stubbed(aws: AwsContext) -> Stubber:
    stub = Stubber(aws.plans)
    stub.add_response("describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME})
    return stub


# (client attribute, operation, faults): every call of a submit on a training plan ARN, in order.
CALLS = [
    ("sagemaker", "DescribeTrainingJob", [THROTTLE, SM_500]),  # reattach check; after create
    ("s3", "HeadObject", [S3_500]),  # is the bundle there already / verify after upload
    ("s3", "PutObject", [SLOW_DOWN, S3_500]),
    ("sagemaker", "CreateTrainingJob", [THROTTLE, SM_500]),
    ("sagemaker", "ListTags", [THROTTLE]),  # only on the reattaching resubmit
]


def test_transient_faults_on_every_call_are_retried_to_a_clean_submit(aws):
    injected = [HttpFaults(getattr(aws, c), op, faults) for c, op, faults in CALLS]
    with _plans_stubbed(aws) as plans:
        job = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
        plans.assert_no_pending_responses()
    again = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)  # a CI rerun: reattaches
    for f in injected:  # every fault was answered, and each call then went through
        assert not f.faults and f.calls > len(CALLS[injected.index(f)][2]), f.operation
    assert len(aws.slept) >= sum(len(c[2]) for c in CALLS)  # botocore backed off each time
    assert job.upload.uploaded and again.reattached
    assert_clean_submit(aws, job)


def test_a_bundle_that_cannot_be_uploaded_means_no_job(aws):
    HttpFaults(aws.s3, "PutObject", [SLOW_DOWN] * ALWAYS)
    with _plans_stubbed(aws), pytest.raises(AwsError) as e:
        submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert e.value.exit_code == 4
    assert "code bundle" in str(e.value) and "PutObject" in str(e.value)
    assert jobs(aws) == []  # no job without its code
    assert bundles(aws) == {}  # and nothing half there


def test_a_bundle_damaged_in_transit_is_removed_and_no_job_is_created(aws):
    """A PutObject whose body is cut short on the way (a broken proxy): S3 must not keep it, or
    the toolkit must notice it by size/hash and delete it — either way no job may use it."""

    cut: list[int] = []

    def truncate(request, **_kw):
        body = request.body if isinstance(request.body, bytes) else request.body.read()
        request.body = body[: len(body) // 2]
        request.headers["Content-Length"] = str(len(request.body))
        cut.append(len(body))

    aws.s3.meta.events.register_first("before-send.s3.PutObject", truncate)
    with _plans_stubbed(aws), pytest.raises(AwsError):
        submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert cut  # the body really was cut
    assert jobs(aws) == []
    assert bundles(aws) == {}


def test_a_half_bundle_already_at_the_key_is_replaced_not_used(aws):
    job = submit(spec_dict(), dry_run=True, aws=aws)
    key = job.job_request.bundle_s3_uri.removeprefix(f"s3://{BUCKET}/")
    boto3.client("s3", region_name=REGION).put_object(
        Bucket=BUCKET, Key=key, Body=job.job_request.bundle.data[:1000]
    )
    with _plans_stubbed(aws):
        job = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert job.upload.uploaded  # it did not trust the object it found
    assert_clean_submit(aws, job)


class LostCreateResponse:
    """CreateTrainingJob goes through on SageMaker, but its response is lost (a 500 on the way
    back), so botocore retries it. SageMaker refuses a second job of the same name with
    ResourceInUse; moto does not enforce that, so this hook answers it the way SageMaker would.
    """

    def __init__(self, sm: Any) -> None:
        self.side = boto3.client("sagemaker", region_name=REGION)
        self.accepted = 0
        self.calls = 0
        sm.meta.events.register_first("before-send.sagemaker.CreateTrainingJob", self)

    def __call__(self, request: Any, **_kw: Any) -> AWSResponse:
        self.calls += 1
        kwargs = json.loads(request.body)
        request.url = "https://fault-injected.invalid/"  # this hook is SageMaker for the call
        names = [
            j["TrainingJobName"] for j in self.side.list_training_jobs()["TrainingJobSummaries"]
        ]
        if kwargs["TrainingJobName"] in names:
            return _json_error(request, 400, "ResourceInUse", "Training job names must be unique")
        self.side.create_training_job(**kwargs)
        self.accepted += 1
        return _json_error(request, 500, "InternalFailure", "An internal error occurred.")


class _Raw:
    def __init__(self, body: bytes) -> None:
        self._body = body

    def stream(self, **_kw: Any):
        yield self._body


def _json_error(request: Any, status: int, code: str, message: str) -> AWSResponse:
    body = json.dumps({"__type": code, "message": message}).encode()
    headers = {"Content-Type": "application/x-amz-json-1.1", "x-amzn-ErrorType": code}
    return AWSResponse(request.url, status, headers, _Raw(body))


def test_a_retried_create_never_makes_a_second_job(aws):
    lost = LostCreateResponse(aws.sagemaker)
    with _plans_stubbed(aws):
        job = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert lost.calls == 2 and lost.accepted == 1  # retried once, accepted once
    assert_clean_submit(aws, job)
    # a CI rerun of the same spec reattaches instead of creating anything
    again = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert again.reattached and lost.calls == 2
    assert jobs(aws) == [job.name]


def test_create_failing_for_good_leaves_a_reusable_bundle_and_no_job(aws):
    HttpFaults(aws.sagemaker, "CreateTrainingJob", [THROTTLE] * ALWAYS)
    with _plans_stubbed(aws), pytest.raises(AwsError) as e:
        submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert e.value.exit_code == 4 and "creating training job" in str(e.value)
    assert jobs(aws) == []
    (data,) = bundles(aws).values()  # complete and content-addressed: the retry reuses it
    aws.sagemaker.meta.events.unregister("before-send.sagemaker.CreateTrainingJob")
    aws2 = AwsContext(REGION)
    with _plans_stubbed(aws2):
        job = submit(spec_dict(training_plan=PLAN_ARN), aws=aws2)
    assert not job.upload.uploaded and job.job_request.bundle.data == data
    assert_clean_submit(aws2, job)


@pytest.mark.parametrize("code", ["ThrottlingException", "ResourceNotFound"])
def test_training_plan_errors_stop_before_any_upload_or_job(aws, code):
    with Stubber(aws.plans) as plans:
        plans.add_client_error("describe_training_plan", code, "injected", http_status_code=400)
        with pytest.raises(AwsError) as e:
            submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
        plans.assert_no_pending_responses()
    assert e.value.exit_code == 4
    assert jobs(aws) == [] and bundles(aws) == {}


def test_reserving_errors_leave_no_job(aws):
    """'auto': search, then CreateTrainingPlan fails (consent given) → no bundle, no job."""
    from datetime import UTC, datetime, timedelta

    from aws_support import offering

    start = datetime.now(UTC) + timedelta(hours=2)
    with Stubber(aws.plans) as plans:
        plans.add_client_error("describe_training_plan", "ResourceNotFound", "no such plan")
        plans.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": [offering("tpo-1", start=start, hours=96, fee="100.00")]},
        )
        plans.add_client_error("create_training_plan", "ThrottlingException", "Rate exceeded")
        with pytest.raises(AwsError):
            submit(spec_dict(training_plan="auto"), aws=aws, yes=True)
    assert jobs(aws) == [] and bundles(aws) == {}


def _log_events(aws: AwsContext, job: str) -> None:
    import time

    now = int(time.time() * 1000)
    logs = boto3.client("logs", region_name=REGION)
    logs.create_log_group(logGroupName=LOG_GROUP)
    stream = f"{job}/algo-1-1700000000"
    logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
    logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=stream,
        logEvents=[{"timestamp": now + i, "message": f"line {i}"} for i in range(3)],
    )


@pytest.mark.parametrize("op", ["DescribeLogStreams", "GetLogEvents"])
def test_log_reads_are_retried(aws, op):
    _log_events(aws, "job-a")
    faults = HttpFaults(aws.logs, op, [THROTTLE, SM_500])
    assert job_streams(aws.logs, "job-a") == ["job-a/algo-1-1700000000"]
    events = read_new_events(aws.logs, "job-a", {})
    assert [e.message for e in events] == ["line 0", "line 1", "line 2"]
    assert faults.calls >= 3 and not faults.faults


def test_log_reads_failing_for_good_are_reported(aws):
    _log_events(aws, "job-b")
    HttpFaults(aws.logs, "DescribeLogStreams", [THROTTLE] * ALWAYS)
    with pytest.raises(AwsError) as e:
        job_streams(aws.logs, "job-b")
    assert e.value.exit_code == 4 and "log streams" in str(e.value)
