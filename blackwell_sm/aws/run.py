"""Runs longer than one job: `submit --until-done` and `submit --resume`.

A run is the chain of jobs of one spec: `<base>` (the spec's job name), then `<base>-r2`,
`<base>-r3`, ... They share the checkpoint prefix `<checkpoint prefix>/<base>`, so each job's
container resumes from the newest complete checkpoint the previous one left, and runs the
remaining steps (its MaxRuntime is sized for them).

A job is followed by the next only when it ended because its time ran out and it left a newer
checkpoint:
- `Stopped` with secondary status `MaxRuntimeExceeded` (MaxRuntimeInSeconds reached), or
- `Stopped`/`Failed` because its capacity block ended (a status message or failure reason that
  names the capacity reservation or training plan ending: unverified wording, matched loosely);
and the newest `COMPLETE` marker under the prefix was written after the job was created. Any
other ending (a failure, a stop by hand, no new checkpoint) stops the chain. Capacity follows the
spec: on-demand, the named plan, the preference list, or for `training_plan: auto` a plan bought
only with consent (`submit`'s own rule); so no job starts on capacity nobody agreed to.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.errors import translate
from blackwell_sm.errors import AwsError
from blackwell_sm.job.names import MAX_RUN_JOBS as MAX_JOBS
from blackwell_sm.job.names import run_job_name, split_run_name

if TYPE_CHECKING:
    from blackwell_sm.aws.handle import TrainingJob
    from blackwell_sm.aws.jobs import JobInfo

_CAPACITY_END = re.compile(
    r"(capacity|reservation|training plan).{0,80}(end|expir|reclaim)", re.IGNORECASE
)


def resumable_end(info: JobInfo) -> str | None:
    """Why the job ended in a way the next job continues from, or None."""
    if info.status == "Stopped" and info.secondary_status == "MaxRuntimeExceeded":
        return "its MaxRuntime was reached"
    if info.status in ("Stopped", "Failed"):
        text = f"{info.failure_reason or ''} {info.status_message or ''}"
        if _CAPACITY_END.search(text):
            return "its capacity block ended"
    return None


class Checkpoint(BaseModel):
    """The newest complete checkpoint of a run, as its COMPLETE marker in S3 says."""

    model_config = ConfigDict(extra="forbid")

    step: int
    time: float = Field(description="When the marker was written (seconds since the epoch).")
    world_size: int | None = None
    uri: str


def latest_checkpoint(s3: Any, checkpoint_uri: str) -> Checkpoint | None:
    """The newest `step-XXXXXXXX/COMPLETE` under `checkpoint_uri` (the container's layout)."""
    from blackwell_sm.aws.s3 import split_s3_uri
    from blackwell_sm.job.request import CHECKPOINT_MARKER as COMPLETE_MARKER

    bucket, prefix = split_s3_uri(checkpoint_uri.rstrip("/") + "/")
    markers = []
    with translate(f"listing the checkpoints under {checkpoint_uri}"):
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            for obj in page.get("Contents", []):
                rest = obj["Key"][len(prefix) :].split("/")
                if len(rest) == 2 and rest[1] == COMPLETE_MARKER and rest[0].startswith("step-"):
                    markers.append(obj["Key"])
        if not markers:
            return None
        key = max(markers)  # step-%08d sorts by step
        body = json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())
    return Checkpoint(
        step=int(body["step"]),
        time=float(body.get("time", 0.0)),
        world_size=body.get("world_size"),
        uri=f"s3://{bucket}/{key.rsplit('/', 1)[0]}",
    )


class RunJob(BaseModel):
    """One job of a run, for `bsm status`."""

    model_config = ConfigDict(extra="forbid")

    index: int
    name: str
    status: str
    secondary_status: str | None = None
    instance: str | None = None
    billable_seconds: int | None = None
    failure_reason: str | None = None


def run_jobs(sm: Any, any_name: str) -> list[JobInfo]:
    """Every job of the run `any_name` belongs to, in order (stops at the first missing)."""
    from blackwell_sm.aws.jobs import JobInfo, find_job

    base, _ = split_run_name(any_name)
    out: list[JobInfo] = []
    for index in range(1, MAX_JOBS + 1):
        d = find_job(sm, run_job_name(base, index))
        if d is None:
            break
        out.append(JobInfo.from_describe(d))
    return out


def next_job_reason(
    info: JobInfo, checkpoint: Checkpoint | None, total_steps: int
) -> tuple[bool, str]:
    """(continue?, why) after `info` ended: the rules of the module docstring."""
    if info.status == "Completed":
        return False, f"{info.name} completed: the run is done"
    why = resumable_end(info)
    if why is None:
        reason = info.failure_reason or info.secondary_status or info.status
        return False, f"{info.name} ended {info.status} ({reason}): not continuing"
    created = info.creation_time.timestamp() if info.creation_time else 0.0
    if checkpoint is None or checkpoint.time <= created:
        return False, (
            f"{info.name} ended because {why}, but left no checkpoint newer than its start: "
            "not continuing (a next job would redo the same steps)"
        )
    if checkpoint.step >= total_steps:
        return False, f"{info.name} saved the last step ({checkpoint.step}): the run is done"
    return True, f"{info.name} ended because {why} at step {checkpoint.step} of {total_steps}"


Notify = Callable[[str], None]


