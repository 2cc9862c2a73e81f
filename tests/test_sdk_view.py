"""The SDK view: the CreateTrainingJob that ModelTrainer really sends (captured under moto on the
wire, after the SDK's own serialization) equals the builder's request, field by field."""

from __future__ import annotations

import json
import warnings

import pytest
from aws_support import plan_for, run_spec

ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/bsm-test-plan"


@pytest.fixture(scope="module")
def sent():
    pytest.importorskip("sagemaker.train")
    moto = pytest.importorskip("moto")
    mp = pytest.MonkeyPatch()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1", "AWS_REGION": "us-east-1",
        "SAGEMAKER_VALIDATE_ROLE": "false",  # moto cannot simulate IAM policies
    }.items():  # fmt: skip
        mp.setenv(k, v)
    mp.delenv("AWS_PROFILE", raising=False)
    mp.delenv("AWS_ENDPOINT_URL", raising=False)
    from blackwell_sm.job.sdk import SdkViewWarning, model_trainer_and_request

    spec = run_spec(max_retry_attempts=2, environment={"NCCL_DEBUG": "WARN"}, tags={"team": "ml"})
    spec.compute.training_plan = ARN
    captured: list[dict] = []
    with moto.mock_aws():
        import boto3

        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bsm-test-bucket")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer, req = model_trainer_and_request(spec, plan_for(spec))
        events = trainer.sagemaker_session.boto_session.events
        events.register(
            "before-call.sagemaker.CreateTrainingJob",
            lambda params, **_: captured.append(json.loads(params["body"])),
        )
        trainer.train(wait=False, logs=False)
        bundle = (
            boto3.client("s3")
            .get_object(Bucket="bsm-test-bucket", Key=req.bundle_s3_uri.split("/", 3)[3])["Body"]
            .read()
        )
    mp.undo()
    assert len(captured) == 1
    sdk_warnings = [str(w.message) for w in caught if issubclass(w.category, SdkViewWarning)]
    return captured[0], req, bundle, sdk_warnings


def test_model_trainer_sends_the_builders_request(sent):
    wire, req, bundle, sdk_warnings = sent
    q = req.request
    assert bundle == req.bundle.data  # uploaded at its content address
    assert (
        wire["ResourceConfig"]["TrainingPlanArn"] == ARN == q["ResourceConfig"]["TrainingPlanArn"]
    )
    for key in ("InstanceType", "InstanceCount", "VolumeSizeInGB"):
        assert wire["ResourceConfig"][key] == q["ResourceConfig"][key], key
    algo, want = wire["AlgorithmSpecification"], q["AlgorithmSpecification"]
    assert algo["TrainingImage"] == want["TrainingImage"]
    assert algo["ContainerEntrypoint"] == want["ContainerEntrypoint"]
    assert "exec python entrypoints/launch.py" in algo["ContainerEntrypoint"][-1]
    assert "ContainerArguments" not in algo  # no SDK bash driver in front of the launcher
    assert algo["MetricDefinitions"] == want["MetricDefinitions"]
    assert wire["Environment"] == q["Environment"]
    assert wire["CheckpointConfig"] == q["CheckpointConfig"]
    assert wire["StoppingCondition"] == q["StoppingCondition"]
    assert wire["Tags"] == q["Tags"]
    assert wire["InputDataConfig"] == q["InputDataConfig"]  # code + train, no sm_drivers
    assert wire["OutputDataConfig"] == q["OutputDataConfig"]
    assert wire["HyperParameters"] == q["HyperParameters"]
    assert wire["RetryStrategy"] == q["RetryStrategy"]
    assert wire["RoleArn"] == q["RoleArn"]
    # the one field it cannot match: its own timestamp suffix on our base name
    assert wire["TrainingJobName"].startswith(req.base_job_name + "-")
    assert any("ContainerEntrypoint" in w and "reattach" in w for w in sdk_warnings)
