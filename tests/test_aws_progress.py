"""`job.progress()` and `bsm status JOB` from outside: step, check and alert lines written to moto's
CloudWatch Logs through boto3, read back with the metric regexes; the deadlines from
DescribeTrainingJob (Stubber: moto completes jobs at once) and DescribeTrainingPlan (Stubber:
moto has no training plans)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from aws_support import (
    PLAN_ARN,
    PLAN_NAME,
    describe_response,
    not_found_error,
    plan_response,
    put_log_lines,
)
from aws_support import spec_dict as make_spec
from botocore.stub import Stubber
from cli_support import run
from records_support import CHECK_FIELDS, step_figures

from blackwell_sm.aws import progress as progress_mod
from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.aws.logs import LOG_GROUP
from blackwell_sm.aws.submit import prepare
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.metrics import format_alert_line, format_step_line
from blackwell_sm.records import CheckRecord, record_line

NOW = datetime.now(UTC).replace(microsecond=0)
STEP = step_figures(mfu=0.41)


@pytest.fixture
def aws(aws, monkeypatch):
    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


def put(aws, stream: str, messages: list[str], at: datetime = NOW) -> None:
    put_log_lines(aws, stream, messages, at)


def check_line(step: int, **over: float) -> str:
    """A whole `[bsm-check]` line, as the loop prints it from its check record."""
    values = CHECK_FIELDS | {"total_steps": 1000} | over
    return record_line(CheckRecord(step=step, **values))


def write_run(aws, name: str, *, last_step: int, eta: float) -> None:
    """What rank 0 on algo-1 prints: noise, step lines, the check line; algo-2 prints little."""
    lines = ["[bsm] model tiny ...", "[default0]:" + format_step_line(1, **STEP)]
    lines += [check_line(5)]
    lines += [
        format_step_line(s, eta_s=eta + 10 * (last_step - s), **STEP)
        for s in range(6, last_step + 1)
    ]
    put(aws, f"{name}/algo-1-1700000000", lines, at=NOW - timedelta(seconds=5))
    put(
        aws, f"{name}/algo-2-1700000000", ["[bsm-launch] host 2 up"], at=NOW - timedelta(seconds=60)
    )


def stub_job(sm: Stubber, request: dict, **over) -> None:
    sm.add_response("describe_training_job", describe_response(request, **over))


def running(jr, **over) -> dict:
    return dict(
        TrainingJobStatus="InProgress",
        SecondaryStatus="Training",
        TrainingStartTime=NOW - timedelta(minutes=1),
        HyperParameters=jr.request["HyperParameters"],
        **over,
    )


def test_progress_reads_the_latest_step_the_check_and_the_eta(aws):
    _rs, plans, jr = prepare(make_spec())
    plan = plans.primary
    runtime = jr.request["StoppingCondition"]["MaxRuntimeInSeconds"]
    write_run(aws, jr.job_name, last_step=40, eta=600.0)
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, **running(jr))
        p = TrainingJob(jr.job_name, aws=aws).progress()
    per_step = plan.config.global_batch_sequences * plan.config.seq_len
    assert p.step == 40 and p.tokens == 40 * per_step and p.total_steps == 1000
    assert p.tokens_per_s_per_gpu == 9000.0 and p.mfu == 0.41 and p.mem_reserved_gib == 64.0
    assert p.predicted_tokens_per_s_per_gpu == 10000.0
    assert p.predicted_range == (7000.0, 11000.0) and p.predicted_mem_high_gib == 70.0
    assert p.check["check:exposed_comm_s"] == 0.15
    assert p.eta_s == 600.0
    assert p.projected_end == p.as_of + timedelta(seconds=600)
    assert p.max_runtime_end == NOW - timedelta(minutes=1) + timedelta(seconds=runtime)
    assert p.ends_before_max_runtime is True and p.training_plan is None
    assert p.alerts == [] and p.notes == []


def test_an_eta_past_max_runtime_and_the_plans_end_says_what_to_do(aws):
    _rs, _plan, jr = prepare(make_spec())
    runtime = jr.request["StoppingCondition"]["MaxRuntimeInSeconds"]
    write_run(aws, jr.job_name, last_step=12, eta=runtime + 3600.0)
    alert = format_alert_line(
        12,
        "overrun",
        "overrun_s",
        3600.0,
        "at the measured rate the run ends 1.00 h after the job max runtime",
    )
    put(aws, f"{jr.job_name}/algo-1-1700000000", ["[default0]:" + alert])
    rc = {**jr.request["ResourceConfig"], "TrainingPlanArn": PLAN_ARN}
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, ResourceConfig=rc, **running(jr))
        sm.add_response(
            "describe_training_plan",
            plan_response(start=NOW - timedelta(hours=2), hours=3),
            {"TrainingPlanName": PLAN_NAME},
        )
        p = TrainingJob(jr.job_name, aws=aws).progress()
        sm.assert_no_pending_responses()
    assert p.step == 12 and p.ends_before_max_runtime is False
    assert p.training_plan == PLAN_ARN and p.training_plan_end == NOW + timedelta(hours=1)
    assert p.ends_before_plan_end is False
    assert p.alerts == ["at the measured rate the run ends 1.00 h after the job max runtime"]
    assert any("bsm plans extend" in n and "--until-done" in n for n in p.notes)


def test_only_recent_events_are_read_for_the_step_line(aws, monkeypatch):
    """The step line comes from the last RECENT_EVENTS events (startFromHead=False), not the
    whole stream; the check line from a filter pattern."""
    _rs, _plan, jr = prepare(make_spec())
    monkeypatch.setattr(progress_mod, "RECENT_EVENTS", 5)
    lines = [check_line(5)] + [format_step_line(s, eta_s=100.0, **STEP) for s in range(6, 30)]
    put(aws, f"{jr.job_name}/algo-1-1", lines + [f"[bsm] noise {i}" for i in range(4)])
    calls: list[dict] = []
    aws.logs.meta.events.register(
        "provide-client-params.logs.GetLogEvents", lambda params, **_: calls.append(params)
    )
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, **running(jr))
        p = TrainingJob(jr.job_name, aws=aws).progress()
    assert p.step == 29 and p.total_steps == 1000
    assert calls and all(c["startFromHead"] is False and c["limit"] == 5 for c in calls)
    put(
        aws,
        f"{jr.job_name}/algo-1-1",
        [f"[bsm] more noise {i}" for i in range(6)],
        at=NOW + timedelta(seconds=1),
    )
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, **running(jr))
        p = TrainingJob(jr.job_name, aws=aws).progress()
    assert p.step is None and "no [bsm-step] line in the last 5" in p.notes[0]
    assert p.eta_s == 9000.0  # the check's ETA stands in, as of the check line


def test_no_streams_yet(aws):
    _rs, _plan, jr = prepare(make_spec())
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, **running(jr))
        p = TrainingJob(jr.job_name, aws=aws).progress()
    assert p.step is None and "no log stream yet" in p.notes[0]
    with Stubber(aws.sagemaker) as sm:
        for _ in range(2):
            stub_job(sm, jr.request, **running(jr))
        sm.add_client_error("describe_training_job", **not_found_error(f"{jr.job_name}-r2"))
        code, out, err = run("status", jr.job_name)
        sm.assert_no_pending_responses()
    assert code == 0, err
    assert "no log stream yet" in out and "tokens/s/GPU" not in out  # only why, no empty rows


def test_bsm_status_shows_speed_eta_and_max_runtime_and_json_carries_them(aws):
    _rs, _plan, jr = prepare(make_spec())
    name = jr.job_name
    write_run(aws, name, last_step=40, eta=600.0)

    def stubbed(*args: str) -> tuple[int, str, str]:
        with Stubber(aws.sagemaker) as sm:
            stub_job(sm, jr.request, **running(jr))  # status
            stub_job(sm, jr.request, **running(jr))  # the run: this job...
            sm.add_client_error(
                "describe_training_job", **not_found_error(f"{name}-r2")
            )  # ...alone
            got = run("status", name, *args)
            sm.assert_no_pending_responses()  # one describe for the status and the progress
            return got

    code, out, err = stubbed()
    assert code == 0, err
    assert "step" in out and "40 of 1,000" in out
    assert "9,000.0 tokens/s/GPU  (predicted 10,000.0, range 7,000.0-11,000.0)" in out
    assert "eta" in out and "10 min 00 s" in out
    assert "(ends before it)" in out  # max runtime end
    assert "exposed communication 0.150 s" in out
    code, out, err = stubbed("--output", "json")
    assert code == 0, err
    prog = json.loads(out)["progress"]
    assert prog["step"] == 40 and prog["eta_s"] == 600.0 and prog["tokens_per_s_per_gpu"] == 9000.0
    assert prog["ends_before_max_runtime"] is True
    assert prog["predicted_tokens_per_s_per_gpu"] == 10000.0


def test_bsm_status_stands_when_the_logs_cannot_be_read(aws):
    """A role that may describe jobs but not read their logs: status still shows the job, and
    says why there is no progress."""
    _rs, _plan, jr = prepare(make_spec())
    name = jr.job_name
    with Stubber(aws.sagemaker) as sm, Stubber(aws.logs) as logs:
        stub_job(sm, jr.request, **running(jr))
        stub_job(sm, jr.request, **running(jr))
        sm.add_client_error("describe_training_job", **not_found_error(f"{name}-r2"))
        logs.add_client_error(
            "describe_log_streams",
            service_error_code="AccessDeniedException",
            service_message="not authorized to perform logs:DescribeLogStreams",
        )
        code, out, err = run("status", name)
    assert code == 0, err
    assert "InProgress" in out and "progress unavailable" in out


def test_a_metric_line_that_does_not_read_is_a_note_not_a_zero(aws):
    """The newest step line lost a figure (a user's print, a cut line): `bsm status` shows the
    newest step that reads, and says which line it could not read; a bad check line likewise."""
    _rs, _plan, jr = prepare(make_spec())
    write_run(aws, jr.job_name, last_step=20, eta=100.0)
    cut = format_step_line(21, **STEP).replace(" tok_s_gpu=9000", "")
    put(
        aws,
        f"{jr.job_name}/algo-1-1700000000",
        [cut, check_line(22).replace("mfu=0.4", "mfu=x")],
        at=NOW,
    )
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, **running(jr))
        p = TrainingJob(jr.job_name, aws=aws).progress()
    assert p.step == 20 and p.tokens_per_s_per_gpu == 9000.0  # not step 21 at 0 tokens/s
    assert p.total_steps == 1000 and p.check["check:mfu"] == 0.4  # the earlier check line
    assert any("tok_s_gpu" in n and "not read" in n for n in p.notes)
    assert any("mfu" in n and "not read" in n for n in p.notes)


def test_a_run_that_ends_after_the_plans_instances_are_reclaimed_does_not_end_in_time(aws):
    """Issue 32: the plan's instances go 30 minutes before its end (job/capacity_need.py), so a
    run projected to end 20 minutes before the end does not end in time."""
    _rs, _plan, jr = prepare(make_spec())
    write_run(aws, jr.job_name, last_step=40, eta=600.0)  # ends in about 10 minutes
    rc = {**jr.request["ResourceConfig"], "TrainingPlanArn": PLAN_ARN}
    with Stubber(aws.sagemaker) as sm:
        stub_job(sm, jr.request, ResourceConfig=rc, **running(jr))
        end = NOW + timedelta(minutes=30)  # 20 minutes after the run's projected end
        sm.add_response(
            "describe_training_plan",
            plan_response(start=end - timedelta(hours=3), hours=3),
            {"TrainingPlanName": PLAN_NAME},
        )
        p = TrainingJob(jr.job_name, aws=aws).progress()
    assert p.projected_end < p.training_plan_end and p.ends_before_plan_end is False
    assert any("does not end in time" in n for n in p.notes)
