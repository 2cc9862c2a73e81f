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
from fnmatch import fnmatchcase
from pathlib import Path

import pytest
import yaml
from aws_support import (
    ACCOUNT,
    BUCKET,
    PLAN_ARN,
    PLAN_NAME,
    REGION,
    not_found_error,
    offering,
    plan_response,
    put_log_lines,
    spec_dict,
    stub_plan_commands,
    summary_json,
    tar_gz,
    train_records,
)
from botocore.stub import ANY, Stubber
from cli_support import run

from blackwell_sm.aws.logs import LOG_GROUP
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.job.iam import COMMAND_CALLS, Call, caller_resources, iam_policies
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


def entries(command: str, service: str, op: str, params: dict, spec) -> list[Call]:
    """The entries of the command's row a call is: the same operation, on a resource the
    entry's kind grants (GetObject on the code bundle is not GetObject on a job's output)."""
    granted = caller_resources(spec)
    out = []
    for call in COMMAND_CALLS[command]:
        if call.operation != f"{service}:{op}":
            continue
        pats = granted[call.resource]
        pats = [pats] if isinstance(pats, str) else pats
        if any(fnmatchcase(arn, p) for arn in _arns(service, op, params) for p in pats):
            out.append(call)
    return out


def check(command: str, calls: list, policy: dict, spec=None) -> list[tuple[str, str]]:
    """Assert each call is an entry of the command's row and allowed; returns (action,
    resource) pairs checked."""
    from moto.iam.access_control import IAMPolicy, PermissionResult

    evaluator = IAMPolicy(json.dumps(policy))
    checked = []
    assert calls, f"{command} made no call"
    for service, op, params in calls:
        found = entries(command, service, op, params, spec)
        assert found, (
            f"`{command}` calls {service}:{op} on {_arns(service, op, params)}, "
            "which its row of COMMAND_CALLS lacks"
        )
        call = found[0]
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


def exercised(command: str, calls: list, spec) -> set[Call]:
    """The entries of the command's row that some call really made."""
    return {c for service, op, params in calls for c in entries(command, service, op, params, spec)}


