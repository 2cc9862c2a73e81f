"""Issue 12, failure by failure: capacity identity, credentials, settings and endpoints, the
notebook API, the SDK view's order, and the region (moto in-process; a Stubber where moto has
no API; a local socket server for an endpoint that never answers)."""

from __future__ import annotations

import time

import pytest
from aws_support import (
    BUCKET,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    HttpFaults,
    describe_response,
    fake_credentials,
    no_sleep,
    plan_response,
    spec_dict,
)
from botocore.stub import Stubber
from net_support import silent_server

from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.aws.jobs import SPEC_HASH_TAG
from blackwell_sm.aws.session import AwsContext, check_settings
from blackwell_sm.aws.submit import prepare, submit
from blackwell_sm.errors import AwsError, BsmError, SpecError


def jobs(aws):
    return aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]


# 1. capacity is part of a job's identity ------------------------------------------------------
def test_a_plan_request_never_reattaches_to_the_on_demand_job(aws):
    on_demand = submit(spec_dict(), aws=aws)
    with Stubber(aws.plans) as plans:
        plans.add_response(
            "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
        )
        on_plan = submit(spec_dict(), training_plan=PLAN_ARN, aws=aws)
    assert on_plan.created and not on_plan.reattached
    assert on_plan.name != on_demand.name
    d = aws.sagemaker.describe_training_job(TrainingJobName=on_plan.name)
    assert d["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN
    assert len(jobs(aws)) == 2


@pytest.mark.parametrize("ref", [PLAN_ARN, PLAN_NAME, "auto"])
def test_reattach_compares_the_live_capacity_and_refuses_naming_both(aws, ref):
    """A job of this name and spec hash whose ResourceConfig is not the one asked for (changed
    outside the toolkit) is refused with the way out, never reported as reattached."""
    _rs, _plan, jr = prepare(spec_dict(training_plan=ref))
    rc = {k: v for k, v in jr.request["ResourceConfig"].items() if k != "TrainingPlanArn"}
    req = {**jr.request, "ResourceConfig": rc}  # the same name, on on-demand capacity
    aws.sagemaker.create_training_job(**req)
    with pytest.raises(AwsError) as e:
        submit(spec_dict(training_plan=ref), aws=aws)
    assert e.value.code == "capacity_mismatch" and e.value.exit_code == 4
    assert "on-demand" in str(e.value) and (ref in str(e.value) or PLAN_ARN in str(e.value))
    assert "--new" in e.value.hint and f"bsm stop {jr.job_name}" in e.value.hint
    assert len(jobs(aws)) == 1


def test_reattach_refuses_another_instance_count(aws):
    _rs, _plan, jr = prepare(spec_dict())
    rc = {**jr.request["ResourceConfig"], "InstanceCount": 2}
    aws.sagemaker.create_training_job(**{**jr.request, "ResourceConfig": rc})
    with pytest.raises(AwsError, match="InstanceCount: asked 1, the job has 2") as e:
        submit(spec_dict(), aws=aws)
    assert e.value.code == "capacity_mismatch"


# 4. credentials rejected are not missing permissions ------------------------------------------
@pytest.mark.parametrize("code", ["InvalidAccessKeyId", "SignatureDoesNotMatch"])
def test_s3_bad_credentials_are_named_as_such(aws, monkeypatch, code):
    no_sleep(monkeypatch)
    HttpFaults(aws.s3, "GetBucketLocation", [(403, code, "The key you provided is wrong")])
    with pytest.raises(AwsError) as e:
        submit(spec_dict(), aws=aws)
    assert e.value.code == "credentials_rejected"
    assert "PutObject" not in str(e.value) and "lacks" not in str(e.value)
    assert "AWS_ACCESS_KEY_ID" in str(e.value)  # where the credentials come from
    assert "aws sso login" in e.value.hint and jobs(aws) == []


def test_invalid_client_token_is_credentials_with_no_xml(aws, monkeypatch):
    xml = (
        b'<ErrorResponse xmlns="https://iam.amazonaws.com/doc/2010-05-08/"><Error>'
        b"<Type>Sender</Type><Code>InvalidClientTokenId</Code><Message>The security token "
        b"included in the request is invalid.</Message></Error><RequestId>x</RequestId>"
        b"</ErrorResponse>"
    )
    HttpFaults(
        aws.sagemaker,
        "DescribeTrainingJob",
        [(403, "InvalidClientTokenId", "", xml, "text/xml")],
    )
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=aws).status()
    assert e.value.code == "credentials_rejected", str(e.value)
    assert "<" not in str(e.value) and "DescribeTrainingJob" not in str(e.value)


def test_access_denied_names_the_action_and_the_resource(aws, monkeypatch):
    msg = (
        "User: arn:aws:iam::123456789012:user/ci is not authorized to perform: "
        "sagemaker:DescribeTrainingJob on resource: "
        "arn:aws:sagemaker:us-east-1:123456789012:training-job/bsm-x-1 because no "
        "identity-based policy allows the sagemaker:DescribeTrainingJob action"
    )
    HttpFaults(aws.sagemaker, "DescribeTrainingJob", [(400, "AccessDeniedException", msg)])
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=aws).status()
    assert e.value.code == "access_denied"
    assert "sagemaker:DescribeTrainingJob on arn:aws:sagemaker:" in e.value.hint


