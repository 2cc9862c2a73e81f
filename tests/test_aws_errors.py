"""Faults: throttling and 5xx retried by botocore; quota, access and validation errors explained;
a plan ARN that SageMaker dropped is caught; nothing half-made is left behind."""

from __future__ import annotations

import pytest
from aws_support import (
    BUCKET,
    FAKE_KEY_ID,
    FAKE_SECRET,
    P6,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    HttpFaults,
    describe_response,
    fake_credentials,
    no_sleep,
    not_found_error,
    plan_response,
    spec_dict,
)
from botocore.stub import Stubber

from blackwell_sm.aws.errors import explain_failure
from blackwell_sm.aws.jobs import SPEC_HASH_TAG
from blackwell_sm.aws.session import MAX_ATTEMPTS, AwsContext
from blackwell_sm.aws.submit import prepare, submit
from blackwell_sm.errors import AwsError

NONE_LIVE = {"TrainingJobSummaries": []}  # ListTrainingJobs: no live job on the spec's prefix


def jobs(aws):
    return aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]


def keys(aws):
    return [o["Key"] for o in aws.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_throttled_create_is_retried_with_backoff(aws, monkeypatch):
    slept = no_sleep(monkeypatch)
    faults = HttpFaults(
        aws.sagemaker,
        "CreateTrainingJob",
        [(400, "ThrottlingException", "Rate exceeded")] * 2,
        monkeypatch,
    )
    job = submit(spec_dict(), aws=aws)
    assert job.created and faults.calls == 3
    assert len(slept) == 2 and all(0 <= s <= 20 for s in slept)
    assert [j["TrainingJobName"] for j in jobs(aws)] == [job.name]


def test_throttling_that_never_ends_is_reported_without_a_job(aws, monkeypatch):
    no_sleep(monkeypatch)
    faults = HttpFaults(
        aws.sagemaker,
        "CreateTrainingJob",
        [(400, "ThrottlingException", "Rate exceeded")] * 20,
        monkeypatch,
    )
    with pytest.raises(AwsError, match="throttling") as e:
        submit(spec_dict(), aws=aws)
    assert faults.calls == MAX_ATTEMPTS
    assert f"{MAX_ATTEMPTS} attempts" in str(e.value)
    assert jobs(aws) == []


def test_s3_5xx_is_retried_and_persistent_5xx_leaves_no_bundle_and_no_job(aws, monkeypatch):
    no_sleep(monkeypatch)
    HttpFaults(aws.s3, "PutObject", [(503, "SlowDown", "Reduce your request rate")], monkeypatch)
    job = submit(spec_dict(), aws=aws)
    assert job.upload.uploaded and len(keys(aws)) == 1

    aws.s3.delete_object(Bucket=BUCKET, Key=keys(aws)[0])
    HttpFaults(
        aws.s3,
        "PutObject",
        [(500, "InternalError", "We encountered an internal error")] * 20,
        monkeypatch,
    )
    with pytest.raises(AwsError, match="internal error"):
        submit(spec_dict(), aws=aws, new=True)
    assert keys(aws) == []
    assert len(jobs(aws)) == 1  # only the first


def test_retried_create_answered_resource_in_use_is_ours_when_tags_match(aws):
    _rs, _plan, jr = prepare(spec_dict())
    described = describe_response(jr.request)
    arn = described["TrainingJobArn"]
    with Stubber(aws.sagemaker) as sm:
        for retried in (1, 0):  # botocore retried (an earlier attempt made it), or not
            sm.add_client_error("describe_training_job", **not_found_error(jr.job_name))
            sm.add_response("list_training_jobs", NONE_LIVE)
            sm.add_client_error(
                "create_training_job",
                service_error_code="ResourceInUse",
                service_message=f"Training job {jr.job_name} already exists",
                http_status_code=400,
                response_meta={"RetryAttempts": retried},
            )
            sm.add_response("describe_training_job", described, {"TrainingJobName": jr.job_name})
            sm.add_response(
                "list_tags",
                {"Tags": [{"Key": SPEC_HASH_TAG, "Value": jr.spec_hash}]},
                {"ResourceArn": arn, "MaxResults": 100},
            )
            sm.add_response("describe_training_job", described, {"TrainingJobName": jr.job_name})
            sm.add_response("list_training_jobs", NONE_LIVE)
            job = submit(spec_dict(), aws=aws)
            sm.assert_no_pending_responses()
            assert job.name == jr.job_name
            # created only where this process's CreateTrainingJob made the job
            assert (job.created, job.reattached) == ((True, False) if retried else (False, True))


def test_resource_in_use_by_another_spec_is_refused(aws):
    _rs, _plan, jr = prepare(spec_dict())
    described = describe_response(jr.request)
    with Stubber(aws.sagemaker) as sm:
        sm.add_client_error("describe_training_job", **not_found_error(jr.job_name))
        sm.add_response("list_training_jobs", NONE_LIVE)
        sm.add_client_error(
            "create_training_job", service_error_code="ResourceInUse", http_status_code=400
        )
        sm.add_response("describe_training_job", described)
        sm.add_response("list_tags", {"Tags": [{"Key": SPEC_HASH_TAG, "Value": "other"}]})
        with pytest.raises(AwsError, match="not made from this spec") as e:
            submit(spec_dict(), aws=aws)
    assert "--new" in e.value.hint


def _create_refused(aws, code: str, message: str) -> AwsError:
    """The error `submit` raises when CreateTrainingJob answers `code` with `message`."""
    _rs, _plan, jr = prepare(spec_dict())
    with Stubber(aws.sagemaker) as sm:
        sm.add_client_error("describe_training_job", **not_found_error(jr.job_name))
        sm.add_response("list_training_jobs", NONE_LIVE)
        sm.add_client_error(
            "create_training_job",
            service_error_code=code,
            service_message=message,
            http_status_code=400,
        )
        with pytest.raises(AwsError) as e:
            submit(spec_dict(), aws=aws)
    return e.value


def test_resource_limit_exceeded_names_the_quota(aws):
    message = (
        "The account-level service limit 'ml.p6-b200.48xlarge for training job usage' is 0 "
        "Instances, with current utilization of 0 Instances and a request delta of 1 Instances."
    )
    error = _create_refused(aws, "ResourceLimitExceeded", message)
    assert error.code == "quota" and error.exit_code == 4
    assert f"'{P6} for training job usage'" in error.hint
    assert "Service Quotas" in error.hint


def test_access_denied_names_the_permission(aws):
    message = (
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: iam:PassRole on "
        "resource: arn:aws:iam::123456789012:role/bsm-test-role"
    )
    error = _create_refused(aws, "AccessDeniedException", message)
    assert "iam:PassRole" in error.message and "bsm iam-policy" in error.hint


def test_s3_access_denied_names_s3_permission(aws, monkeypatch):
    HttpFaults(aws.s3, "PutObject", [(403, "AccessDenied", "Access Denied")], monkeypatch)
    with pytest.raises(AwsError, match="s3:PutObject") as e:
        submit(spec_dict(), aws=aws)
    assert "bsm iam-policy" in e.value.hint
    assert jobs(aws) == []


def test_validation_exception_passes_through_with_the_field(aws):
    message = (
        "1 validation error detected: Value 'x' at 'resourceConfig.instanceType' failed to "
        "satisfy constraint"
    )
    error = _create_refused(aws, "ValidationException", message)
    assert "field resourceConfig.instanceType" in str(error)


def test_dropped_training_plan_arn_is_detected_and_the_job_stopped(aws):
    _rs, _plan, jr = prepare(spec_dict(training_plan=PLAN_ARN))
    kept = describe_response(jr.request)
    del kept["ResourceConfig"]["TrainingPlanArn"]  # what the 2026 SDK bug produced
    with Stubber(aws.plans) as plans, Stubber(aws.sagemaker) as sm:
        plans.add_response(
            "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
        )
        sm.add_client_error("describe_training_job", **not_found_error(jr.job_name))
        sm.add_response("list_training_jobs", NONE_LIVE)
        sm.add_response("create_training_job", {"TrainingJobArn": kept["TrainingJobArn"]})
        sm.add_response("describe_training_job", kept, {"TrainingJobName": jr.job_name})
        sm.add_response("stop_training_job", {}, {"TrainingJobName": jr.job_name})
        with pytest.raises(AwsError) as e:
            submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
        sm.assert_no_pending_responses()
    assert e.value.code == "capacity_mismatch"
    assert "TrainingPlanArn" in str(e.value) and PLAN_ARN in str(e.value)
    assert "was stopped" in str(e.value)


def test_capacity_failure_reasons_are_explained():
    text = explain_failure("CapacityError: InsufficientCapacityError: not enough capacity")
    assert "2 days" in text and "bsm plans" in text
    assert "checkpoint" in explain_failure("Training plan capacity block expired")
    assert explain_failure("something new") is None


def test_session_honours_endpoint_region_retries_and_hides_credentials(monkeypatch, tmp_path):
    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    ctx = AwsContext()
    assert ctx.region == "eu-west-1"
    assert ctx.sagemaker.meta.endpoint_url == "http://127.0.0.1:4566"
    assert ctx.sagemaker.meta.config.retries == {
        "mode": "standard",
        "total_max_attempts": MAX_ATTEMPTS,
    }
    assert FAKE_KEY_ID not in repr(ctx) and FAKE_SECRET not in repr(ctx)


def test_missing_profile_is_an_aws_error(monkeypatch, tmp_path):
    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile")
    with pytest.raises(AwsError, match="no-such-profile"):
        AwsContext(REGION)
