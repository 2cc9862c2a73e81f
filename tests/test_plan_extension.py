"""Issue 15, part 2: `bsm plans extend` on a botocore Stubber (validated against the API model):
the offerings shown with fee, currency and new end; no purchase without consent (exit 5); the
ExtendTrainingPlan call with --yes; the history in `bsm plans describe`; and `submit`'s advice
for a plan too short naming the command with the best offering."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from aws_support import PLAN_ARN, PLAN_NAME, plan_response, spec_dict
from botocore.stub import Stubber
from cli_support import run

from blackwell_sm.aws.submit import submit
from blackwell_sm.aws.training_plans import fmt_time
from blackwell_sm.errors import InfeasiblePlanError

START = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
END = START + timedelta(hours=24)
END_3D = fmt_time(END + timedelta(days=3))


def ext_offer(oid: str, days: int, fee: str) -> dict:
    return {
        "TrainingPlanExtensionOfferingId": oid,
        "AvailabilityZone": "us-east-1a",
        "StartDate": END,
        "EndDate": END + timedelta(days=days),
        "DurationHours": days * 24,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
    }


OFFERS = {
    "TrainingPlanOfferings": [],
    "TrainingPlanExtensionOfferings": [
        ext_offer("ext-7d", 7, "19000.00"),
        ext_offer("ext-1d", 1, "2800.00"),
        ext_offer("ext-3d", 3, "8300.00"),
    ],
}
SEARCH = {"TrainingPlanArn": PLAN_ARN}
BOUGHT = {
    "TrainingPlanExtensionOfferingId": "ext-3d",
    "ExtendedAt": START,
    "StartDate": END,
    "EndDate": END + timedelta(days=3),
    "Status": "Pending",
    "PaymentStatus": "Pending",
    "DurationHours": 72,
    "UpfrontFee": "8300.00",
    "CurrencyCode": "USD",
}


def _describe(st) -> None:
    st.add_response(
        "describe_training_plan",
        plan_response(start=START, hours=24),
        {"TrainingPlanName": PLAN_NAME},
    )


def test_the_offerings_are_shown_with_fee_currency_and_new_end(plans, tmp_path):
    _describe(plans)
    plans.add_response("search_training_plan_offerings", OFFERS, SEARCH)
    code, out, err = run("plans", "extend", PLAN_NAME)
    assert code == 0, err
    lines = out.splitlines()
    assert len(lines) == 3 and lines[0].startswith("1. +1 days (24 h)")  # shortest first
    assert f"ends {END_3D}" in lines[1] and "8300.00 USD" in lines[1]
    assert "bsm plans extend" in err and "cannot be cancelled" in err
    # with a spec: whether the predicted run then fits
    spec = tmp_path / "spec.yaml"
    # ~60 h on one p6-b200: not in the 23 h left + 1 day, well within + 7 days
    spec.write_text(
        yaml.safe_dump({**spec_dict("llama-3.1-8b"), "training": {"total_tokens": 60 * 10**9}})
    )
    _describe(plans)
    plans.add_response("search_training_plan_offerings", OFFERS, SEARCH)
    code, out, err = run("plans", "extend", PLAN_NAME, "--spec", str(spec), "--output", "json")
    assert code == 0, err
    fits = {o["offering_id"]: o["run_fits"] for o in json.loads(out)["offerings"]}
    assert fits["ext-7d"] is True and fits["ext-1d"] is False


def _before_buying(st, history: list | None = None) -> None:
    """What `extend` reads before it buys: the plan, again under the lock, its extension
    history and the offerings."""
    _describe(st)
    st.add_response(
        "describe_training_plan",
        plan_response(start=START, hours=24),
        {"TrainingPlanName": PLAN_NAME},
    )
    st.add_response(
        "describe_training_plan_extension_history",
        {"TrainingPlanExtensions": history or []},
        {"TrainingPlanArn": PLAN_ARN},
    )
    st.add_response("search_training_plan_offerings", OFFERS, SEARCH)


def test_no_consent_no_purchase_then_yes_extends(plans):
    _before_buying(plans)
    code, out, err = run("plans", "extend", PLAN_NAME, "--days", "3", "--output", "json")
    assert code == 5
    error = json.loads(out)["error"]
    assert error["code"] == "consent_required" and "--yes" in error["hint"]
    assert "8300.00 USD" in error["message"] and "(offering ext-3d)" in error["message"]
    plans.assert_no_pending_responses()  # searched, never extended

    _before_buying(plans)
    plans.add_response(
        "extend_training_plan",
        {"TrainingPlanExtensions": [BOUGHT]},
        {"TrainingPlanExtensionOfferingId": "ext-3d"},
    )
    plans.add_response(
        "describe_training_plan_extension_history",
        {"TrainingPlanExtensions": [BOUGHT]},
        {"TrainingPlanArn": PLAN_ARN},
    )
    code, out, err = run("plans", "extend", PLAN_NAME, "--days", "3", "--yes")
    assert code == 0, err
    assert "extended bsm-test-plan-0001: " in out and "Pending" in out
    assert "key extension-" in out and "recorded: " in out


def test_an_offering_that_is_not_offered_is_exit_2(plans):
    _before_buying(plans)
    code, out, _ = run("plans", "extend", PLAN_NAME, "--days", "2", "--yes", "--output", "json")
    assert code == 2
    error = json.loads(out)["error"]
    assert error["field"] == "--days" and "days offered: 1, 3, 7" in error["message"]


def test_describe_shows_the_extension_history(plans):
    _describe(plans)
    plans.add_response(
        "describe_training_plan_extension_history",
        {"TrainingPlanExtensions": [{**BOUGHT, "Status": "Active", "PaymentStatus": "Paid"}]},
        {"TrainingPlanArn": PLAN_ARN},
    )
    code, out, err = run("plans", "describe", PLAN_NAME)
    assert code == 0, err
    assert "extensions: 1" in out and f"to {END_3D}, Active (payment Paid)" in out


def test_submit_on_a_plan_too_short_names_the_command_with_the_best_offering(aws):
    spec = spec_dict("llama-3.1-8b", training_plan=PLAN_NAME)
    # ~80 h at the pessimistic end of the plan's range (what capacity is sized from): more than
    # the 24 h plan, less than its longest extension offering (7 days).
    spec["training"] = {"total_tokens": 50_000_000_000}
    with Stubber(aws.plans) as st:
        st.add_response(
            "describe_training_plan",
            plan_response(hours=24),
            {"TrainingPlanName": PLAN_NAME},
        )
        st.add_response("search_training_plan_offerings", OFFERS, SEARCH)
        with pytest.raises(InfeasiblePlanError) as e:
            submit(spec, aws=aws)
    missing = int(str(e.value).rsplit("ExtendTrainingPlan by ", 1)[1].split(" h")[0])
    best = min(
        (o for o in OFFERS["TrainingPlanExtensionOfferings"] if o["DurationHours"] >= missing),
        key=lambda o: o["DurationHours"],
    )
    assert f"bsm plans extend {PLAN_NAME} --to-fit SPEC.yaml" in e.value.hint
    assert f"--offering {best['TrainingPlanExtensionOfferingId']}" in e.value.hint
    assert "--allow-partial" in e.value.hint
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