# 5. settings and endpoints --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("var", "value"),
    [("AWS_MAX_ATTEMPTS", "abc"), ("AWS_MAX_ATTEMPTS", "0"), ("AWS_ENDPOINT_URL", "notaurl")],
)
def test_bad_settings_are_exit_2_naming_the_variable(monkeypatch, tmp_path, var, value):
    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv(var, value)
    with pytest.raises(SpecError) as e:
        AwsContext(REGION)
    assert e.value.field == var and e.value.exit_code == 2 and var in str(e.value)
    with pytest.raises(SpecError):
        check_settings()


def test_a_silent_endpoint_fails_in_bounded_time_with_what_to_check(monkeypatch, tmp_path):
    """An endpoint that accepts and never answers: `timeout`, within the call deadline (here
    shortened through the settings; the default bound is 55 s)."""
    fake_credentials(monkeypatch, tmp_path)
    no_sleep(monkeypatch)
    monkeypatch.setenv("BSM_AWS_READ_TIMEOUT_S", "0.5")
    monkeypatch.setenv("BSM_AWS_CONNECT_TIMEOUT_S", "0.5")
    monkeypatch.setenv("BSM_AWS_CALL_DEADLINE_S", "2")
    with silent_server() as (url, held):
        monkeypatch.setenv("AWS_ENDPOINT_URL", url)
        start = time.monotonic()
        with pytest.raises(AwsError) as e:
            TrainingJob("bsm-x-1", aws=AwsContext(REGION)).status()
        took = time.monotonic() - start
    assert e.value.code == "timeout"
    # without the deadline botocore would make 8 attempts; with 1 s per attempt and 2 s in all,
    # it makes at most 2 (counted by the connections the server accepted, not by a clock)
    assert 1 <= len(held) <= 2, (len(held), took)
    assert "did not answer" in str(e.value) and "AWS_ENDPOINT_URL=http://127.0.0.1" in e.value.hint


def test_a_closed_port_is_endpoint_unreachable(monkeypatch, tmp_path):
    fake_credentials(monkeypatch, tmp_path)
    no_sleep(monkeypatch)
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_MAX_ATTEMPTS", "2")
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=AwsContext(REGION)).status()
    assert e.value.code == "endpoint_unreachable" and "AWS_ENDPOINT_URL" in e.value.hint


def test_an_html_error_page_is_cut_to_one_line(aws, monkeypatch):
    page = (
        b"<html><head><title>404 Not Found</title></head><body>"
        + b"<p>x</p>" * 500
        + b"</body></html>"
    )
    HttpFaults(aws.sagemaker, "DescribeTrainingJob", [(404, "404", "", page)])
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=aws).status()
    text = str(e.value)
    assert e.value.code in ("service_error", "not_found"), text
    assert "<p>" not in text and "\n" not in e.value.message and len(e.value.message) < 400


def test_throttled_and_service_error_codes_and_hints(aws, monkeypatch):
    no_sleep(monkeypatch)
    HttpFaults(aws.sagemaker, "DescribeTrainingJob", [(400, "ThrottlingException", "slow")] * 8)
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=aws).stop()
    assert e.value.code == "throttled"
    HttpFaults(aws.sagemaker, "DescribeTrainingJob", [(500, "InternalFailure", "oops")] * 8)
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=aws).stop()
    assert e.value.code == "service_error"
    assert "reattach" not in e.value.hint  # only submits reattach (issue 12, 6.)


# 6. the notebook API --------------------------------------------------------------------------
def test_wait_honours_its_timeout(aws):
    job = submit(spec_dict(), aws=aws)
    running = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    slept: list[float] = []
    with Stubber(aws.sagemaker) as sm:
        for _ in range(3):
            sm.add_response("describe_training_job", {**running, "TrainingJobStatus": "InProgress"})
        clock = [0.0]

        def sleep(s: float) -> None:
            slept.append(s)
            clock[0] += s

        import blackwell_sm.aws.handle as handle

        real = handle.time.monotonic
        handle.time.monotonic = lambda: clock[0]
        try:
            with pytest.raises(BsmError, match="timeout 5 s") as e:
                job.wait(timeout_s=5, sleep=sleep)
        finally:
            handle.time.monotonic = real
    assert slept == [5.0]  # polled once more at the deadline, not given up at once
    assert e.value.code == "wait_timeout"


def test_logs_say_when_there_is_no_stream_yet(aws):
    job = submit(spec_dict(), aws=aws)
    notes: list[str] = []
    assert list(job.logs(notify=notes.append)) == []
    assert notes and "no log stream yet" in notes[0]


