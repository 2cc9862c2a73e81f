"""submit() against moto (S3, SageMaker jobs) with the training-plan API stubbed (Stubber)."""

from __future__ import annotations

import pytest
from aws_support import (
    BUCKET,
    P6,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    HttpFaults,
    plan_response,
    spec_dict,
)
from botocore.stub import Stubber

from blackwell_sm.aws.jobs import SPEC_HASH_TAG
from blackwell_sm.aws.session import AwsContext
from blackwell_sm.aws.submit import submit
from blackwell_sm.errors import (
    AwsError,
    BsmError,
    ConsentRequiredError,
    InfeasiblePlanError,
    SpecError,
)


def bucket_keys(aws: AwsContext) -> list[str]:
    return [o["Key"] for o in aws.s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]


def test_dry_run_calls_nothing_and_uploads_nothing(aws):
    with Stubber(aws.sagemaker) as sm, Stubber(aws.s3) as s3, Stubber(aws.plans) as plans:
        # No responses queued: any AWS call would raise inside the stubbers.
        job = submit(spec_dict(training_plan=PLAN_ARN), dry_run=True, aws=aws)
        sm.assert_no_pending_responses()
        s3.assert_no_pending_responses()
        plans.assert_no_pending_responses()
    assert job.dry_run and not job.created
    assert job.request["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN
    assert bucket_keys(aws) == []
    with pytest.raises(BsmError, match=r"dry run: no job .* was created") as e:
        job.status()
    assert type(e.value) is BsmError  # not an AWS error: nothing was called


def test_submit_creates_job_with_plan_and_uploads_once_then_reattaches(aws):
    with Stubber(aws.plans) as plans:
        plans.add_response(
            "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
        )
        job = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
        plans.assert_no_pending_responses()
    assert job.created and not job.reattached
    assert job.upload.uploaded
    d = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    assert d["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN
    assert d["ResourceConfig"]["InstanceType"] == P6
    tags = {
        t["Key"]: t["Value"]
        for t in aws.sagemaker.list_tags(ResourceArn=d["TrainingJobArn"])["Tags"]
    }
    assert tags[SPEC_HASH_TAG] == job.job_request.spec_hash
    keys = bucket_keys(aws)
    assert keys == [job.job_request.bundle_s3_uri.split(f"{BUCKET}/", 1)[1]]
    body = aws.s3.get_object(Bucket=BUCKET, Key=keys[0])["Body"].read()
    assert body == job.job_request.bundle.data

    # The same spec again: the job is found by name + spec hash; no plan lookup, no upload.
    with Stubber(aws.plans) as plans:
        again = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert again.reattached and not again.created and again.name == job.name
    assert len(aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]) == 1
    assert bucket_keys(aws) == keys


def test_new_makes_a_second_job_and_reuses_the_bundle(aws):
    first = submit(spec_dict(), aws=aws)
    second = submit(spec_dict(), aws=aws, new=True)
    assert second.name != first.name and second.name.startswith(first.name)
    assert first.upload.uploaded and not second.upload.uploaded
    assert len(bucket_keys(aws)) == 1
    assert len(aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]) == 2


def test_same_name_other_spec_is_refused(aws):
    job = submit(spec_dict(), aws=aws)
    arn = aws.sagemaker.describe_training_job(TrainingJobName=job.name)["TrainingJobArn"]
    aws.sagemaker.add_tags(ResourceArn=arn, Tags=[{"Key": SPEC_HASH_TAG, "Value": "someone-else"}])
    with pytest.raises(AwsError, match="not made from this spec") as e:
        submit(spec_dict(), aws=aws)
    assert "--new" in e.value.hint


def test_placeholders_are_refused_before_any_call(aws):
    spec = spec_dict(s3_prefix="s3://REPLACE-ME-bucket/x")
    with Stubber(aws.sagemaker), Stubber(aws.s3), pytest.raises(SpecError, match="REPLACE-ME"):
        submit(spec, aws=aws)


@pytest.mark.parametrize(
    ("response", "match"),
    [
        (plan_response(status="Expired"), "is Expired"),
        (plan_response(instance_type="ml.p5.48xlarge"), "reserves ml.p5.48xlarge"),
        (plan_response(total=0, available=0), "instances in all"),
    ],
)
def test_unusable_plan_is_refused_with_the_reason(aws, response, match):
    with Stubber(aws.plans) as plans:
        plans.add_response("describe_training_plan", response, {"TrainingPlanName": PLAN_NAME})
        with pytest.raises(SpecError, match=match) as e:
            submit(spec_dict(training_plan=PLAN_NAME), aws=aws)
    assert e.value.field == "compute.training_plan"
    assert bucket_keys(aws) == []
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []


