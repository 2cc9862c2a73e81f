"""A running job's progress from outside: the latest `[bsm-step]` line, the `[bsm-check]` line and
any `[bsm-alert]` lines in its CloudWatch logs, read as typed records (`record_from_line` of
`blackwell_sm/records`: a metric line that does not read is a note, never a 0), beside its
deadlines: MaxRuntime (DescribeTrainingJob) and the training plan's EndTime (DescribeTrainingPlan).

Only what is needed is read: the last `RECENT_EVENTS` events of each stream for the step line,
and the check and alert lines by a CloudWatch filter pattern (a handful per job).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.errors import translate
from blackwell_sm.aws.logs import LOG_GROUP, job_streams
from blackwell_sm.aws.views import RowsRepr
from blackwell_sm.errors import SpecError
from blackwell_sm.metrics import (
    ALERT_PREFIX,
    CHECK_FIELDS,
    CHECK_PREFIX,
    OVERRUN_ADVICE,
    STEP_PREFIX,
)
from blackwell_sm.records import AlertRecord, CheckRecord, Record, TrainRecord, record_from_line

RECENT_EVENTS = 200  # per stream: enough for the latest step line between other log lines


class Progress(RowsRepr, BaseModel):
    """What `bsm status` shows under the job's status, and `TrainingJob.progress()` returns (a
    notebook displays the same rows)."""

    model_config = ConfigDict(extra="forbid")

    def _title(self) -> str:
        return f"{self.job_name}: progress ({self.status})"

    def _rows(self) -> list[tuple[str, str]]:
        from blackwell_sm.aws.views import progress_rows

        return progress_rows(self)

    job_name: str
    status: str
    step: int | None = Field(None, description="The latest logged optimizer step.")
    total_steps: int | None = Field(None, description="The plan's steps (from the check line).")
    tokens: int | None = Field(None, description="step x the job's bsm_tokens_per_step.")
    as_of: datetime | None = Field(None, description="When the latest step line was logged.")
    tokens_per_s_per_gpu: float | None = Field(None, description="The latest step line's speed.")
    step_time_s: float | None = None
    mfu: float | None = None
    mem_reserved_gib: float | None = Field(None, description="The latest step line's peak.")
    check: dict[str, float] = Field(
        default_factory=dict,
        description="The [bsm-check] line's metrics (check:* names, as SageMaker records them).",
    )
    predicted_tokens_per_s_per_gpu: float | None = None
    predicted_range: tuple[float, float] | None = None
    predicted_mem_high_gib: float | None = None
    eta_s: float | None = Field(None, description="Seconds to the end at the measured rate.")
    projected_end: datetime | None = Field(None, description="as_of + eta_s.")
    max_runtime_end: datetime | None = Field(
        None, description="TrainingStartTime + MaxRuntimeInSeconds."
    )
    ends_before_max_runtime: bool | None = None
    training_plan: str | None = None
    training_plan_end: datetime | None = None
    ends_before_plan_end: bool | None = None
    alerts: list[str] = Field(default_factory=list, description="The [bsm-alert] messages.")
    notes: list[str] = Field(default_factory=list)


def _recent_events(logs: Any, stream: str) -> list[dict[str, Any]]:
    with translate(f"reading log stream {stream}", service="logs"):
        resp = logs.get_log_events(
            logGroupName=LOG_GROUP, logStreamName=stream, startFromHead=False, limit=RECENT_EVENTS
        )
    return list(resp.get("events", []))


def _matching_events(logs: Any, job: str, phrase: str) -> list[dict[str, Any]]:
    """Every event of the job whose message holds `phrase` (a quoted filter pattern)."""
    from botocore.exceptions import ClientError

    out: list[dict[str, Any]] = []
    kw: dict[str, Any] = {
        "logGroupName": LOG_GROUP,
        "logStreamNamePrefix": f"{job}/",
        "filterPattern": f'"{phrase}"',
    }
    with translate(f"searching the logs of {job}", service="logs"):
        try:
            for page in logs.get_paginator("filter_log_events").paginate(**kw):
                out.extend(page.get("events", []))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []
            raise
    return sorted(out, key=lambda e: e["timestamp"])


def _when(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000.0, tz=UTC)


def _latest(events: list[dict[str, Any]], kind: type, notes: list[str]) -> tuple[Any, int] | None:
    """(the newest event's record of `kind`, its timestamp), past lines that do not read (each
    named in `notes`)."""
    for e in sorted(events, key=lambda e: e["timestamp"], reverse=True):
        rec = _record(e, notes)
        if isinstance(rec, kind):
            return rec, e["timestamp"]
    return None


def _record(e: dict[str, Any], notes: list[str]) -> Record | None:
    try:
        return record_from_line(e["message"], time=e["timestamp"] / 1000.0)
    except SpecError as err:
        notes.append(f"a log line was not read: {' '.join(err.message.split())}")
        return None


def read_progress(
    sm: Any, logs: Any, name: str, described: dict[str, Any] | None = None
) -> Progress:
    """The job's progress from its logs and its deadlines (DescribeTrainingJob, unless the
    caller already has its answer in `described`, and DescribeTrainingPlan when it runs on a
    plan)."""
    from blackwell_sm.aws.jobs import JobInfo, describe_raw

    if described is None:
        described = describe_raw(sm, name)
    info = JobInfo.from_describe(described)
    p = Progress(job_name=name, status=info.status)

    streams = job_streams(logs, name)
    recent = [e for s in streams for e in _recent_events(logs, s) if STEP_PREFIX in e["message"]]
    latest = _latest(recent, TrainRecord, p.notes)
    if latest is not None:
        step, at = latest
        p.step, p.as_of = step.step, _when(at)
        p.tokens_per_s_per_gpu, p.step_time_s = step.tok_s_gpu, step.step_time_s
        p.mfu, p.mem_reserved_gib, p.eta_s = step.mfu, step.mem_reserved_gib, step.eta_s
        per_step = described.get("HyperParameters", {}).get("bsm_tokens_per_step")
        if per_step:
            p.tokens = p.step * int(per_step)
    elif streams:
        p.notes.append(f"no [bsm-step] line in the last {RECENT_EVENTS} events of each stream")
    else:
        p.notes.append("no log stream yet: SageMaker creates one per instance once they start")

    if streams:
        found = _latest(_matching_events(logs, name, CHECK_PREFIX), CheckRecord, p.notes)
        if found is not None:
            c, at = found
            p.check = {metric: float(getattr(c, key)) for key, metric in CHECK_FIELDS.items()}
            p.total_steps = c.total_steps
            p.predicted_tokens_per_s_per_gpu = c.pred_tok_s_gpu
            p.predicted_range = (c.pred_tok_s_gpu_low, c.pred_tok_s_gpu_high)
            p.predicted_mem_high_gib = c.pred_mem_high_gib
            if p.eta_s is None:  # no step line since the check
                p.eta_s, p.as_of = c.eta_s, _when(at)
        elif latest is not None:
            p.notes.append("no [bsm-check] line yet: the loop checks after its warm-up steps")
        for e in _matching_events(logs, name, ALERT_PREFIX):
            rec = _record(e, p.notes)
            if isinstance(rec, AlertRecord):
                p.alerts.append(rec.message)

    if p.eta_s is not None and p.as_of is not None:
        p.projected_end = p.as_of + timedelta(seconds=p.eta_s)
    if info.training_start_time and info.max_runtime_s:
        p.max_runtime_end = info.training_start_time + timedelta(seconds=info.max_runtime_s)
    plan_ref = info.selected_training_plan or info.training_plan_arn
    if plan_ref:
        p.training_plan = plan_ref
        from blackwell_sm.aws.training_plans import describe_plan

        p.training_plan_end = describe_plan(sm, plan_ref).end_time
    if p.projected_end is not None and not info.terminal:
        if p.max_runtime_end is not None:
            p.ends_before_max_runtime = p.projected_end <= p.max_runtime_end
        if p.training_plan_end is not None:  # its instances go RECLAIM_HOURS before its end
            from blackwell_sm.job.capacity_need import RECLAIM_HOURS

            reclaimed = p.training_plan_end - timedelta(hours=RECLAIM_HOURS)
            p.ends_before_plan_end = p.projected_end <= reclaimed
    if p.ends_before_max_runtime is False or p.ends_before_plan_end is False:
        p.notes.append(
            f"at the measured rate the run does not end in time: {OVERRUN_ADVICE}; "
            "the loop saves a checkpoint before the end"
        )
    return p