def test_every_call_of_every_command_is_allowed_by_the_generated_policy(aws, tmp_path):
    """Every command's calls are in its row and allowed; and every entry of every row is
    exercised by a call that really happens (a row entry nothing calls could hide a missing
    one: `bsm stop` on a job that had already ended never called StopTrainingJob)."""
    # a run --resume can continue; starting weights on S3 with a tokenizer, which submit's data
    # check reads (aws/data_check.py) beside the train channel's manifest
    aws.s3.put_object(Bucket=BUCKET, Key="hf/tiny/tokenizer.json", Body=b"{}")
    rec = Recorder(aws)
    init = {"total_steps": 100, "init_from": f"s3://{BUCKET}/hf/tiny/"}
    spec = {**spec_dict(), "training": init}
    parsed = parse_spec(spec)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    policy = iam_policies(parsed)["caller"]
    made: dict[str, list] = {}

    def checked(command: str, calls: list) -> list:
        made.setdefault(command, []).extend(calls)
        return check(command, calls, policy, parsed)

    covered: dict[str, list] = {}
    code, out, err = run("submit", str(path), "--output", "json")
    assert code == 0, err
    name = json.loads(out)["job_name"]
    covered["submit"] = checked("submit", rec.take())

    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    put_log_lines(aws, f"{name}/algo-1-1", ["hello"], at=datetime.fromtimestamp(1_700_000_000, UTC))
    described = aws.sagemaker.describe_training_job(TrainingJobName=name)
    _put_marker(aws, described, step=2)  # the run's checkpoint: status and --resume read it
    rec.take()
    for command, args in (("status", [name]), ("logs", [name]), ("list", [])):
        code, _out, err = run(command, *args)
        assert code == 0, (command, err)
        covered[command] = checked(command, rec.take())
    # reattaching, following the logs and waiting (moto ends every job at once)
    code, _out, err = run("submit", str(path), "--wait", "--logs")
    assert code == 0, err
    checked("submit", rec.take())
    # `bsm list` reads no tags (the name carries the spec hash): another team's job costs no call
    aws.sagemaker.create_training_job(
        **{**_other_team_job(aws, name), "TrainingJobName": "team-b-job"}
    )
    rec.take()
    assert run("list")[0] == 0
    calls = rec.take()
    assert {op for _s, op, _p in calls} == {"ListTrainingJobs"}
    assert calls[0][2]["NameContains"] == "bsm-"

    # moto has no StopTrainingJob: a Stubber answers a job still running, the recorder sees
    # the calls, and the stop must really be sent
    running = {**described, "TrainingJobStatus": "InProgress", "SecondaryStatus": "Training"}
    with Stubber(aws.sagemaker) as st:
        st.add_response("describe_training_job", running)
        st.add_response("stop_training_job", {}, {"TrainingJobName": name})
        st.add_response("describe_training_job", {**running, "TrainingJobStatus": "Stopping"})
        rec.take()
        assert run("stop", name)[0] == 0
        st.assert_no_pending_responses()
    covered["stop"] = checked("stop", rec.take())

    _report_and_calibrate(aws, rec, name, described, tmp_path, checked)
    _resume_a_run(aws, rec, path, name, checked)
    rec.take()
    code, _out, err = run("status", name)  # a run of two jobs now: its newest checkpoint too
    assert code == 0 and "checkpoints/" in _out, err
    checked("status", rec.take())
    _a_bad_upload_is_removed(aws, rec, path, checked)
    _plans(aws, rec, checked, covered, path)
    _a_dropped_plan_arn_stops_the_job(aws, rec, tmp_path, checked)

    auto = spec_dict(training_plan="auto")
    path.write_text(yaml.safe_dump(auto))
    from blackwell_sm.aws.submit import prepare

    now = datetime.now(UTC) + timedelta(hours=1)
    base = prepare(auto)[2].base_job_name
    with Stubber(aws.plans) as st:
        st.add_client_error(
            "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
        )
        st.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": [offering(OFFER, start=now, hours=48, fee="100.00")]},
        )
        st.add_response(
            "create_training_plan",
            {"TrainingPlanArn": PLAN_ARN.replace(PLAN_NAME, base)},
            {"TrainingPlanName": base, "TrainingPlanOfferingId": OFFER, "Tags": ANY},
        )
        st.add_response(
            "describe_training_plan", plan_response(name=base, status="Scheduled", start=now)
        )
        rec.take()
        code, _out, err = run("submit", str(path), "--yes")
        assert code == 0, err
    calls = rec.take()
    assert any(op == "CreateTrainingPlan" and p.get("Tags") for _s, op, p in calls)
    covered["submit auto"] = checked("submit", calls)
    # tagging the reserved plan is allowed (issue 12: AddTags on training-plan/* was missing)
    assert ("sagemaker:AddTags", PLAN_ARN.replace(PLAN_NAME, base)) in covered["submit auto"]
    # status of a job on a plan reads the plan's end (moto has no plans: a Stubber answers)
    on_plan = aws.sagemaker.describe_training_job(TrainingJobName=base)
    assert on_plan["ResourceConfig"].get("TrainingPlanArn"), "moto dropped the plan"
    with Stubber(aws.sagemaker) as st:
        st.add_response("describe_training_job", on_plan)  # the status
        st.add_client_error("describe_training_job", **not_found_error(base + "-r2"))
        st.add_response("describe_training_plan", plan_response(name=base, start=now))
        rec.take()
        code, _out, err = run("status", base)
        assert code == 0, err
        st.assert_no_pending_responses()
    assert "training plan" in _out, _out
    checked("status", rec.take())
    # the SDK view's row is submit's own calls (the same aws/ functions): not run here, where
    # importing the SageMaker SDK would cost its 10-40 s
    assert set(COMMAND_CALLS) - {"to_model_trainer"} == set(made)
    assert set(COMMAND_CALLS["to_model_trainer"]) <= set(COMMAND_CALLS["submit"])
    for command, calls in made.items():
        missing = set(COMMAND_CALLS[command]) - exercised(command, calls, parsed)
        assert not missing, f"`{command}`: no call exercised {sorted(c.operation for c in missing)}"


def _put_marker(aws, described: dict, *, step: int) -> None:
    """A COMPLETE marker under the job's checkpoint prefix, as the container's sync leaves it."""
    import time

    from blackwell_sm.aws.s3 import split_s3_uri

    bucket, prefix = split_s3_uri(described["CheckpointConfig"]["S3Uri"] + "/")
    marker = {"step": step, "world_size": 8, "time": time.time() + 60}
    aws.s3.put_object(
        Bucket=bucket, Key=f"{prefix}step-{step:08d}/COMPLETE", Body=json.dumps(marker).encode()
    )


