"""One live job per checkpoint prefix.

Every job of a spec (its first job, `--new` jobs, a run's `-rN` jobs) reads and writes its
checkpoints under one S3 prefix (`<job.checkpoint_prefix>/<base job name>`): two live jobs there
would overwrite each other's checkpoints. So `submit`, holding this machine's lock on the
prefix (`checkpoint_lock`):

* lists the spec's live jobs (InProgress or Stopping, on that CheckpointConfig.S3Uri) before
  creating one, and refuses (exit 5, code `prefix_in_use`) naming the live job;
* reads the list again after creating: if another live job on the prefix was created first (a
  second machine in the same seconds), the one just created is stopped at once and refused the
  same way. The earliest job wins (ties: the smaller name), so every process agrees which.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

from blackwell_sm.aws.errors import translate
from blackwell_sm.aws.jobs import JobInfo, find_job
from blackwell_sm.aws.purchases import intent_lock
from blackwell_sm.errors import AwsError, ConsentRequiredError
from blackwell_sm.job.names import sha256_hex

LIVE = ("InProgress", "Stopping")
Notify = Callable[[str], None]


@contextlib.contextmanager
def checkpoint_lock(checkpoint_uri: str, *, say: Notify) -> Iterator[None]:
    """This machine's lock on a checkpoint prefix (see `aws/purchases.py`)."""
    with intent_lock(f"checkpoints-{sha256_hex(checkpoint_uri.encode())[:16]}", say=say):
        yield


def live_jobs(sm: Any, base_name: str, checkpoint_uri: str) -> list[JobInfo]:
    """The spec's live jobs writing `checkpoint_uri`, earliest first (ties: by name)."""
    names: set[str] = set()
    with translate("listing the spec's training jobs"):
        for page in sm.get_paginator("list_training_jobs").paginate(NameContains=base_name):
            for s in page.get("TrainingJobSummaries", []):
                name = s["TrainingJobName"]
                mine = name == base_name or name.startswith(base_name + "-")
                if mine and s.get("TrainingJobStatus") in LIVE:
                    names.add(name)
    out = []
    for name in sorted(names):
        d = find_job(sm, name)
        if d is None or d.get("CheckpointConfig", {}).get("S3Uri") != checkpoint_uri:
            continue
        info = JobInfo.from_describe(d)
        if info.status in LIVE:
            out.append(info)
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(out, key=lambda j: (j.creation_time or far, j.name))


def _in_use(live: JobInfo, checkpoint_uri: str, prefix: str = "") -> ConsentRequiredError:
    return ConsentRequiredError(
        f"{prefix}training job {live.name} is {live.status} on the checkpoint prefix "
        f"{checkpoint_uri}: a second job there would overwrite its checkpoints, so no job "
        "was created",
        code="prefix_in_use",
        hint=f"wait for it (`bsm status {live.name}`), stop it (`bsm stop {live.name}`), or "
        "change the spec (a different spec has its own prefix)",
    )


def refuse_if_live(sm: Any, base_name: str, checkpoint_uri: str, *, own_name: str) -> None:
    """Before a create: refuse when a job of the spec is live on the prefix. A live job named
    `own_name` is not refused: it is this very request's job, made by a concurrent submit of
    the same spec since the reattach check; the create then finds it and reattaches."""
    live = [j for j in live_jobs(sm, base_name, checkpoint_uri) if j.name != own_name]
    if live:
        raise _in_use(live[0], checkpoint_uri)


def keep_first(sm: Any, name: str, base_name: str, checkpoint_uri: str, *, say: Notify) -> None:
    """After a create: if another live job on the prefix came first, stop `name` and refuse."""
    live = live_jobs(sm, base_name, checkpoint_uri)
    first = live[0] if live else None
    if first is None or first.name == name or name not in {j.name for j in live}:
        return
    try:
        with translate(f"stopping training job {name}"):
            sm.stop_training_job(TrainingJobName=name)
        done = f"it was stopped ({name})"
    except (AwsError, NotImplementedError):
        done = f"stopping it failed: stop it now with `bsm stop {name}`"
    say(f"another job started on the same checkpoint prefix first ({first.name}); {done}")
    raise _in_use(first, checkpoint_uri, prefix=f"{name} was created beside another job, {done}; ")
