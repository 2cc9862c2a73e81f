"""Every field of a job's identity is varied (issue 27): the hash in the job's name
(`job/names.py` `job_identity`) changes with each leaf of the spec, each field of the plan's
configuration, the plan's instances and each fallback preference's instances and configuration.
The fields that do not enter it are listed in NOT_IDENTITY with the reason, and each is checked
to leave the hash alone: a field added to the spec or the plan is in the identity unless it is
listed here."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from aws_support import ACCOUNT, REGION, spec_dict

from blackwell_sm.job.names import canonical_json, job_identity, sha256_hex, spec_hash
from blackwell_sm.planner.plan import PlanConfig
from blackwell_sm.planner.preferences import plan_preferences
from blackwell_sm.spec import parse_spec
from blackwell_sm.spec.trackers import TRACKER_FIELDS

B200, B300, P5EN = "ml.p6-b200.48xlarge", "ml.p6-b300.48xlarge", "ml.p5en.48xlarge"
PLAN_ARN = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:training-plan/b200-week"

NOT_IDENTITY = {
    ("compute", "price_per_hour"): "steers the planner only; its choice is hashed with the plan",
    ("compute", "deadline_hours"): "steers the planner only; its choice is hashed with the plan",
    ("compute", "instance_type"): "the plan's resolved type is hashed instead (varied below)",
    ("compute", "instance_count"): "the plan's resolved count is hashed instead (varied below)",
    ("training", "data", "accept_changed_data"): "an instruction to the resume, not a new run",
    **{
        ("training", key): "where the run reports, not what it trains (spec/trackers.py)"
        for key in TRACKER_FIELDS
    },
}


def _leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    """Every leaf path of JSON data (an empty mapping or list is a leaf too)."""
    if isinstance(obj, dict) and obj:
        return [p for k, v in obj.items() for p in _leaves(v, (*path, k))]
    if isinstance(obj, list) and obj:
        return [p for i, v in enumerate(obj) for p in _leaves(v, (*path, i))]
    return [path]


def _other(value: Any) -> Any:
    """A different value of the same kind (None becomes a string)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 1
    if isinstance(value, float):
        return value * 2 + 1
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, list):
        return [*value, "x"]
    if isinstance(value, dict):
        return {**value, "x": "1"}
    return "x"


def _get(data: Any, path: tuple) -> Any:
    for key in path:
        data = data[key]
    return data


def _set(data: Any, path: tuple, value: Any) -> Any:
    data = copy.deepcopy(data)
    node = data
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return data


def _digest(identity: dict) -> str:
    return sha256_hex(canonical_json(identity))


@pytest.fixture(scope="module")
def base():
    """A spec with most sections set: fallback preferences, a training plan, tags, env."""
    d = spec_dict("llama-3.1-8b")
    d["training"] = {"total_tokens": 2_000_000_000, "seed": 3}
    d["compute"] = {
        "instance_preferences": [
            {"instance_type": B200, "instance_count": 1, "training_plan": PLAN_ARN},
            {"instance_type": B300, "instance_count": 1},
        ],
    }
    spec = parse_spec(d)
    plans = plan_preferences(spec)
    return spec.model_dump(mode="json"), plans.primary, plans.plans[1:]


def test_spec_hash_is_the_identity_of_the_spec_as_data(base):
    data, plan, others = base
    spec = parse_spec(data)
    assert spec_hash(spec, plan, others) == _digest(job_identity(data, plan, others))[:12]


def test_every_leaf_of_the_spec_is_in_the_identity(base):
    data, plan, others = base
    before = _digest(job_identity(data, plan, others))
    leaves = _leaves(data)
    assert len(leaves) > 60  # the whole dump, defaults included: nothing skipped by accident
    missed, moved = [], []
    for path in leaves:
        after = _digest(job_identity(_set(data, path, _other(_get(data, path))), plan, others))
        if path in NOT_IDENTITY:
            if after != before:
                moved.append(path)
        elif after == before:
            missed.append(".".join(map(str, path)))
    assert not missed, f"spec fields outside the job's identity: {missed}"
    assert not moved, f"listed as outside the identity but in it: {moved}"
    assert set(NOT_IDENTITY) <= set(leaves), "a field of NOT_IDENTITY is no longer in the spec"


def _varied_plans(plan: Any) -> list[tuple[str, Any]]:
    """The plan with each identity field changed in turn: its instances, each config field and
    the schema version."""
    instance = plan.instance
    out = [
        ("instance.type", {"instance": instance.model_copy(update={"type": P5EN})}),
        ("instance.count", {"instance": instance.model_copy(update={"count": instance.count + 1})}),
        ("schema_version", {"schema_version": plan.schema_version + 1}),
    ]
    for name in PlanConfig.model_fields:
        value = getattr(plan.config, name)
        config = plan.config.model_copy(update={name: _other(value)})
        out.append((f"config.{name}", {"config": config}))
    return [(name, plan.model_copy(update=update)) for name, update in out]


def test_every_field_of_the_plan_and_of_each_fallback_plan_is_in_the_identity(base):
    data, plan, others = base
    assert others, "the spec has a fallback preference"
    before = _digest(job_identity(data, plan, others))
    missed = []
    for name, varied in _varied_plans(plan):
        if name == "schema_version" or _digest(job_identity(data, varied, others)) != before:
            continue
        missed.append(f"plan.{name}")
    for i, other in enumerate(others):
        for name, varied in _varied_plans(other):
            if name == "schema_version":
                continue  # one schema for the plans of one job: the primary's is hashed
            changed = [*others[:i], varied, *others[i + 1 :]]
            if _digest(job_identity(data, plan, changed)) == before:
                missed.append(f"preference {i + 1}: plan.{name}")
    assert not missed, f"plan fields outside the job's identity: {missed}"
    bumped = dict(_varied_plans(plan))["schema_version"]
    assert _digest(job_identity(data, bumped, others)) != before
