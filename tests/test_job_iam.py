"""`bsm iam-policy`: least-privilege policies derived from the spec, with real action names."""

from __future__ import annotations

import json
from pathlib import Path

import botocore.session
import pytest
from aws_support import run_spec

from blackwell_sm.cli import main
from blackwell_sm.job.iam import BUY_ACTIONS, iam_policies

ROLE = "arn:aws:iam::123456789012:role/bsm-test-role"
TEMPLATE = Path(__file__).resolve().parents[1] / "templates" / "llama-3.1-8b.yaml"


def _statements(doc):
    return {s["Sid"]: s for s in doc["Statement"]}


def _resources(stmt):
    r = stmt["Resource"]
    return [r] if isinstance(r, str) else r


def test_caller_policy_is_narrowed_to_the_spec():
    caller = _statements(iam_policies(run_spec())["caller"])
    create = caller["CreateTheSpecsTrainingJobs"]
    assert create["Action"] == ["sagemaker:CreateTrainingJob"]
    assert create["Resource"] == [
        "arn:aws:sagemaker:us-east-1:123456789012:training-job/bsm-llama-3-1-8b-*"
    ]
    assert create["Condition"]["ForAllValues:StringEquals"]["sagemaker:InstanceTypes"] == [
        "ml.p6-b200.48xlarge"
    ]
    passrole = caller["PassTheJobRoleToSageMaker"]
    assert passrole["Action"] == ["iam:PassRole"] and passrole["Resource"] == [ROLE]
    assert passrole["Condition"]["StringEquals"]["iam:PassedToService"] == "sagemaker.amazonaws.com"
    assert caller["UploadAndCheckTheCodeBundle"]["Resource"] == [
        "arn:aws:s3:::bsm-test-bucket/runs/code/*"
    ]
    # issue 12: `bsm list` reads tags of every bsm-* job; tagging a reserved plan needs AddTags
    assert caller["ManageTheToolkitsTrainingJobs"]["Resource"] == [
        "arn:aws:sagemaker:us-east-1:123456789012:training-job/bsm-*"
    ]
    assert "sagemaker:AddTags" in caller["UseAndReserveTrainingPlans"]["Action"]
    # issue 15: extending spends money too, so it sits in the statement to drop; the history
    # is read with the other plan actions
    assert caller["ReserveTrainingPlans"]["Action"] == [
        "sagemaker:CreateTrainingPlan",
        "sagemaker:ExtendTrainingPlan",
    ]
    assert (
        "sagemaker:DescribeTrainingPlanExtensionHistory"
        in caller["UseAndReserveTrainingPlans"]["Action"]
    )
    # only calls without resource-level permissions get "*"
    wide = {s["Sid"] for s in caller.values() if "*" in _resources(s)}
    assert wide == {"ListJobsAndPlansSearchOfferings"}


def test_job_role_reads_code_and_channels_writes_output_and_pulls_the_image():
    role = _statements(iam_policies(run_spec())["job_role"])
    assert set(role["ReadCodeDataAndCheckpoints"]["Resource"]) == {
        "arn:aws:s3:::bsm-test-bucket/runs/code/*",
        "arn:aws:s3:::bsm-test-bucket/data/train/*",
        "arn:aws:s3:::bsm-test-bucket/runs/checkpoints/*",
    }
    assert set(role["WriteOutputAndCheckpoints"]["Resource"]) == {
        "arn:aws:s3:::bsm-test-bucket/runs/output/*",
        "arn:aws:s3:::bsm-test-bucket/runs/checkpoints/*",
    }
    assert role["PullTheTrainingImage"]["Resource"] == [
        "arn:aws:ecr:us-east-1:763104351884:repository/pytorch-training"
    ]
    assert "UseTheSpecsKmsKeys" not in role
    listing = role["ListInputsAndCheckpoints0"]
    assert listing["Resource"] == "arn:aws:s3:::bsm-test-bucket"
    assert "runs/code/*" in listing["Condition"]["StringLike"]["s3:prefix"]


