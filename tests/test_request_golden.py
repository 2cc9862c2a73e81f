"""The request builder after issue 25 (small builders, one plan shape) makes byte for byte what it
made before: every golden case (tests/request_golden.py; one-type specs with every optional
member, training plans by ARN, name and 'auto', a later job of a run, instance preferences with
plan names resolved or not, every template with a job section) is rebuilt and its JobRequest
compared as JSON text, members in order. Only the bundle's sha256 is normalized: the bundle
carries the package's own source."""

from __future__ import annotations

import json

import pytest
from request_golden import GOLDEN, build_case

CASES = json.loads(GOLDEN.read_text())


def test_the_golden_cases_cover_both_shapes_and_the_optional_members():
    names = {c["name"] for c in CASES}
    assert {"basic", "full", "preferences", "preferences-resolved"} <= names
    assert sum(n.startswith("template-") for n in names) >= 5
    full = json.loads(next(c for c in CASES if c["name"] == "full")["expected"]["job_request_json"])
    for member in (
        "VpcConfig",
        "RetryStrategy",
        "TensorBoardOutputConfig",
        "MlflowConfig",
        "ModelPackageConfig",
        "InfraCheckConfig",
    ):
        assert member in full["request"], member
    prefs = json.loads(
        next(c for c in CASES if c["name"] == "preferences")["expected"]["job_request_json"]
    )
    assert "InstancePreferences" in prefs["request"]["ResourceConfig"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_the_builder_makes_what_it_made_before(case):
    got = build_case(case["spec"], case["plans"], case["kwargs"])
    assert got["bundle_members"] == case["expected"]["bundle_members"]
    assert got["job_request_json"] == case["expected"]["job_request_json"]
