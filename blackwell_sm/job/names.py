"""Deterministic job names and spec hashes: the same spec always maps to the same job.

`<model>-<spec hash>` lets a CI rerun find and reattach to its job; `new=True` appends a
unique suffix for a fresh job (which still shares the spec's checkpoint folder, so it resumes).
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import time
from typing import Any

MAX_JOB_NAME = 63  # botocore model TrainingJobName max; checked again against the model
HASH_CHARS = 12


def canonical_json(obj: Any) -> bytes:
    """Sorted-key, whitespace-free JSON: the byte string all hashes here are taken over."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def spec_hash(spec: Any, plan: Any) -> str:
    """Hash of what defines the run: the whole spec and the plan's chosen configuration.

    `compute.training_plan` is left out: the same run booked on another reservation (or a name
    resolved to an ARN) is still the same run, and must reattach rather than duplicate.
    """
    data = spec.model_dump(mode="json")
    data.get("compute", {}).pop("training_plan", None)
    payload = {
        "spec": data,
        "plan": {
            "config": plan.config.model_dump(mode="json"),
            "instance": {"type": plan.instance.type, "count": plan.instance.count},
            "schema_version": plan.schema_version,
        },
    }
    return sha256_hex(canonical_json(payload))[:HASH_CHARS]


def name_stem(model_name: str) -> str:
    """A model name reduced to SageMaker's job-name alphabet ([a-zA-Z0-9-], no '--' runs)."""
    stem = re.sub(r"[^a-zA-Z0-9]+", "-", model_name).strip("-")
    return stem or "bsm"


def base_job_name(model_name: str, digest: str) -> str:
    """`<model>-<hash>`, the model part trimmed so the name fits with a --new suffix."""
    room = MAX_JOB_NAME - len(digest) - 1 - len(_suffix_example())
    return f"{name_stem(model_name)[:room].rstrip('-')}-{digest}"


def _suffix_example() -> str:
    return "-YYMMDDHHMMSSxxxx"


def unique_suffix() -> str:
    """`-YYMMDDHHMMSS` (UTC) plus 4 random hex digits: unique even for two submits a second."""
    return "-" + time.strftime("%y%m%d%H%M%S", time.gmtime()) + secrets.token_hex(2)
