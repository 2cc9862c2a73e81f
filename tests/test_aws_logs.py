"""Logs and the job handle: CloudWatch streams per instance (moto), follow that ends with the
job or at a deadline (never hangs), metrics from FinalMetricDataList or the step lines."""

from __future__ import annotations

import pytest
from aws_support import describe_response, put_log_lines, spec_dict
from botocore.stub import Stubber
from records_support import step_figures

from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.aws.jobs import list_jobs
from blackwell_sm.aws.logs import LOG_GROUP, POLL_MAX_S, host_of, iter_logs
from blackwell_sm.aws.submit import prepare, submit
from blackwell_sm.errors import AwsError
from blackwell_sm.metrics import format_step_line


@pytest.fixture
def aws(aws):
    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    return aws


class FakeClock:
    """Time that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, s: float) -> None:
        self.sleeps.append(s)
        self.now += s


def test_host_of_stream():
    assert host_of("job-abc/algo-2-1700000000") == "algo-2"


def test_follow_with_no_events_stops_at_the_deadline_with_backoff(aws):
    _rs, _plan, jr = prepare(spec_dict())
    running = describe_response(jr.request, TrainingJobStatus="InProgress")
    clock = FakeClock()
    notes: list[str] = []
    with Stubber(aws.sagemaker) as sm:
        for _ in range(40):
            sm.add_response("describe_training_job", running)
        events = list(
            iter_logs(
                aws.sagemaker,
                aws.logs,
                jr.job_name,
                follow=True,
                timeout_s=300,
                notify=notes.append,
                sleep=clock.sleep,
                clock=clock,
            )
        )
    assert events == []
    assert clock.now <= 300 and max(clock.sleeps) == POLL_MAX_S
    assert clock.sleeps[:4] == [4.0, 8.0, 16.0, 30.0]
    assert "no log stream yet" in notes[0]
    assert "stopped following" in notes[-1] and "--follow" in notes[-1]


def test_follow_reads_new_events_then_drains_and_stops_when_the_job_ends(aws):
    _rs, _plan, jr = prepare(spec_dict())
    running = describe_response(jr.request, TrainingJobStatus="InProgress")
    done = describe_response(jr.request, TrainingJobStatus="Completed", SecondaryStatus="Completed")
    stream = f"{jr.job_name}/algo-1-1700000000"
    put_log_lines(aws, stream, ["starting"])
    clock = FakeClock()

    def sleep(s: float) -> None:
        clock.sleep(s)
        if len(clock.sleeps) == 1:
            put_log_lines(aws, stream, ["[bsm-step] step=1 loss=2.5"])
        if len(clock.sleeps) == 2:
            put_log_lines(aws, stream, ["last words"])  # written just before the job ends

    with Stubber(aws.sagemaker) as sm:
        sm.add_response("describe_training_job", running)  # start
        sm.add_response("describe_training_job", running)  # after round 1
        sm.add_response("describe_training_job", running)  # after round 2
        sm.add_response("describe_training_job", done)  # after round 3: drain once more
        got = [
            e.message
            for e in iter_logs(
                aws.sagemaker, aws.logs, jr.job_name, follow=True, sleep=sleep, clock=clock
            )
        ]
        sm.assert_no_pending_responses()
    assert got == ["starting", "[bsm-step] step=1 loss=2.5", "last words"]


def test_handle_status_wait_metrics_and_list(aws):
    job = submit(spec_dict(), aws=aws)
    info = job.wait(poll_s=0)  # moto completes jobs at once
    assert info.status == "Completed" and info.terminal
    assert job.metrics() == info.final_metrics and info.final_metrics  # FinalMetricDataList
    assert [r["TrainingJobName"] for r in list_jobs(aws.sagemaker)] == [job.name]
    assert list_jobs(aws.sagemaker, name_contains="nothing-like-it") == []

    attached = TrainingJob.attach(job.name, aws=aws)
    assert attached.status().name == job.name
    with pytest.raises(AwsError, match="no training job named") as e:
        TrainingJob.attach("missing-job", aws=aws)
    assert e.value.code == "not_found"


def test_metrics_fall_back_to_the_step_lines_in_the_logs(aws):
    _rs, _plan, jr = prepare(spec_dict())
    running = describe_response(jr.request, TrainingJobStatus="InProgress")
    values = step_figures(
        grad_norm=1.5, tok_s_gpu=1000.0, step_time_s=1.2, mem_alloc_gib=10.0, mem_reserved_gib=12.0
    )
    put_log_lines(
        aws,
        f"{jr.job_name}/algo-1-1",
        [format_step_line(1, **values), format_step_line(2, **{**values, "loss": 1.75})],
    )
    with Stubber(aws.sagemaker) as sm:
        sm.add_response("describe_training_job", running)  # metrics(): no final metrics yet
        sm.add_response("describe_training_job", running)  # logs()
        m = TrainingJob(jr.job_name, aws=aws).metrics()
    assert m["train:loss"] == 1.75 and m["train:mfu"] == 0.4


def test_failed_job_wait_raises_with_the_explanation(aws):
    _rs, _plan, jr = prepare(spec_dict())
    failed = describe_response(
        jr.request,
        TrainingJobStatus="Failed",
        SecondaryStatus="Failed",
        FailureReason="CapacityError: InsufficientCapacityError: Unable to provision instances",
    )
    with Stubber(aws.sagemaker) as sm:
        sm.add_response("describe_training_job", failed)
        with pytest.raises(AwsError, match="InsufficientCapacityError") as e:
            TrainingJob(jr.job_name, aws=aws).wait(poll_s=0)
    assert e.value.code == "job_failed" and "2 days" in e.value.hint
