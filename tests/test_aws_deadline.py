"""BSM_AWS_CALL_DEADLINE_S bounds a call whose service keeps answering with a throttle or a 5xx
(issue 27: a 10 s deadline took 38 s over 8 attempts). moto serves the calls, `HttpFaults`
answers them with the fault through botocore's real parsing and retry path, and the clock is a
fake one that botocore's back-off sleeps and each attempt advance: the bound is checked on that
clock, never on the wall clock.
"""

from __future__ import annotations

import pytest
from aws_support import HttpFaults

from blackwell_sm.aws import session
from blackwell_sm.aws.handle import TrainingJob
from blackwell_sm.aws.session import MAX_ATTEMPTS, AwsContext
from blackwell_sm.errors import AwsError

ATTEMPT_S = 0.3  # what one throttled attempt takes on the fake clock


@pytest.fixture
def clock(monkeypatch):
    """A fake monotonic clock for the deadline; botocore's sleeps advance it."""
    import botocore.endpoint

    now = [1000.0]
    monkeypatch.setattr(session.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(botocore.endpoint.time, "sleep", lambda s: now.__setitem__(0, now[0] + s))
    return now


@pytest.mark.parametrize(
    ("status", "code", "deadline"),
    [
        (400, "ThrottlingException", 10),
        (503, "ServiceUnavailable", 10),
        (400, "ThrottlingException", 3),
    ],
)
def test_a_service_that_keeps_refusing_is_given_up_within_the_deadline(
    aws, monkeypatch, clock, status, code, deadline
):
    monkeypatch.setenv("BSM_AWS_CALL_DEADLINE_S", str(deadline))
    ctx = AwsContext(aws.region)  # a fresh client: the deadline is read when it is made
    start = clock[0]

    def attempt(**_kw):
        clock[0] += ATTEMPT_S

    ctx.sagemaker.meta.events.register("before-send.sagemaker.DescribeTrainingJob", attempt)
    faults = HttpFaults(ctx.sagemaker, "DescribeTrainingJob", [(status, code, "slow down")] * 20)
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=ctx).status()
    spent = clock[0] - start
    assert spent <= deadline, (spent, faults.calls)  # the 38 s of issue 27 would fail here
    assert 1 <= faults.calls < MAX_ATTEMPTS
    assert e.value.code in ("throttled", "service_error"), e.value
    assert code in e.value.message and "BSM_AWS_CALL_DEADLINE_S" in e.value.message


def test_a_generous_deadline_leaves_botocores_attempts_alone(aws, monkeypatch, clock):
    monkeypatch.setenv("BSM_AWS_CALL_DEADLINE_S", "3600")
    ctx = AwsContext(aws.region)
    faults = HttpFaults(
        ctx.sagemaker, "DescribeTrainingJob", [(400, "ThrottlingException", "x")] * 20
    )
    with pytest.raises(AwsError) as e:
        TrainingJob("bsm-x-1", aws=ctx).status()
    assert faults.calls == MAX_ATTEMPTS and e.value.code == "throttled"
    assert "BSM_AWS_CALL_DEADLINE_S" not in e.value.message


def test_a_success_after_throttles_is_a_success(aws, monkeypatch, clock):
    monkeypatch.setenv("BSM_AWS_CALL_DEADLINE_S", "10")
    ctx = AwsContext(aws.region)
    HttpFaults(ctx.sagemaker, "ListTrainingJobs", [(400, "ThrottlingException", "x")] * 2)
    assert ctx.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