def _report_and_calibrate(aws, rec, name: str, described: dict, tmp: Path, checked) -> None:
    """`bsm report JOB` and `bsm calibrate JOB`: the plan from the code bundle and the figures
    from output.tar.gz; then, without output.tar.gz, from the job's step lines in its logs."""
    import time

    from blackwell_sm.aws.s3 import split_s3_uri
    from blackwell_sm.metrics import format_step_line

    records = train_records(range(1, 6))
    metrics = "".join(json.dumps(r) + "\n" for r in records).encode()
    output = tar_gz({"metrics.jsonl": metrics, "summary.json": summary_json(1234.5, 3.25).encode()})
    bucket, key = split_s3_uri(described["OutputDataConfig"]["S3OutputPath"].rstrip("/"))
    output_key = f"{key}/{name}/output/output.tar.gz"
    aws.s3.put_object(Bucket=bucket, Key=output_key, Body=output)
    now = int(time.time() * 1000)
    steps = [
        format_step_line(
            i,
            loss=2.0,
            lr=1e-4,
            grad_norm=1.0,
            tok_s_gpu=1000.0 + i,
            mfu=0.4,
            step_time_s=1.0,
            mem_alloc_gib=1.0,
            mem_reserved_gib=2.0,
        )
        for i in range(1, 6)
    ]
    aws.logs.put_log_events(
        logGroupName=LOG_GROUP,
        logStreamName=f"{name}/algo-1-1",
        logEvents=[{"timestamp": now + i, "message": m} for i, m in enumerate(steps)],
    )
    for with_output in (True, False):
        if not with_output:
            aws.s3.delete_object(Bucket=bucket, Key=output_key)
        rec.take()
        code, _out, err = run("report", name, "--out", str(tmp / f"r{with_output}.html"))
        assert code == 0, err
        checked("report", rec.take())
        code, _out, err = run("calibrate", name, "--out", str(tmp / f"p{with_output}.yaml"))
        assert code == 0, err
        checked("calibrate", rec.take())


def _resume_a_run(aws, rec, path: Path, name: str, checked) -> None:
    """`submit --resume` after the job ran out of time with a newer checkpoint: the run's
    checkpoint markers are listed and read, and its next job submitted."""
    from moto.sagemaker.models import sagemaker_backends

    job = sagemaker_backends[ACCOUNT][REGION].training_jobs[name]
    job.training_job_status, job.secondary_status = "Stopped", "MaxRuntimeExceeded"
    rec.take()
    code, _out, err = run("submit", str(path), "--resume", "--yes")
    assert code == 0, err
    calls = rec.take()
    assert {"ListObjectsV2", "GetObject", "CreateTrainingJob"} <= {op for _s, op, _p in calls}, err
    checked("submit", calls)


def _a_bad_upload_is_removed(aws, rec, path: Path, checked) -> None:
    """An upload whose size or hash S3 does not confirm is deleted, and no job is created."""
    from botocore.stub import Stubber as S3Stub

    with S3Stub(aws.s3) as st:
        # submit's data check first (aws/data_check.py): init_from's files, the train manifest
        st.add_response("list_objects_v2", {"KeyCount": 0})
        st.add_client_error("get_object", service_error_code="NoSuchKey", http_status_code=404)
        st.add_response("get_bucket_location", {"LocationConstraint": REGION})
        st.add_client_error("head_object", service_error_code="404", http_status_code=404)
        st.add_response("put_object", {})
        st.add_response("head_object", {"ContentLength": 1, "Metadata": {}})
        st.add_response("delete_object", {})
        rec.take()
        code, _out, err = run("submit", str(path), "--new", "--output", "json")
        st.assert_no_pending_responses()
    assert code == 4 and "bundle_verify_failed" in _out, err
    checked("submit", rec.take())


