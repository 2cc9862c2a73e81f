"""The SDK v2 view against a real SageMaker SDK 2.x (`make test-sdk-v2`, its own virtualenv): the
CreateTrainingJob an `Estimator.fit()` puts on the wire (captured under moto after the SDK's own
serialization) equals the builder's request field by field, the SIGTERM-safe entrypoint and the
job name included; and `bsm submit` (the AWS layer's `create_job`) sends the same request."""

from __future__ import annotations

import json
import warnings

import pytest
from aws_support import ACCOUNT, BUCKET, REGION, plan_for, run_spec

sagemaker = pytest.importorskip("sagemaker")
PLAN_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/bsm-test-plan"
MLFLOW_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-tracking-server/bsm-tracking"


def _spec():
    from blackwell_sm.spec import parse_spec

    spec = run_spec(
        max_retry_attempts=2,
        environment={"NCCL_DEBUG": "WARN"},
        tags={"team": "ml"},
        model_package_group="bsm-models",
        infra_check=True,
    )
    d = spec.model_dump(mode="json", exclude_unset=True)
    d["compute"]["training_plan"] = PLAN_ARN
    d["training"].update(
        report_to=["tensorboard", "mlflow"],
        mlflow={"tracking_uri": MLFLOW_ARN, "experiment": "llama"},
    )
    return parse_spec(d)


@pytest.fixture(scope="module")
def sent(tmp_path_factory):
    moto = pytest.importorskip("moto")
    mp = pytest.MonkeyPatch()
    for k, v in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "AWS_REGION": REGION,
    }.items():
        mp.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL"):
        mp.delenv(k, raising=False)
    from blackwell_sm.job.sdk import SdkViewWarning
    from blackwell_sm.job.sdk_v2 import estimator_and_request

    spec = _spec()
    captured: list[dict] = []
    with moto.mock_aws():
        import boto3

        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        session = sagemaker.Session(boto3.Session(region_name=REGION))
        session.sagemaker_client.meta.events.register(
            "before-call.sagemaker.CreateTrainingJob",
            lambda params, **_: captured.append(json.loads(params["body"])),
        )
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            est, req = estimator_and_request(spec, plan_for(spec), sagemaker_session=session)
        est.fit(wait=False, logs=False)
    mp.undo()
    assert len(captured) == 1
    notes = [str(w.message) for w in caught if issubclass(w.category, SdkViewWarning)]
    return captured[0], req, est, notes


def test_the_estimator_sends_the_builders_request_field_by_field(sent):
    wire, req, _, _ = sent
    assert sagemaker.__version__.startswith("2.")
    assert wire == req.request, {
        k: (wire.get(k), req.request.get(k))
        for k in set(wire) | set(req.request)
        if wire.get(k) != req.request.get(k)
    }


def test_the_entrypoint_is_the_launcher_as_pid_1_and_the_name_reattaches(sent):
    wire, req, _, _ = sent
    algo = wire["AlgorithmSpecification"]
    assert algo["ContainerEntrypoint"][:2] == ["bash", "-c"]
    assert "exec python blackwell_sm/entrypoints/launch.py" in algo["ContainerEntrypoint"][-1]
    assert "ContainerArguments" not in algo
    assert wire["TrainingJobName"] == req.job_name  # a rerun finds the same job
    assert wire["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN


def test_what_v2_cannot_say_is_named(sent):
    _, _, _, notes = sent
    assert any("MlflowConfig" in n and "ModelPackageConfig" in n for n in notes), notes


def test_bsm_submit_sends_the_same_request(sent, monkeypatch):
    """`bsm submit`'s create call (aws/jobs.py `create_job`, under moto) puts the same body on
    the wire as the v2 view's `fit()`."""
    import boto3
    import moto

    from blackwell_sm.aws.jobs import create_job

    wire, req, _, _ = sent
    for k, v in {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing"}.items():
        monkeypatch.setenv(k, v)
    captured: list[dict] = []
    with moto.mock_aws():
        sm = boto3.client("sagemaker", region_name=REGION)
        sm.meta.events.register(
            "before-call.sagemaker.CreateTrainingJob",
            lambda params, **_: captured.append(json.loads(params["body"])),
        )
        _, created = create_job(sm, req.request, spec_hash=req.spec_hash)
    assert created and captured == [wire]
