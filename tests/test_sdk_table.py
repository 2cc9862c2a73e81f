"""The SDK views' table (job/sdk_table.py): every member of a full request, of either plan shape,
has a row, each row not sent as built says why, and a member nobody mapped is named in a
SdkViewWarning and sent by the hook, never dropped."""

from __future__ import annotations

import json
import warnings
from types import SimpleNamespace

import pytest
from request_golden import GOLDEN

from blackwell_sm.job.sdk import SDK_CLASSES, SdkViewWarning, _hook, _warn, trainer_args
from blackwell_sm.job.sdk_table import HOOK, ROWS, TABLE, leaves, unmapped

CASES = {c["name"]: c for c in json.loads(GOLDEN.read_text())}


def request_of(name: str) -> dict:
    return json.loads(CASES[name]["expected"]["job_request_json"])["request"]


def stand_ins() -> dict:
    """The SDK's classes as recorders (the table's wiring, without the 3 s SDK import)."""

    def cls(name):
        return lambda **kw: {"class": name, **kw}

    return {name: cls(name) for name in SDK_CLASSES}


@pytest.mark.parametrize("name", ["full", "preferences-resolved", "named-plan-resolved"])
def test_every_member_of_a_full_request_has_a_row(name):
    q = request_of(name)
    assert unmapped(q) == []
    assert {p for p, _ in leaves(q)} <= set(TABLE)


def test_a_row_that_is_not_sent_as_built_says_why():
    for row in ROWS:
        for target in (row.v3, row.v2):
            if target is None or target == HOOK:
                assert row.why, f"{row.path}: say why it is not an SDK argument"
    assert len(TABLE) == len(ROWS)  # one row per path


def test_the_v3_arguments_come_from_the_table():
    q = request_of("full")
    args = trainer_args(q, stand_ins())
    kw = args.kwargs
    assert kw["role"] == q["RoleArn"]
    assert kw["compute"] == {
        "class": "Compute",
        "instance_type": "ml.p6-b200.48xlarge",
        "instance_count": 2,
        "volume_size_in_gb": 500,
        "keep_alive_period_in_seconds": 1800,
        "training_plan_arn": q["ResourceConfig"]["TrainingPlanArn"],
    }
    assert kw["networking"]["subnets"] == ["subnet-0123456789abcdef0"]
    assert kw["networking"]["enable_network_isolation"] is True
    assert kw["output_data_config"]["kms_key_id"] == q["OutputDataConfig"]["KmsKeyId"]
    assert [c["channel_name"] for c in kw["input_data_config"]] == ["code", "eval", "train"]
    assert [t["key"] for t in kw["tags"]] == [t["Key"] for t in q["Tags"]]
    assert kw["environment"] == q["Environment"] and kw["environment"] is not q["Environment"]
    assert args.methods["with_retry_strategy"]["maximum_retry_attempts"] == 2
    assert len(args.methods["with_metric_definitions"]) == len(
        q["AlgorithmSpecification"]["MetricDefinitions"]
    )
    # what ModelTrainer has no argument for: the hook, as built
    assert set(args.hooked) == {
        "AlgorithmSpecification.ContainerEntrypoint",
        "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries",
        "TensorBoardOutputConfig",
        "MlflowConfig",
        "ModelPackageConfig",
        "InfraCheckConfig",
    }
    assert "TrainingJobName" not in args.hooked and args.unknown == []


def test_a_member_nobody_mapped_is_named_and_sent_by_the_hook():
    q = {**request_of("basic"), "SessionChainingConfig": {"EnableSessionTagChaining": True}}
    q["ResourceConfig"] = {**q["ResourceConfig"], "InstanceGroups": []}
    assert unmapped(q) == ["ResourceConfig.InstanceGroups", "SessionChainingConfig"]
    args = trainer_args(q, stand_ins())
    assert args.unknown == ["ResourceConfig.InstanceGroups", "SessionChainingConfig"]

    req = SimpleNamespace(base_job_name=q["TrainingJobName"], request=q, warnings=[])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _warn(req, args)
    texts = [str(w.message) for w in caught if issubclass(w.category, SdkViewWarning)]
    assert any("SessionChainingConfig" in t and "no mapping" in t for t in texts)
    assert any("ResourceConfig.InstanceGroups" in t and "no mapping" in t for t in texts)
    params = {"TrainingJobName": q["TrainingJobName"] + "-20261205", "ResourceConfig": {"X": 1}}
    _hook(req, args.hooked)(params)
    assert params["SessionChainingConfig"] == {"EnableSessionTagChaining": True}
    assert params["ResourceConfig"] == {"X": 1, "InstanceGroups": []}
    assert (
        params["AlgorithmSpecification"]["ContainerEntrypoint"]
        == (q["AlgorithmSpecification"]["ContainerEntrypoint"])
    )
    other = {"TrainingJobName": "someone-elses-job"}
    _hook(req, args.hooked)(other)
    assert other == {"TrainingJobName": "someone-elses-job"}  # this job only
