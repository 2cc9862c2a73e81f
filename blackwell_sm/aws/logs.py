"""CloudWatch Logs of a training job: one stream per instance, read or followed.

SageMaker writes `/aws/sagemaker/TrainingJobs` streams named `<job>/algo-N-<epoch>`. Following
polls with backoff (2 s up to 30 s while nothing comes), checks the job's status each round,
drains once more after the job ends and then stops; a deadline bounds the wait in any case, so
a job that never logs cannot hang the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

from pydantic import BaseModel, ConfigDict

from blackwell_sm.aws.errors import translate
from blackwell_sm.aws.jobs import describe_job

LOG_GROUP = "/aws/sagemaker/TrainingJobs"
POLL_MIN_S = 2.0
POLL_MAX_S = 30.0
GRACE_S = 3600.0  # deadline slack past the job's MaxRuntimeInSeconds


class LogEvent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stream: str
    host: str  # algo-1, algo-2, ...
    timestamp_ms: int
    message: str


def host_of(stream: str) -> str:
    """`job/algo-2-1700000000` → `algo-2`."""
    tail = stream.split("/", 1)[-1]
    parts = tail.split("-")
    return "-".join(parts[:2]) if len(parts) >= 2 else tail


def job_streams(logs: Any, job: str) -> list[str]:
    """The job's log streams (none yet while it starts)."""
    from botocore.exceptions import ClientError

    names: list[str] = []
    with translate(f"listing log streams of {job}", service="logs"):
        try:
            pages = logs.get_paginator("describe_log_streams").paginate(
                logGroupName=LOG_GROUP, logStreamNamePrefix=f"{job}/"
            )
            for page in pages:
                names.extend(s["logStreamName"] for s in page.get("logStreams", []))
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") == "ResourceNotFoundException":
                return []  # the group appears with the account's first training job log
            raise
    return sorted(names)


def read_new_events(logs: Any, job: str, tokens: dict[str, str | None]) -> list[LogEvent]:
    """Every event not read yet from each stream (`tokens` keeps the position per stream)."""
    events: list[LogEvent] = []
    for stream in job_streams(logs, job):
        token = tokens.get(stream)
        with translate(f"reading log stream {stream}", service="logs"):
            while True:
                kw: dict[str, Any] = {
                    "logGroupName": LOG_GROUP,
                    "logStreamName": stream,
                    "startFromHead": True,
                }
                if token:
                    kw["nextToken"] = token
                resp = logs.get_log_events(**kw)
                batch = resp.get("events", [])
                host = host_of(stream)
                events.extend(
                    LogEvent(
                        stream=stream, host=host, timestamp_ms=e["timestamp"], message=e["message"]
                    )
                    for e in batch
                )
                new_token = resp.get("nextForwardToken")
                if not batch or new_token == token:
                    token = new_token or token
                    break
                token = new_token
        tokens[stream] = token
    events.sort(key=lambda e: (e.timestamp_ms, e.stream))
    return events


def iter_logs(
    sm: Any,
    logs: Any,
    job: str,
    *,
    follow: bool = False,
    timeout_s: float | None = None,
    notify: Callable[[str], None] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Iterator[LogEvent]:
    """Yield the job's log events; with `follow`, keep going until the job ends.

    `timeout_s` bounds following (default: the job's MaxRuntimeInSeconds plus an hour).
    """
    tokens: dict[str, str | None] = {}
    info = describe_job(sm, job)  # fails clearly for a name that does not exist
    if timeout_s is None:
        timeout_s = (info.max_runtime_s or 28 * 86400) + GRACE_S
    deadline = clock() + timeout_s
    delay = POLL_MIN_S
    ended = info.terminal
    told = False
    while True:
        events = read_new_events(logs, job, tokens)
        if not tokens and not told and notify:
            told = True
            notify(
                f"{job} has no log stream yet ({info.status} / {info.secondary_status}): "
                "SageMaker creates one per instance once the instances start"
                + ("" if follow else f"; `bsm logs {job} --follow` waits for them")
            )
        yield from events
        if not follow or ended:
            return
        info = describe_job(sm, job)
        if info.terminal:
            ended = True  # one more round: drain what was written before the end
            continue
        delay = POLL_MIN_S if events else min(delay * 2, POLL_MAX_S)
        if clock() + delay > deadline:
            if notify:
                notify(
                    f"stopped following after {timeout_s:.0f} s; {job} is still {info.status} "
                    f"({info.secondary_status}). Run `bsm logs {job} --follow` again."
                )
            return
        sleep(delay)
