"""Flexible Training Plans with botocore's Stubber (moto has none): search, reserve only with
consent, list, describe, the fit check, and `training_plan: auto` in submit."""

from __future__ import annotations

import json
import math
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from aws_support import (
    BUCKET,
    P6,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    offering,
    plan_response,
    spec_dict,
)
from botocore.stub import ANY, Stubber
from click.testing import CliRunner

from blackwell_sm.aws import training_plans as tp
from blackwell_sm.aws.plan_fit import check_plan
from blackwell_sm.aws.submit import prepare, submit
from blackwell_sm.cli import cli
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.errors import ConsentRequiredError, SpecError
from blackwell_sm.job.capacity_need import need_for_hours

NOW = datetime.now(UTC).replace(microsecond=0)
OFFER_A = "tpo-" + "a" * 20
OFFER_B = "tpo-" + "b" * 20


def test_search_sends_the_run_and_sorts_earliest_then_cheapest(aws):
    later = offering(OFFER_A, start=NOW + timedelta(days=3), hours=24, fee="900.00")
    soon_dear = offering(OFFER_B, start=NOW + timedelta(days=1), hours=24, fee="2000.00")
    with Stubber(aws.plans) as st:
        st.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": [later, soon_dear]},
            {
                "InstanceType": P6,
                "InstanceCount": 2,
                "DurationHours": 24,  # 23.2 h rounded up
                "TargetResources": ["training-job"],
                "StartTimeAfter": NOW,
            },
        )
        offers = tp.search_offerings(
            aws.plans, instance_type=P6, instance_count=2, duration_hours=23.2, start_after=NOW
        )
    assert [o.offering_id for o in offers] == [OFFER_B, OFFER_A]
    assert offers[0].upfront_fee == "2000.00" and offers[0].currency == "USD"
    assert "2000.00 USD" in offers[0].describe() and P6 in offers[0].describe()


def test_reserving_without_consent_is_impossible(aws):
    offer = tp.Offering.from_api(offering(OFFER_A, start=NOW, hours=24, fee="900.00"))
    with Stubber(aws.plans) as st:  # no CreateTrainingPlan response queued: a call would fail
        with pytest.raises(ConsentRequiredError, match=r"900\.00 USD") as e:
            tp.reserve(aws.plans, offer, "my-plan", consent=False)
        assert e.value.exit_code == 5 and "--yes" in e.value.hint
        with pytest.raises(ConsentRequiredError, match="declined"):
            tp.reserve(aws.plans, offer, "my-plan", consent=lambda text: False)
        st.assert_no_pending_responses()


def test_reserve_with_consent_creates_and_describes(aws):
    offer = tp.Offering.from_api(offering(OFFER_A, start=NOW, hours=24, fee="900.00"))
    asked: list[str] = []
    with Stubber(aws.plans) as st:
        st.add_response(
            "create_training_plan",
            {"TrainingPlanArn": PLAN_ARN},
            {"TrainingPlanName": PLAN_NAME, "TrainingPlanOfferingId": OFFER_A},
        )
        st.add_response(
            "describe_training_plan",
            plan_response(status="Scheduled"),
            {"TrainingPlanName": PLAN_NAME},
        )
        info = tp.reserve(aws.plans, offer, PLAN_NAME, consent=lambda t: asked.append(t) or True)
        st.assert_no_pending_responses()
    assert info.arn == PLAN_ARN and info.status == "Scheduled"
    assert "upfront fee 900.00 USD" in asked[0]