def test_kms_only_when_the_spec_uses_it_and_vpc_actions_always():
    key = "arn:aws:kms:us-east-1:123456789012:key/abc"
    spec = run_spec(output_kms_key_id=key, subnets=["subnet-1"], security_group_ids=["sg-1"])
    role = _statements(iam_policies(spec)["job_role"])
    assert role["UseTheSpecsKmsKeys"]["Resource"] == [key]
    # VPC jobs need them, and the SageMaker SDK's role check simulates them for every role
    vpc = _statements(iam_policies(run_spec())["job_role"])[
        "VpcNetworkInterfacesAndTheSdkRoleCheck"
    ]
    assert "ec2:CreateNetworkInterface" in vpc["Action"] and vpc["Resource"] == "*"


@pytest.mark.parametrize("spec", [None, "spec"])
def test_every_action_is_a_real_api_operation(spec):
    policies = iam_policies(run_spec() if spec else None)
    session = botocore.session.get_session()
    service_of = {
        "sagemaker": "sagemaker",
        "logs": "logs",
        "ecr": "ecr",
        "cloudwatch": "cloudwatch",
    }
    s3_actions = {
        "s3:GetObject",
        "s3:PutObject",
        "s3:ListBucket",
        "s3:DeleteObject",
        "s3:GetBucketLocation",
    }  # IAM names, not API names
    for doc in (policies["caller"], policies["job_role"]):
        for stmt in doc["Statement"]:
            for action in stmt["Action"]:
                prefix, op = action.split(":")
                if prefix in service_of:
                    model = session.get_service_model(service_of[prefix])
                    # CreateReservedCapacity is an IAM-only action that CreateTrainingPlan needs
                    assert op in model.operation_names or action in BUY_ACTIONS, action
                else:
                    assert (
                        action
                        in s3_actions
                        | {"iam:PassRole", "kms:Decrypt", "kms:GenerateDataKey", "kms:CreateGrant"}
                        or prefix == "ec2"
                    ), action


def test_cli_json_is_only_json(capsys, tmp_path):
    with pytest.raises(SystemExit) as e:
        main(["iam-policy", "--output", "json"])
    out, _err = capsys.readouterr()
    assert e.value.code == 0
    data = json.loads(out)
    assert set(data) == {"caller", "job_role", "job_role_trust", "notes"}
    assert "REPLACE-ME" in data["notes"][0]
    trust = data["job_role_trust"]["Statement"][0]
    assert trust["Principal"] == {"Service": "sagemaker.amazonaws.com"}


def test_cli_derives_from_a_spec_file(capsys):
    with pytest.raises(SystemExit) as e:
        main(["iam-policy", str(TEMPLATE), "--output", "json"])
    out, _err = capsys.readouterr()
    assert e.value.code == 0
    data = json.loads(out)
    caller = _statements(data["caller"])
    # a spec's placeholder role and bucket are never granted (issue 37): only named in notes
    assert "PassTheJobRoleToSageMaker" not in caller
    assert "REPLACE-ME" not in json.dumps([data["caller"], data["job_role"]])
    assert (
        "job.role_arn is still a placeholder: nothing is granted on it until it is set"
        in data["notes"]
    )


def test_job_role_reads_init_from():
    from aws_support import spec_dict

    from blackwell_sm.spec import parse_spec

    d = spec_dict("qwen3-8b")
    d["training"] = {"init_from": "s3://bsm-weights/hf/Qwen3-8B"}
    role = _statements(iam_policies(parse_spec(d))["job_role"])
    assert (
        "arn:aws:s3:::bsm-weights/hf/Qwen3-8B/*" in role["ReadCodeDataAndCheckpoints"]["Resource"]
    )
    listed = [s for sid, s in role.items() if sid.startswith("ListInputsAndCheckpoints")]
    assert any(
        s["Resource"] == "arn:aws:s3:::bsm-weights"
        and "hf/Qwen3-8B/*" in s["Condition"]["StringLike"]["s3:prefix"]
        for s in listed
    )
