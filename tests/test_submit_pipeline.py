"""Issue 32 item 4: submit is one pipeline (aws/submit.py): identity -> request and bundle,
built once -> capacity, attached (job/capacity_attach.py) -> send -> a handle.

On a training plan the request and the tar bundle were built twice, even with the ARN given;
here each is built once, and the capacity attached afterwards gives exactly the request the
builder gives with the ARNs (tests/request_golden.py keeps the builder's bytes)."""

from __future__ import annotations

import pytest
from aws_support import PLAN_ARN, PLAN_NAME, REGION, plan_response, spec_dict
from botocore.stub import Stubber

from blackwell_sm.aws import submit as pipeline
from blackwell_sm.job import request as request_module
from blackwell_sm.job.capacity_attach import attach_capacity
from blackwell_sm.job.identity import job_identity
from blackwell_sm.job.request import build_job_request
from blackwell_sm.planner.preferences import plan_set
from blackwell_sm.planner.profile import profile_for
from blackwell_sm.spec import parse_spec

OTHER_ARN = PLAN_ARN.replace(PLAN_NAME, "bsm-test-plan-0002")


def _preferences_spec() -> dict:
    d = spec_dict("tiny")
    d["compute"] = {
        "instance_preferences": [
            {
                "instance_type": "ml.p6-b200.48xlarge",
                "instance_count": 1,
                "training_plan": PLAN_NAME,
            },
            {"instance_type": "ml.p5en.48xlarge", "instance_count": 1, "training_plan": "plan-b"},
        ]
    }
    return d


@pytest.mark.parametrize(
    ("spec", "arn", "arns"),
    [
        (spec_dict("tiny", training_plan=PLAN_NAME), PLAN_ARN, None),
        (spec_dict("tiny", training_plan="auto"), PLAN_ARN, None),
        (spec_dict("tiny", training_plan=PLAN_ARN), PLAN_ARN, None),
        (_preferences_spec(), None, {0: PLAN_ARN, 1: OTHER_ARN}),
    ],
    ids=["name", "auto", "arn", "preferences"],
)
def test_capacity_attached_equals_the_request_built_with_it(spec, arn, arns):
    rs = parse_spec(spec)
    plans = plan_set(rs, profile_for(rs))
    ident = job_identity(rs, plans, region=REGION)
    built = build_job_request(rs, plans, region=REGION, identity=ident)
    attached = attach_capacity(built, rs, plans, training_plan_arn=arn, preference_arns=arns)
    direct = build_job_request(
        rs, plans, region=REGION, identity=ident, training_plan_arn=arn, preference_arns=arns
    )
    assert attached.request == direct.request
    assert attached.model_dump(exclude={"bundle", "wheelhouse"}) == direct.model_dump(
        exclude={"bundle", "wheelhouse"}
    )
    assert attached.bundle is built.bundle  # the bundle is the one built before


def test_a_job_on_a_plan_builds_its_request_and_bundle_once(aws, monkeypatch):
    counts = {"request": 0, "bundle": 0}
    real_request, real_bundle = request_module.build_job_request, request_module.build_bundle

    def count(kind, real):
        def wrapped(*a, **k):
            counts[kind] += 1
            return real(*a, **k)

        return wrapped

    monkeypatch.setattr(request_module, "build_job_request", count("request", real_request))
    monkeypatch.setattr(request_module, "build_bundle", count("bundle", real_bundle))
    for plan in (PLAN_ARN, PLAN_NAME):  # the ARN given, and a name described first
        spec = spec_dict("tiny", training_plan=plan)
        spec["training"] = {"total_steps": 700 if plan == PLAN_ARN else 800}
        with Stubber(aws.plans) as st:
            st.add_response(
                "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
            )
            job = pipeline.submit(spec, aws=aws)
            st.assert_no_pending_responses()
        assert job.created and job.job_request.training_plan_arn == PLAN_ARN
        assert counts == {"request": 1, "bundle": 1}, plan
        counts.update(request=0, bundle=0)
    d = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    assert d["ResourceConfig"]["TrainingPlanArn"] == PLAN_ARN


def test_a_request_sagemaker_would_refuse_is_refused_before_any_plan_is_reserved(aws):
    """The request is built and validated before the capacity step: 'auto' reserves nothing
    for a request that cannot be sent."""
    from blackwell_sm.errors import SpecError

    spec = spec_dict("tiny", training_plan="auto")
    spec["job"]["tags"] = {f"team-{i}": "x" for i in range(50)}  # + bsm's own: past 50 tags
    with Stubber(aws.plans) as st:  # nothing queued: any plan call would fail the test
        with pytest.raises(SpecError) as e:
            pipeline.submit(spec, aws=aws, yes=True)
        st.assert_no_pending_responses()
    assert "Tags" in str(e.value) or "tags" in str(e.value), e.value
