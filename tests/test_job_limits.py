"""The limits and image table stay true to their sources: botocore's model and the SDK's table."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from blackwell_sm.job.images import REGISTRIES, REPOSITORY, default_image_uri
from blackwell_sm.job.limits import MODEL_LIMITS
from blackwell_sm.job.validate import shape_at

# documented path -> (botocore member path, how to reach the constrained shape)
_WHERE = {
    "TrainingJobName": ("TrainingJobName", lambda s: s),
    "HyperParameters": ("HyperParameters", lambda s: s),
    "HyperParameters.<key>": ("HyperParameters", lambda s: s.key),
    "HyperParameters.<value>": ("HyperParameters", lambda s: s.value),
    "Tags": ("Tags", lambda s: s),
    "Tags[].Key": ("Tags", lambda s: s.member.members["Key"]),
    "Tags[].Value": ("Tags", lambda s: s.member.members["Value"]),
    "InputDataConfig": ("InputDataConfig", lambda s: s),
    "InputDataConfig[].ChannelName": (
        "InputDataConfig",
        lambda s: s.member.members["ChannelName"],
    ),
    "Environment": ("Environment", lambda s: s),
    "Environment.<value>": ("Environment", lambda s: s.value),
    "AlgorithmSpecification.MetricDefinitions": (
        "AlgorithmSpecification.MetricDefinitions",
        lambda s: s,
    ),
}


@pytest.mark.parametrize("limit", MODEL_LIMITS, ids=[f"{x.path}:{x.rule}" for x in MODEL_LIMITS])
def test_documented_limits_match_botocores_model(limit):
    member, reach = _WHERE[limit.path]
    md = reach(shape_at(member)).metadata
    assert (md["pattern"] if limit.rule == "pattern" else md["max"]) == limit.value


def test_image_registries_match_the_installed_sdk_table():
    found = importlib.util.find_spec("sagemaker")
    if found is None or not found.submodule_search_locations:
        pytest.skip("the SageMaker SDK (extra 'sdk') is not installed")
    table = Path(found.submodule_search_locations[0]) / "core/image_uri_config/pytorch.json"
    training = json.loads(table.read_text())["training"]["versions"]["2.8.0"]
    assert training["repository"] == REPOSITORY
    assert training["registries"] == REGISTRIES


def test_image_uris_per_partition():
    assert default_image_uri("us-west-2").startswith(
        "763104351884.dkr.ecr.us-west-2.amazonaws.com/"
    )
    assert ".amazonaws.com.cn/" in default_image_uri("cn-north-1")
    assert default_image_uri("me-south-1").startswith("217643126080.")