def test_too_short_plan_is_refused_with_cycles_and_extension(aws):
    spec = spec_dict("llama-3.1-8b", training_plan=PLAN_NAME)
    with Stubber(aws.plans) as plans:
        plans.add_response(
            "describe_training_plan", plan_response(hours=24), {"TrainingPlanName": PLAN_NAME}
        )
        # no extension offered now: the advice stays the generic one
        plans.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": []})
        with pytest.raises(InfeasiblePlanError) as e:
            submit(spec, aws=aws)
    msg = str(e.value)
    assert "checkpoint-resume cycles" in msg and "ExtendTrainingPlan by" in msg
    assert "--allow-partial" in e.value.hint
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []

    with Stubber(aws.plans) as plans:
        plans.add_response(
            "describe_training_plan", plan_response(hours=24), {"TrainingPlanName": PLAN_NAME}
        )
        job = submit(spec, aws=aws, allow_partial=True)
    assert job.created and job.plan_fit.resume_cycles > 1
    assert any("does not fit" in w for w in job.warnings)


def test_arn_of_other_region_is_refused_before_any_call(aws):
    other = PLAN_ARN.replace(REGION, "us-west-2")
    with Stubber(aws.plans), pytest.raises(SpecError, match="us-west-2"):
        submit(spec_dict(training_plan=other), aws=aws)


def test_a_costly_run_needs_consent_like_a_reservation(aws):
    """Issue 11: above compute.confirm_cost_usd, no terminal and no --yes is exit 5; a prompt
    that says no starts nothing; --yes starts it."""
    spec = spec_dict()
    spec["compute"]["confirm_cost_usd"] = 0.05
    spec["training"] = {"total_tokens": 10**10}  # ~$0.15-0.21 of p6-b200 time
    with pytest.raises(ConsentRequiredError) as e:
        submit(spec, aws=aws)
    assert e.value.exit_code == 5 and "confirm_cost_usd" in str(e.value)
    asked: list[str] = []
    with pytest.raises(ConsentRequiredError):
        submit(spec, aws=aws, confirm=lambda text: asked.append(text) or False)
    assert asked and "pessimistic" in asked[0]
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
    assert not any(k.endswith(".tar.gz") for k in bucket_keys(aws))  # nothing uploaded
    assert submit(spec, aws=aws, yes=True).name


def test_dry_run_with_init_from_shows_the_init_channel(aws):
    """`bsm submit --dry-run` with training.init_from: s3://... (issue 16): the `init` channel
    (FastFile) is in the request, and the job role's policy reads that prefix."""
    from blackwell_sm.job.iam import iam_policies
    from blackwell_sm.spec import parse_spec

    d = spec_dict("qwen3-8b")
    d["training"] = {"init_from": f"s3://{BUCKET}/hf/Qwen3-8B/", "total_steps": 1000}
    job = submit(d, dry_run=True, aws=aws)
    init = [c for c in job.request["InputDataConfig"] if c["ChannelName"] == "init"]
    assert init and init[0]["InputMode"] == "FastFile"
    assert init[0]["DataSource"]["S3DataSource"]["S3Uri"] == f"s3://{BUCKET}/hf/Qwen3-8B/"
    role = {s["Sid"]: s for s in iam_policies(parse_spec(d))["job_role"]["Statement"]}
    assert f"arn:aws:s3:::{BUCKET}/hf/Qwen3-8B/*" in role["ReadCodeDataAndCheckpoints"]["Resource"]


def test_a_submit_racing_its_twin_past_the_reattach_check_reattaches(aws, monkeypatch):
    """Two submits of one spec on two machines: the second passed its reattach check before the
    first created the job. Its own job name, live on the prefix, is the job it was about to
    create: it reattaches (created once), never refuses its own job as another's (exit 5)."""
    import blackwell_sm.aws.submit as pipeline

    def stub(plans: Stubber) -> None:
        plans.add_response(
            "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
        )

    with Stubber(aws.plans) as plans:
        stub(plans)
        first = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    from moto.sagemaker.models import sagemaker_backends

    backend = sagemaker_backends["123456789012"][REGION]  # moto's own state: the job runs on
    backend.training_jobs[first.name].training_job_status = "InProgress"
    monkeypatch.setattr(pipeline, "reattach", lambda *a, **k: None)  # the check ran too early
    # what SageMaker answers a second CreateTrainingJob of one name (moto in-process does not)
    dup = (400, "ResourceInUse", f"Training job names must be unique: {first.name} exists")
    HttpFaults(aws.sagemaker, "CreateTrainingJob", [dup])
    with Stubber(aws.plans) as plans:
        stub(plans)
        twin = submit(spec_dict(training_plan=PLAN_ARN), aws=aws)
    assert first.created and twin.reattached and not twin.created and twin.name == first.name
    assert len(aws.sagemaker.list_training_jobs()["TrainingJobSummaries"]) == 1