def continue_run(
    submit_job: Callable[[int, int], TrainingJob],
    aws: Any,
    jr: Any,
    total_steps: int,
    *,
    wait: bool,
    say: Notify,
    wait_job: Callable[[TrainingJob], JobInfo],
    max_jobs: int = MAX_JOBS,
) -> list[TrainingJob]:
    """Submit (or find) the run's jobs in turn: one step (`wait=False`, `--resume`) or until the
    run is done (`--until-done`). `submit_job(index, done_steps)` makes job `index`.

    Raises AwsError (code `run_stopped`) when a job ended in a way the run does not continue
    from; returns the jobs it submitted or followed.
    """
    base = jr.base_job_name
    jobs = run_jobs(aws.sagemaker, base)
    made: list[TrainingJob] = []
    if not jobs:
        made.append(submit_job(1, 0))
        if not wait:
            return made
        jobs = [wait_job(made[-1])]
    while True:
        last = jobs[-1]
        if not last.terminal:
            if not wait:
                say(f"{last.name} is still {last.status}: nothing to resume yet")
                return made
            from blackwell_sm.aws.handle import TrainingJob

            last = wait_job(TrainingJob(last.name, aws=aws))
            jobs[-1] = last
        ckpt = latest_checkpoint(aws.s3, jr.checkpoint_s3_uri)
        go, why = next_job_reason(last, ckpt, total_steps)
        say(why)
        if not go:
            if last.status == "Completed" or "the run is done" in why:
                return made
            raise AwsError(
                why,
                code="run_stopped",
                hint=f"`bsm status {last.name}` shows the run; `bsm logs {last.name}` shows why",
            )
        index = split_run_name(last.name)[1] + 1
        if index > max_jobs:
            raise AwsError(
                f"the run has used {max_jobs} jobs; not starting another", code="run_stopped"
            )
        job = submit_job(index, ckpt.step if ckpt else 0)
        made.append(job)
        if not wait:
            return made
        jobs.append(wait_job(job))


def submit_run(
    spec: Any,
    *,
    until_done: bool,
    aws: Any,
    yes: bool = False,
    allow_partial: bool = False,
    training_plan: str | None = None,
    confirm: Any = None,
    notify: Notify | None = None,
    on_status: Callable[[JobInfo], None] | None = None,
    sleep: Callable[[float], None] | None = None,
    poll_s: float = 30.0,
) -> list[TrainingJob]:
    """`bsm submit SPEC --until-done` (every job until the run is done) or `--resume` (one step).

    Each job is an ordinary `submit` (same spec hash, the run's name `<base>-rN`, the steps
    left), so capacity follows `submit`'s consent rules and a rerun finds the jobs it made.
    """
    from blackwell_sm.aws.submit import identify, plan_run, submit

    say = notify or (lambda _m: None)
    planned = plan_run(spec, training_plan=training_plan)
    rs, jr = planned.spec, identify(planned)  # the run's names and prefix; no request built
    total = planned.plans.primary.run.steps

    def submit_job(index: int, done_steps: int) -> TrainingJob:
        job = submit(
            rs,
            training_plan=training_plan,
            yes=yes,
            allow_partial=allow_partial,
            aws=aws,
            confirm=confirm,
            notify=say,
            run_index=index,
            done_steps=done_steps,
        )
        say(
            f"run {jr.base_job_name}: job {index} is {job.name}"
            + (f" (resumes at step {done_steps} of {total})" if done_steps else "")
        )
        return job

    def wait_job(job: TrainingJob) -> JobInfo:
        kw: dict[str, Any] = {"poll_s": poll_s, "on_status": on_status, "raise_on_failure": False}
        if sleep is not None:
            kw["sleep"] = sleep
        return job.wait(**kw)

    return continue_run(submit_job, aws, jr, total, wait=until_done, say=say, wait_job=wait_job)


class RunSummary(BaseModel):
    """`bsm status` for a job of a run: all its jobs and the progress so far."""

    model_config = ConfigDict(extra="forbid")

    base: str
    jobs: list[RunJob]
    steps_done: int | None = Field(None, description="The newest complete checkpoint's step.")
    tokens_done: int | None = None
    billable_seconds: int = 0
    checkpoint: str | None = None


def run_summary(aws: Any, any_name: str) -> RunSummary | None:
    """The run `any_name` belongs to, or None when it is a lone job (no `-rN` sibling)."""
    from blackwell_sm.aws.jobs import find_job

    infos = run_jobs(aws.sagemaker, any_name)
    if len(infos) < 2:
        return None
    described = find_job(aws.sagemaker, infos[-1].name) or {}
    uri = described.get("CheckpointConfig", {}).get("S3Uri")
    ckpt = latest_checkpoint(aws.s3, uri) if uri else None
    per_step = described.get("HyperParameters", {}).get("bsm_tokens_per_step")
    jobs = [
        RunJob(
            index=split_run_name(i.name)[1],
            name=i.name,
            status=i.status,
            secondary_status=i.secondary_status,
            instance=f"{i.selected_instance_count or i.instance_count} x "
            f"{i.selected_instance_type or i.instance_type}",
            billable_seconds=i.billable_seconds,
            failure_reason=i.failure_reason,
        )
        for i in infos
    ]
    return RunSummary(
        base=split_run_name(any_name)[0],
        jobs=jobs,
        steps_done=ckpt.step if ckpt else None,
        tokens_done=ckpt.step * int(per_step) if ckpt and per_step else None,
        billable_seconds=sum(j.billable_seconds or 0 for j in jobs),
        checkpoint=ckpt.uri if ckpt else None,
    )
