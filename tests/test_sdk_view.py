"""The SDK view: the CreateTrainingJob that ModelTrainer really sends (captured under moto on the
wire, after the SDK's own serialization) equals the builder's request, field by field; and it
does so with the SDK's role validation ON: its IAM policy simulation (which moto lacks) is
answered by a botocore Stubber from the generated job-role policy, evaluated with moto's IAM
policy evaluator, and its trust check reads the generated trust policy."""

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
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_REGION": "us-east-1",
    }.items():
        mp.setenv(k, v)
    for k in ("AWS_PROFILE", "AWS_ENDPOINT_URL", "SAGEMAKER_VALIDATE_ROLE", "AWS_MAX_ATTEMPTS"):
        mp.delenv(k, raising=False)
    from blackwell_sm.aws.sdk import model_trainer_and_request
    from blackwell_sm.job.sdk import SdkViewWarning

    spec = run_spec(
        max_retry_attempts=2,
        environment={"NCCL_DEBUG": "WARN"},
        tags={"team": "ml"},
        infra_check=True,
    )
    spec.compute.training_plan = ARN
    spec.training.report_to = ["tensorboard"]  # a native member ModelTrainer takes by the hook
    captured: list[dict] = []
    with moto.mock_aws():
        import boto3

        boto3.client("s3", region_name="us-east-1").create_bucket(Bucket="bsm-test-bucket")
        session, iam_stub, role_checked = _role_checked_session(spec)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            trainer, req = model_trainer_and_request(
                spec, plan_for(spec), sagemaker_session=session
            )
        iam_stub.assert_no_pending_responses()  # the SDK did simulate and read the trust policy
        assert role_checked["denied"] == []
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
    assert "exec python blackwell_sm/entrypoints/launch.py" in algo["ContainerEntrypoint"][-1]
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
    # what ModelTrainer has no argument for, sent by the hook as built (job/sdk_table.py)
    assert wire["TensorBoardOutputConfig"] == q["TensorBoardOutputConfig"]
    assert wire["InfraCheckConfig"] == q["InfraCheckConfig"] == {"EnableInfraCheck": True}
    assert any("TensorBoardOutputConfig" in w and "hook" in w for w in sdk_warnings)
    # the one field it cannot match: its own timestamp suffix on our base name
    assert wire["TrainingJobName"].startswith(req.base_job_name + "-")
    assert any("ContainerEntrypoint" in w and "reattach" in w for w in sdk_warnings)


def _role_checked_session(spec):
    """A SageMaker SDK Session whose IAM client is stubbed with what IAM would answer for the
    generated role policy (simulation) and trust policy (GetRole)."""
    import boto3
    from botocore.stub import Stubber
    from moto.iam.access_control import IAMPolicy, PermissionResult
    from sagemaker.core.helper.iam_role_resolver import _get_smoke_test_actions
    from sagemaker.core.helper.session_helper import Session

    from blackwell_sm.job.iam import iam_policies

    policies = iam_policies(spec)
    evaluator = IAMPolicy(json.dumps(policies["job_role"]))
    actions = _get_smoke_test_actions("training")  # what the SDK's role check simulates
    results = []
    denied = []
    for action in actions:
        ok = evaluator.is_action_permitted(action, "*") == PermissionResult.PERMITTED
        # the simulator has no context keys: a statement with a condition would not apply
        granting = [
            st
            for st in policies["job_role"]["Statement"]
            if action in st["Action"] and st["Resource"] == "*"
        ]
        ok = ok and all("Condition" not in st for st in granting)
        results.append(
            {
                "EvalActionName": action,
                "EvalResourceName": "*",
                "EvalDecision": "allowed" if ok else "implicitDeny",
            }
        )
        if not ok:
            denied.append(action)
    boto_session = boto3.Session(region_name="us-east-1")
    iam = boto_session.client("iam")
    stub = Stubber(iam)
    role = spec.job.role_arn
    stub.add_response(
        "simulate_principal_policy",
        {"EvaluationResults": results, "IsTruncated": False},
        {"PolicySourceArn": role, "ActionNames": actions},
    )
    stub.add_response(
        "get_role",
        {
            "Role": {
                "Path": "/",
                "RoleName": role.rsplit("/", 1)[-1],
                "RoleId": "AROAEXAMPLEEXAMPLE123",
                "Arn": role,
                "CreateDate": "2026-01-01T00:00:00Z",
                "AssumeRolePolicyDocument": json.dumps(policies["job_role_trust"]),
            }
        },
        {"RoleName": role.rsplit("/", 1)[-1]},
    )
    stub.activate()
    make_client = boto_session.client
    boto_session.client = lambda name, *a, **kw: (
        iam if name == "iam" else make_client(name, *a, **kw)
    )
    return Session(boto_session=boto_session), stub, {"denied": denied}