def test_list_pages_and_describe_by_arn(aws):
    p1 = plan_response(name="plan-one")
    p2 = plan_response(name="plan-two", status="Expired")
    summary_keys = set(aws.plans.meta.service_model.shape_for("TrainingPlanSummary").members)
    s1 = {k: v for k, v in p1.items() if k in summary_keys}
    s2 = {k: v for k, v in p2.items() if k in summary_keys}
    with Stubber(aws.plans) as st:
        st.add_response("list_training_plans", {"TrainingPlanSummaries": [s1], "NextToken": "t1"})
        st.add_response(
            "list_training_plans",
            {"TrainingPlanSummaries": [s2]},
            {"SortBy": "StartTime", "SortOrder": "Descending", "NextToken": "t1"},
        )
        st.add_response("describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME})
        plans = tp.list_plans(aws.plans)
        info = tp.describe_plan(aws.plans, PLAN_ARN)
    assert [p.name for p in plans] == ["plan-one", "plan-two"]
    assert info.instance_types == [P6] and info.available_instance_count == 4


def test_arn_of_another_account_is_refused(aws):
    other = PLAN_ARN.replace("123456789012", "210987654321")
    with Stubber(aws.plans) as st:
        st.add_response("describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME})
        with pytest.raises(SpecError, match="was not found"):
            tp.describe_plan(aws.plans, other)


def test_fit_arithmetic():
    info = tp.TrainingPlanInfo.from_api(plan_response(start=NOW, hours=24))
    ok = check_plan(info, instance_type=P6, instance_count=2, need=need_for_hours(20), now=NOW)
    assert ok.fits and ok.resume_cycles == 1 and ok.extension_hours == 0
    short = check_plan(info, instance_type=P6, instance_count=2, need=need_for_hours(100), now=NOW)
    assert short.usable and not short.fits
    assert short.usable_hours == pytest.approx(23.5)
    assert short.resume_cycles == math.ceil(100 / 23.0)  # 24 h - reclaim - start-up per plan
    assert short.extension_hours == math.ceil(100.5 - 23.5)
    busy = tp.TrainingPlanInfo.from_api(plan_response(total=4, available=1))
    fit = check_plan(busy, instance_type=P6, instance_count=2, need=need_for_hours(1))
    assert fit.usable and any("1 of 4 instances free" in w for w in fit.warnings)
    pending = tp.TrainingPlanInfo.from_api(plan_response(status="Pending"))
    assert not check_plan(
        pending, instance_type=P6, instance_count=1, need=need_for_hours(1)
    ).usable


def _auto_stubs(st: Stubber, base: str, *, reserve: bool) -> None:
    name = tp.auto_plan_name(base)
    st.add_client_error(
        "describe_training_plan",
        service_error_code="ResourceNotFound",
        service_message=f"Training plan {name} not found",
        http_status_code=400,
        expected_params={"TrainingPlanName": name},
    )
    st.add_response(
        "search_training_plan_offerings",
        {
            "TrainingPlanOfferings": [
                offering(OFFER_A, start=NOW + timedelta(hours=2), hours=2, fee="227.86"),
                offering(OFFER_B, start=NOW + timedelta(days=2), hours=2, fee="200.00"),
            ]
        },
        {
            "InstanceType": P6,
            "InstanceCount": 1,
            "DurationHours": ANY,
            "TargetResources": ["training-job"],
            "StartTimeAfter": ANY,
        },
    )
    if reserve:
        arn = f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/{name}"
        st.add_response(
            "create_training_plan",
            {"TrainingPlanArn": arn},
            {"TrainingPlanName": name, "TrainingPlanOfferingId": OFFER_A, "Tags": ANY},
        )
        booked = plan_response(
            name=name, status="Scheduled", start=NOW + timedelta(hours=2), hours=2
        )
        st.add_response("describe_training_plan", booked, {"TrainingPlanName": name})


def test_auto_without_consent_reserves_nothing_and_creates_no_job(aws):
    spec = spec_dict(training_plan="auto")
    _rs, _plan, jr = prepare(spec)
    with Stubber(aws.plans) as st:
        _auto_stubs(st, jr.base_job_name, reserve=False)
        with pytest.raises(ConsentRequiredError):
            submit(spec, aws=aws, confirm=None)
        st.assert_no_pending_responses()
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
    assert "Contents" not in aws.s3.list_objects_v2(Bucket=BUCKET)


def test_auto_with_yes_reserves_the_best_offering_and_submits_on_it(aws):
    spec = spec_dict(training_plan="auto")
    _rs, _plan, jr = prepare(spec)
    said: list[str] = []
    with Stubber(aws.plans) as st:
        _auto_stubs(st, jr.base_job_name, reserve=True)
        job = submit(spec, aws=aws, yes=True, notify=said.append)
        st.assert_no_pending_responses()
    d = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
    assert d["ResourceConfig"]["TrainingPlanArn"] == job.training_plan.arn
    assert job.training_plan.name == tp.auto_plan_name(jr.base_job_name)
    assert any("227.86 USD" in line for line in said)  # the offerings were shown


def test_cli_plans_reserve_refuses_without_tty_or_yes_and_reserves_with_yes(
    aws, monkeypatch, tmp_path
):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    search = {"TrainingPlanOfferings": [offering(OFFER_A, start=NOW, hours=24, fee="900.00")]}
    args = [
        "plans",
        "reserve",
        OFFER_A,
        "--name",
        PLAN_NAME,
        "--instance-type",
        P6,
        "--hours",
        "24",
    ]
    from blackwell_sm.errors import BsmError

    no_plan = {"service_error_code": "ResourceNotFound", "http_status_code": 400}
    with Stubber(aws.plans) as st:
        st.add_client_error("describe_training_plan", **no_plan)  # no plan of that name yet
        st.add_response("search_training_plan_offerings", search)
        r = CliRunner().invoke(cli, args)
        assert isinstance(r.exception, ConsentRequiredError) and r.exception.exit_code == 5
        st.assert_no_pending_responses()  # searched, never created

        st.add_client_error("describe_training_plan", **no_plan)
        st.add_response("search_training_plan_offerings", search)
        st.add_response("create_training_plan", {"TrainingPlanArn": PLAN_ARN})
        st.add_response("describe_training_plan", plan_response(status="Scheduled"))
        r = CliRunner().invoke(cli, [*args, "--yes", "--output", "json"])
        assert r.exception is None or not isinstance(r.exception, BsmError), r.exception
        assert json.loads(r.stdout)["arn"] == PLAN_ARN

    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(yaml.safe_dump(spec_dict("llama-3.1-8b")))
    with Stubber(aws.plans) as st:
        st.add_response("describe_training_plan", plan_response(hours=24))
        st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": []})
        r = CliRunner().invoke(
            cli, ["plans", "describe", PLAN_NAME, "--spec", str(spec_path), "-o", "json"]
        )
        doc = json.loads(r.stdout)
    assert doc["fit"]["usable"] and not doc["fit"]["fits"] and doc["fit"]["resume_cycles"] > 1