# 7. the SDK view refuses placeholders before any call -----------------------------------------
def test_sdk_view_refuses_placeholders_before_any_call(aws):
    """No S3 or SDK call: the refusal comes before the SageMaker SDK is even imported."""
    import sys

    from blackwell_sm.aws.sdk import to_model_trainer

    calls: list[str] = []
    aws.session.events.register("provide-client-params.*.*", lambda **kw: calls.append("x"))
    spec = spec_dict(s3_prefix="s3://REPLACE-ME-bucket/x")
    had_sdk = "sagemaker.train" in sys.modules
    with pytest.raises(SpecError, match="REPLACE-ME") as e:
        to_model_trainer(spec)
    assert e.value.field == "job.s3_prefix" and calls == []
    assert had_sdk or "sagemaker.train" not in sys.modules


# 8. region ------------------------------------------------------------------------------------
def test_a_bucket_in_another_region_is_refused_before_any_upload(aws):
    aws.s3.create_bucket(
        Bucket="bsm-eu-bucket", CreateBucketConfiguration={"LocationConstraint": "eu-west-1"}
    )
    spec = spec_dict(s3_prefix="s3://bsm-eu-bucket/runs")
    with pytest.raises(SpecError) as e:
        submit(spec, aws=aws)
    assert e.value.code == "bucket_region_mismatch" and e.value.field == "job.s3_prefix"
    assert "eu-west-1" in str(e.value) and "us-east-1" in e.value.hint
    assert "Contents" not in aws.s3.list_objects_v2(Bucket="bsm-eu-bucket")
    assert jobs(aws) == []


def test_region_precedence_is_one_order_and_says_what_it_overrode(monkeypatch, tmp_path):
    from blackwell_sm.aws.session import choose_region

    fake_credentials(monkeypatch, tmp_path)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    assert choose_region(None, None).source == "AWS_REGION"
    spec = choose_region(None, "us-east-1")
    assert spec.region == "us-east-1" and spec.source == "job.region"
    assert "AWS_REGION=eu-west-1" in spec.describe()
    flag = choose_region("us-west-2", "us-east-1")
    assert flag.region == "us-west-2" and flag.source == "--region"


def test_dry_run_and_status_print_the_region_and_its_source(aws, monkeypatch, tmp_path):
    import contextlib
    import io
    import json

    import yaml

    from blackwell_sm.cli import main
    from blackwell_sm.cli import submit as submit_cli

    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit) as e,
    ):
        main(["submit", str(path), "--dry-run", "--output", "json"])
    assert e.value.code == 0
    assert json.loads(out.getvalue())["region_source"] == "job.region"
    assert "region us-east-1 (from job.region); ignored: AWS_REGION=eu-west-1" in err.getvalue()
    out, err = io.StringIO(), io.StringIO()
    with (
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
        pytest.raises(SystemExit),
    ):
        main(["status", "bsm-nope", "--region", "us-east-1"])
    assert "region us-east-1 (from --region)" in err.getvalue()


def test_list_knows_the_toolkits_jobs_by_name_with_no_call_per_job(aws):
    """2. `bsm list` asks the server for bsm- names and knows its jobs by their name's shape
    (issue 32: it made one ListTags call per listed job, 1,100 calls for --limit 1000)."""
    from blackwell_sm.aws.jobs import list_jobs
    from blackwell_sm.job.names import base_job_name, run_job_name, unique_suffix

    ours = submit(spec_dict(), aws=aws)
    d = aws.sagemaker.describe_training_job(TrainingJobName=ours.name)
    for i in range(8):
        aws.sagemaker.create_training_job(
            TrainingJobName=f"other-team-{i}" if i < 5 else f"bsm-other-team-{i}",
            AlgorithmSpecification=d["AlgorithmSpecification"],
            RoleArn=d["RoleArn"],
            OutputDataConfig=d["OutputDataConfig"],
            ResourceConfig=d["ResourceConfig"],
            StoppingCondition=d["StoppingCondition"],
        )
    made = [ours.name]
    for i in range(120):  # more of the toolkit's names: runs' -rN jobs and --new jobs
        base = base_job_name(f"model-{i}", f"{i:012x}")
        made.append(run_job_name(base, 2) if i % 2 else base + unique_suffix())
        aws.sagemaker.create_training_job(
            TrainingJobName=made[-1],
            **{k: d[k] for k in ("AlgorithmSpecification", "RoleArn", "OutputDataConfig")},
            ResourceConfig=d["ResourceConfig"],
            StoppingCondition=d["StoppingCondition"],
        )
    ops: list[str] = []
    aws.sagemaker.meta.events.register(
        "provide-client-params.sagemaker.*", lambda model, **_: ops.append(model.name)
    )
    rows = list_jobs(aws.sagemaker, limit=1000)
    assert sorted(r["TrainingJobName"] for r in rows) == sorted(made)
    assert set(ops) == {"ListTrainingJobs"} and len(ops) <= 2  # a page per 100 jobs, no tags
    mine = next(r for r in rows if r["TrainingJobName"] == ours.name)
    assert mine["SpecHash"] == ours.job_request.spec_hash and mine["ModelStem"] == "tiny"
    assert SPEC_HASH_TAG and BUCKET  # the fixture's bucket holds the bundle


def test_describe_response_helper_still_matches(aws):
    _rs, _plan, jr = prepare(spec_dict())
    assert describe_response(jr.request)["ResourceConfig"] == jr.request["ResourceConfig"]
