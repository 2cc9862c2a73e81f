"""`bsm plans extend` buys at most once per intent (aws/extend_once.py), on a botocore Stubber
(validated against the API model): the declarative forms read the plan's end with its
extension history and buy nothing when it is reached, even before the plan's own EndTime has
moved; `--days` after a recent extension needs `--again-after` naming it; every bad flag is
exit 2 before any AWS call; `plans reserve` uses a plan of that name that exists."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from aws_support import P6, PLAN_ARN, PLAN_NAME, offering, plan_response, spec_dict
from cli_support import run

from blackwell_sm.api.plan import plan
from blackwell_sm.aws.purchases import purchases

START = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)
END = START + timedelta(hours=24)
SEARCH = {"TrainingPlanArn": PLAN_ARN}


def ext_offer(oid: str, days: int, fee: str, base: datetime = END) -> dict:
    return {
        "TrainingPlanExtensionOfferingId": oid,
        "StartDate": base,
        "EndDate": base + timedelta(days=days),
        "DurationHours": days * 24,
        "UpfrontFee": fee,
        "CurrencyCode": "USD",
    }


def offers(base: datetime = END) -> dict:
    return {
        "TrainingPlanOfferings": [],
        "TrainingPlanExtensionOfferings": [
            ext_offer("ext-1d", 1, "2800.00", base),
            ext_offer("ext-3d", 3, "8300.00", base),
            ext_offer("ext-7d", 7, "19000.00", base),
        ],
    }


def bought(oid: str, days: int, *, at: datetime, status: str = "Active") -> dict:
    return {
        "TrainingPlanExtensionOfferingId": oid,
        "ExtendedAt": at,
        "StartDate": END,
        "EndDate": END + timedelta(days=days),
        "Status": status,
        "PaymentStatus": "Paid",
        "DurationHours": days * 24,
        "UpfrontFee": "1.00",
        "CurrencyCode": "USD",
    }


def reads(st, *, history: list, hours: float = 24) -> None:
    """What extend reads before it decides: the plan twice (before and under the lock), its
    history, its offerings."""
    for _ in range(2):
        st.add_response(
            "describe_training_plan",
            plan_response(start=START, hours=hours),
            {"TrainingPlanName": PLAN_NAME},
        )
    st.add_response(
        "describe_training_plan_extension_history", {"TrainingPlanExtensions": history}, SEARCH
    )
    st.add_response("search_training_plan_offerings", offers(), SEARCH)


def test_until_buys_the_shortest_offering_that_reaches_it_and_a_retry_buys_nothing(plans):
    until = (END + timedelta(days=2)).isoformat()
    reads(plans, history=[])
    plans.add_response(
        "extend_training_plan",
        {"TrainingPlanExtensions": [bought("ext-3d", 3, at=START)]},
        {"TrainingPlanExtensionOfferingId": "ext-3d"},
    )
    plans.add_response(
        "describe_training_plan_extension_history",
        {"TrainingPlanExtensions": [bought("ext-3d", 3, at=START)]},
        SEARCH,
    )
    code, out, err = run("plans", "extend", PLAN_NAME, "--until", until, "--yes", "-o", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bought"]["offering_id"] == "ext-3d" and doc["bought"]["key"] == doc["key"]
    assert [p.key for p in purchases(doc["key"])] == [doc["key"]]  # recorded on this machine

    # the retry: the plan's own EndTime has not moved yet (the extension is Pending), but the
    # history has it, so nothing is bought
    reads(plans, history=[bought("ext-3d", 3, at=START, status="Pending")])
    code, out, err = run("plans", "extend", PLAN_NAME, "--until", until, "--yes", "-o", "json")
    assert code == 0, err
    again = json.loads(out)
    assert again["bought"] is None and again["key"] == doc["key"]
    assert "meets the target: nothing bought" in again["reason"]


def test_until_no_offering_reaches_is_exit_3_naming_the_longest(plans):
    reads(plans, history=[])
    until = (END + timedelta(days=30)).isoformat()
    code, out, _ = run("plans", "extend", PLAN_NAME, "--until", until, "--yes", "-o", "json")
    error = json.loads(out)["error"]
    assert code == 3 and "ext-7d" in error["message"] and "end at or after" in error["message"]


def tokens_for_hours(model: str, hours: float) -> dict:
    """The training section whose pessimistic run time is about `hours`, read from the planner
    (so the test follows its speed model instead of a figure that drifts with it)."""
    probe = 10**10
    run_hours = plan({**spec_dict(model), "training": {"total_tokens": probe}}).run
    tokens = int(probe * hours / run_hours.pessimistic_hours)
    assert (
        0.9 * hours
        < plan({**spec_dict(model), "training": {"total_tokens": tokens}}).run.pessimistic_hours
        < 1.1 * hours
    )
    return {"total_tokens": tokens}


def test_to_fit_buys_what_the_run_needs_and_nothing_once_it_fits(plans, tmp_path):
    spec = tmp_path / "spec.yaml"
    # ~70 h on one p6-b200 (pessimistic end): not in the 23 h left + 1 day, within + 3 days
    tokens = tokens_for_hours("llama-3.1-8b", 70)
    spec.write_text(yaml.safe_dump({**spec_dict("llama-3.1-8b"), "training": tokens}))
    reads(plans, history=[])
    plans.add_response(
        "extend_training_plan",
        {"TrainingPlanExtensions": []},
        {"TrainingPlanExtensionOfferingId": "ext-3d"},
    )
    plans.add_response(
        "describe_training_plan_extension_history",
        {"TrainingPlanExtensions": [bought("ext-3d", 3, at=START)]},
        SEARCH,
    )
    code, out, err = run("plans", "extend", PLAN_NAME, "--to-fit", str(spec), "--yes", "-o", "json")
    assert code == 0, err
    assert json.loads(out)["bought"]["offering_id"] == "ext-3d"
    reads(plans, history=[bought("ext-3d", 3, at=START)], hours=24 + 72)
    code, out, err = run("plans", "extend", PLAN_NAME, "--to-fit", str(spec), "--yes", "-o", "json")
    assert code == 0 and json.loads(out)["bought"] is None, err


def test_days_after_a_recent_extension_needs_again_after_naming_it(plans):
    recent = [bought("ext-old", 1, at=datetime.now(UTC) - timedelta(hours=3))]
    reads(plans, history=recent)
    code, out, _ = run("plans", "extend", PLAN_NAME, "--days", "1", "--yes", "-o", "json")
    error = json.loads(out)["error"]
    assert code == 5 and error["code"] == "already_extended"
    assert "--again-after ext-old" in error["hint"] and "24 h" in error["message"]

    reads(plans, history=recent)  # naming an extension the plan does not have: exit 2
    code, out, _ = run(
        "plans", "extend", PLAN_NAME, "--days", "1", "--again-after", "ext-x", "--yes", "-o", "json"
    )
    error = json.loads(out)["error"]
    assert code == 2 and error["field"] == "--again-after" and "ext-old" in error["message"]

    reads(plans, history=recent)
    plans.add_response(
        "extend_training_plan",
        {"TrainingPlanExtensions": []},
        {"TrainingPlanExtensionOfferingId": "ext-1d"},
    )
    plans.add_response(
        "describe_training_plan_extension_history", {"TrainingPlanExtensions": recent}, SEARCH
    )
    code, out, err = run(
        "plans",
        "extend",
        PLAN_NAME,
        "--days",
        "1",
        "--again-after",
        "ext-old",
        "--yes",
        "-o",
        "json",
    )
    assert code == 0 and json.loads(out)["bought"]["offering_id"] == "ext-1d", err


def test_an_old_extension_does_not_block_days_and_a_bought_offering_is_not_bought_twice(plans):
    old = [bought("ext-3d", 3, at=datetime.now(UTC) - timedelta(days=3))]
    reads(plans, history=old)  # --offering ext-3d was bought already: nothing, exit 0
    code, out, err = run(
        "plans", "extend", PLAN_NAME, "--offering", "ext-3d", "--yes", "-o", "json"
    )
    assert code == 0 and "was bought already" in json.loads(out)["reason"], err
    reads(plans, history=old)  # three days ago is outside the window: --days buys
    plans.add_response(
        "extend_training_plan",
        {"TrainingPlanExtensions": []},
        {"TrainingPlanExtensionOfferingId": "ext-1d"},
    )
    plans.add_response(
        "describe_training_plan_extension_history", {"TrainingPlanExtensions": old}, SEARCH
    )
    code, out, err = run("plans", "extend", PLAN_NAME, "--days", "1", "--yes", "-o", "json")
    assert code == 0 and json.loads(out)["bought"] is not None, err


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--until", "2027-01-01", "--days", "3"], "--until"),
        (["--to-fit", "spec.yaml", "--offering", "x"], "--to-fit"),
        (["--again-after", "ext-1"], "--again-after"),
        (["--until", "next tuesday"], "--until"),
        (["--days", "1", "--again-after", ""], "--again-after"),
        (["--to-fit", "no-such-spec.yaml"], "--to-fit"),
        (["--days", "0"], "--days"),
    ],
)
def test_bad_flags_are_exit_2_before_any_aws_call(plans, tmp_path, monkeypatch, args, field):
    monkeypatch.chdir(tmp_path)
    code, out, err = run("plans", "extend", PLAN_NAME, *args, "--yes", "-o", "json")
    assert code == 2 and "Traceback" not in err, err
    assert json.loads(out)["error"]["field"] == field
    # the Stubber has nothing queued: any AWS call would have failed the command otherwise


def test_an_unusable_state_folder_is_exit_2_and_nothing_is_bought(plans, tmp_path, monkeypatch):
    (tmp_path / "state").write_text("a file where the folder should be")
    monkeypatch.setenv("BSM_STATE_DIR", str(tmp_path / "state"))
    for _ in range(1):
        plans.add_response("describe_training_plan", plan_response(start=START, hours=24))
    code, out, _ = run("plans", "extend", PLAN_NAME, "--days", "1", "--yes", "-o", "json")
    error = json.loads(out)["error"]
    assert (
        code == 2 and error["field"] == "BSM_STATE_DIR" and "nothing was bought" in error["message"]
    )


def test_reserve_uses_a_matching_plan_of_that_name_and_refuses_another(plans):
    args = [
        "plans",
        "reserve",
        "tpo-" + "a" * 20,
        "--name",
        PLAN_NAME,
        "--instance-type",
        P6,
        "--count",
        "4",
        "--hours",
        "24",
        "--yes",
        "-o",
        "json",
    ]
    plans.add_response("describe_training_plan", plan_response(hours=24, total=4, available=4))
    code, out, err = run(*args)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bought"] is None and "matches this request" in doc["reason"]
    assert doc["key"].startswith("training_plan-")

    plans.add_response("describe_training_plan", plan_response(hours=24, total=2, available=2))
    code, out, _ = run(*args)
    error = json.loads(out)["error"]
    assert code == 2 and error["field"] == "--name" and "2 instances, not 4" in error["message"]
    assert "Nothing was bought" in error["message"]


def test_reserve_that_loses_the_race_on_another_machine_uses_the_winners_plan(plans):
    start = datetime.now(UTC) + timedelta(hours=2)
    offer = offering("tpo-" + "b" * 20, start=start, hours=24, fee="9.00")
    plans.add_client_error(
        "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
    )
    plans.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [offer]})
    plans.add_client_error(
        "create_training_plan",
        service_error_code="ResourceInUse",
        service_message=f"Training plan {PLAN_NAME} already exists",
        http_status_code=400,
    )
    plans.add_response(
        "describe_training_plan",
        plan_response(status="Scheduled", start=start, hours=24, total=1, available=1),
    )
    what = ["--name", PLAN_NAME, "--instance-type", P6, "--hours", "24", "--yes", "-o", "json"]
    code, out, err = run("plans", "reserve", offer["TrainingPlanOfferingId"], *what)
    assert code == 0, err
    doc = json.loads(out)
    assert doc["bought"] is None and "reserved by another process at the same time" in doc["reason"]


def test_a_placeholder_s3_prefix_for_the_shared_claim_is_exit_2_before_any_call(plans, tmp_path):
    """Issue 32: `--spec SPEC` names where the machines' shared purchase claim lives
    (`<job.s3_prefix>/purchase-intents`); a REPLACE-ME prefix is refused before any AWS call."""
    import yaml

    spec = spec_dict()
    spec["job"]["s3_prefix"] = "s3://REPLACE-ME-bucket/runs"
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    code, out, err = run(
        "plans", "extend", PLAN_NAME, "--days", "1", "--spec", str(path), "--yes", "-o", "json"
    )
    assert code == 2, err
    error = json.loads(out)["error"]
    assert error["field"] == "job.s3_prefix" and "nothing was bought" in error["message"]