def _a_dropped_plan_arn_stops_the_job(aws, rec, tmp: Path, checked) -> None:
    """A job SageMaker created without the training plan asked for is stopped at once."""
    from aws_support import describe_response, not_found_error

    from blackwell_sm.aws.submit import prepare

    on_plan = spec_dict(training_plan=PLAN_ARN)
    path = tmp / "on-plan.yaml"
    path.write_text(yaml.safe_dump(on_plan))
    _rs, _plan, jr = prepare(on_plan)
    kept = describe_response(jr.request)
    del kept["ResourceConfig"]["TrainingPlanArn"]
    with Stubber(aws.plans) as plans, Stubber(aws.sagemaker) as sm:
        plans.add_response(
            "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
        )
        sm.add_client_error("describe_training_job", **not_found_error(jr.job_name))
        sm.add_response("list_training_jobs", {"TrainingJobSummaries": []})  # none live
        sm.add_response("create_training_job", {"TrainingJobArn": kept["TrainingJobArn"]})
        sm.add_response("describe_training_job", kept, {"TrainingJobName": jr.job_name})
        sm.add_response("stop_training_job", {}, {"TrainingJobName": jr.job_name})
        rec.take()
        code, _out, err = run("submit", str(path))
        sm.assert_no_pending_responses()
    assert code == 4 and "was stopped" in err, err
    checked("submit", rec.take())


def _extension_stubs(st, history: list, offer_id: str) -> None:
    """`plans extend --days 1`: the plan, again under the lock, its history, its offerings."""
    st.add_response("describe_training_plan", plan_response())
    st.add_response("describe_training_plan", plan_response())
    st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": history})
    st.add_response(
        "search_training_plan_offerings",
        {
            "TrainingPlanOfferings": [],
            "TrainingPlanExtensionOfferings": [
                {
                    "TrainingPlanExtensionOfferingId": offer_id,
                    "DurationHours": 24,
                    "UpfrontFee": "10.00",
                    "CurrencyCode": "USD",
                }
            ],
        },
    )


def _plans(aws, rec, checked, covered, spec_path) -> None:
    """The training-plan commands (moto has none: a Stubber answers)."""
    now = datetime.now(UTC) + timedelta(hours=1)
    with Stubber(aws.plans) as st:
        stub_plan_commands(st, OFFER, start=now)
        # extend --days: the plan, again under the lock, its history, offerings, the purchase,
        # and the history once more (another machine's extension is pointed out)
        st.add_response("describe_training_plan", plan_response())
        st.add_response("describe_training_plan", plan_response())
        st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": []})
        st.add_response(
            "search_training_plan_offerings",
            {
                "TrainingPlanOfferings": [],
                "TrainingPlanExtensionOfferings": [
                    {
                        "TrainingPlanExtensionOfferingId": "ext-1",
                        "DurationHours": 24,
                        "UpfrontFee": "10.00",
                        "CurrencyCode": "USD",
                    }
                ],
            },
        )
        st.add_response("extend_training_plan", {"TrainingPlanExtensions": []})
        st.add_response("describe_training_plan_extension_history", {"TrainingPlanExtensions": []})
        for command, args in (
            ("plans search", ["--instance-type", "ml.p6-b200.48xlarge", "--hours", "24"]),
            (
                "plans reserve",
                [
                    OFFER,
                    "--name",
                    PLAN_NAME,
                    "--instance-type",
                    "ml.p6-b200.48xlarge",
                    "--hours",
                    "24",
                    "--yes",
                ],
            ),
            ("plans list", []),
            ("plans describe", [PLAN_NAME]),
            ("plans extend", [PLAN_NAME, "--days", "1", "--yes", "--spec", str(spec_path)]),
        ):
            rec.take()
            code, _out, err = run(*command.split(), *args)
            assert code == 0, (command, err)
            covered[command] = checked(command, rec.take())
        st.assert_no_pending_responses()
    # the purchase claim every machine shares: the same command again finds the claim bought
    # (GetObject, nothing bought); a claim whose buyer declines is deleted (DeleteObject)
    old = {"TrainingPlanExtensionOfferingId": "ext-1", "ExtendedAt": datetime.now(UTC)}
    with Stubber(aws.plans) as st:
        _extension_stubs(st, [], "ext-1")
        _extension_stubs(st, [old], "ext-2")
        rec.take()
        code, out, err = run(
            "plans", "extend", PLAN_NAME, "--days", "1", "--yes", "--spec", str(spec_path)
        )
        assert code == 0 and "nothing bought" in out, err
        again = ["--again-after", "ext-1", "--spec", str(spec_path)]
        code, _out, err = run("plans", "extend", PLAN_NAME, "--days", "1", *again)
        assert code == 5 and "Refusing without consent" in err, err
        st.assert_no_pending_responses()
    calls = rec.take()
    assert [op for _s, op, _p in calls if _s == "s3"] == [
        "PutObject",
        "GetObject",
        "PutObject",
        "DeleteObject",
    ]
    checked("plans extend", calls)


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
