"""Deterministic job names and spec hashes: the same spec always maps to the same job.

`bsm-<model>-<spec hash>` lets a CI rerun find and reattach to its job; `new=True` appends a
unique suffix for a fresh job (which still shares the spec's checkpoint folder, so it resumes).
The `bsm-` prefix marks the toolkit's jobs: `bsm list` asks SageMaker for names containing it
and the IAM policy grants the job actions on `training-job/bsm-*` only.

Capacity is part of a job's identity (`capacity_identity`): the same spec on demand, on a
given training plan, or with other instance preferences is a different job, never reattached.
"""

from __future__ import annotations

import copy
import hashlib
import json
import re
import secrets
import time
from typing import Any

from blackwell_sm.spec.trackers import TRACKER_FIELDS

JOB_NAME_PREFIX = "bsm-"
# <job.s3_prefix>/purchase-intents/: the purchase claims every machine shares (aws/purchase_intents.py)
PURCHASE_INTENTS_FOLDER = "purchase-intents"
MAX_JOB_NAME = 63  # botocore model TrainingJobName max; checked again against the model
HASH_CHARS = 12


def canonical_json(obj: Any) -> bytes:
    """Sorted-key, whitespace-free JSON: the byte string all hashes here are taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def capacity_identity(compute: dict[str, Any], plan: Any) -> dict[str, Any]:
    """The capacity a job runs on, as it enters the job's identity.

    Takes the whole `compute` section (as JSON data) so that any capacity field, now or later
    (`training_plan` as written: ARN, name or 'auto'; `instance_preferences`), is part of it;
    the instance type and count are the plan's resolved ones. Price and deadline only steer the
    planner, whose choice is hashed with the plan.
    """
    capacity = {k: v for k, v in compute.items() if k not in ("price_per_hour", "deadline_hours")}
    capacity["instance_type"] = plan.instance.type
    capacity["instance_count"] = plan.instance.count
    capacity.setdefault("training_plan", None)
    return capacity


def job_identity(spec_data: dict[str, Any], plan: Any, others: Any = ()) -> dict[str, Any]:
    """What defines the run, as data: the spec (`spec.model_dump(mode="json")`), its capacity
    and the plan's configuration; `others`: the other instance preferences' plans, whose
    instances and configurations join it (a spec without preferences is as before).
    tests/test_job_identity.py varies every field of it."""
    data = copy.deepcopy(spec_data)
    compute = data.pop("compute", {})
    # Accepting changed data is an instruction to the resume, not a new run: the same job name
    # and checkpoint location, so the run it names is the one that resumes.
    data.get("training", {}).get("data", {}).pop("accept_changed_data", None)
    for key in TRACKER_FIELDS:  # where the run reports is not what it trains
        data.get("training", {}).pop(key, None)
    payload: dict[str, Any] = {
        "spec": data,
        "capacity": capacity_identity(compute, plan),
        "plan": {
            "config": plan.config.model_dump(mode="json"),
            "schema_version": plan.schema_version,
        },
    }
    if others:
        payload["preference_plans"] = [
            {
                "instance": [p.instance.type, p.instance.count],
                "config": p.config.model_dump(mode="json"),
            }
            for p in others
        ]
    return payload


def spec_hash(spec: Any, plan: Any, others: Any = ()) -> str:
    """Hash of what defines the run (`job_identity`)."""
    identity = job_identity(spec.model_dump(mode="json"), plan, others)
    return sha256_hex(canonical_json(identity))[:HASH_CHARS]


def name_stem(model_name: str) -> str:
    """A model name reduced to SageMaker's job-name alphabet ([a-zA-Z0-9-], no '--' runs)."""
    stem = re.sub(r"[^a-zA-Z0-9]+", "-", model_name).strip("-")
    return stem or "bsm"


def base_job_name(model_name: str, digest: str) -> str:
    """`bsm-<model>-<hash>`, the model part trimmed so the name fits with a --new suffix."""
    room = MAX_JOB_NAME - len(JOB_NAME_PREFIX) - len(digest) - 1 - len(_suffix_example())
    return f"{JOB_NAME_PREFIX}{name_stem(model_name)[:room].rstrip('-')}-{digest}"


def _suffix_example() -> str:
    return "-YYMMDDHHMMSSxxxx"


def unique_suffix() -> str:
    """`-YYMMDDHHMMSS` (UTC) plus 4 random hex digits: unique even for two submits a second."""
    return "-" + time.strftime("%y%m%d%H%M%S", time.gmtime()) + secrets.token_hex(2)


MAX_RUN_JOBS = 99  # `-r99` fits the room base_job_name leaves for a suffix
_RUN_SUFFIX = re.compile(r"^(?P<base>.+)-r(?P<index>[2-9]|[1-9][0-9])$")


def run_job_name(base: str, index: int) -> str:
    """`base` for the first job of a run, `base-rN` for the N-th (deterministic, so a rerun of
    `submit --resume` finds the job it made before)."""
    if not 1 <= index <= MAX_RUN_JOBS:
        raise ValueError(f"run job index {index} outside 1..{MAX_RUN_JOBS}")
    return base if index == 1 else f"{base}-r{index}"


_TOOLKIT_NAME = re.compile(
    rf"^{JOB_NAME_PREFIX}(?P<stem>[a-zA-Z0-9]+(?:-[a-zA-Z0-9]+)*)-(?P<hash>[0-9a-f]{{{HASH_CHARS}}})"
    r"(?:-r(?:[2-9]|[1-9][0-9])|-[0-9]{12}[0-9a-f]{4})?$"
)


def toolkit_name_parts(name: str) -> tuple[str, str] | None:
    """(model stem, spec hash) of a job name this toolkit makes (`base_job_name`, with a run's
    `-rN` or a `--new` suffix), or None for any other name: what `bsm list` reads, no call."""
    m = _TOOLKIT_NAME.match(name)
    return (m["stem"], m["hash"]) if m else None


def split_run_name(name: str) -> tuple[str, int]:
    """(base, index) of a run's job name (`x-r3` -> ('x', 3); `x` -> ('x', 1))."""
    m = _RUN_SUFFIX.match(name)
    return (m["base"], int(m["index"])) if m else (name, 1)
