"""The request builder's golden cases: specs and plans, and what `build_job_request` made of them.

`tests/data/request_golden.json` was written by this script from the builder as it was before
issue 25 split it into small builders; `tests/test_request_golden.py` rebuilds every case and
compares. Each case stores its spec and its plan(s), so the comparison holds the builder only
(a planner change does not move it). The bundle's sha256 is the one value normalized: the bundle
carries the package's own source, which any edit changes.

Regenerate (only when a change to the request is meant, and say so in the commit):
    .venv/bin/python tests/request_golden.py --write
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
import tarfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "data" / "request_golden.json"
TEMPLATES = HERE.parent / "templates"
BUNDLE_SHA = "<bundle-sha256>"
PLAN_ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/bsm-test-plan"
B200_PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/b200-week"
P5EN_PLAN = "arn:aws:sagemaker:us-east-1:123456789012:training-plan/p5en-week"
MLFLOW_ARN = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/bsm-tracking"


def _single_cases() -> list[tuple[str, dict, dict]]:
    """(name, spec mapping, build kwargs) for one-type specs on `plan_for`'s fixed plans."""
    from aws_support import run_spec

    base = run_spec().model_dump(mode="json", exclude_unset=True)
    full_job = {
        **base["job"],
        "channels": {
            "train": {"s3_uri": "s3://bsm-test-bucket/data/train/"},
            "eval": {
                "s3_uri": "s3://bsm-test-bucket/data/eval",
                "input_mode": "File",
                "distribution": "ShardedByS3Key",
            },
        },
        "tags": {"team": "ml", "cost-center": "42"},
        "environment": {"NCCL_DEBUG": "WARN", "A_FIRST": "1"},
        "subnets": ["subnet-0123456789abcdef0"],
        "security_group_ids": ["sg-0123456789abcdef0"],
        "output_kms_key_id": "arn:aws:kms:us-east-1:123456789012:key/abc",
        "keep_alive_minutes": 30,
        "max_retry_attempts": 2,
        "output_compression": "GZIP",
        "enable_network_isolation": True,
        "encrypt_inter_container_traffic": True,
        "model_package_group": "bsm-models",
        "infra_check": True,
        "volume_size_gb": 500,
    }
    full = {
        **base,
        "job": full_job,
        "compute": {**base["compute"], "training_plan": PLAN_ARN},
        "training": {
            **base["training"],
            "report_to": ["tensorboard", "mlflow"],
            "mlflow": {"tracking_uri": MLFLOW_ARN, "experiment": "llama"},
            "export_model": True,
        },
    }
    named = {**base, "compute": {**base["compute"], "training_plan": "bsm-test-plan"}}
    auto = {**base, "compute": {**base["compute"], "training_plan": "auto"}}
    runtime = {**base, "job": {**base["job"], "max_runtime_hours": 3.0}}
    init = {
        **base,
        "training": {**base["training"], "init_from": "s3://bsm-test-bucket/hf/llama/"},
        "job": {**base["job"], "channels": {"train": {"s3_uri": "s3://bsm-test-bucket/t"}}},
    }
    return [
        ("basic", base, {}),
        ("full", full, {}),
        ("named-plan-unresolved", named, {}),
        ("named-plan-resolved", named, {"training_plan_arn": PLAN_ARN}),
        ("auto-plan", auto, {}),
        ("user-max-runtime", runtime, {}),
        ("init-from-and-a-prefix-without-slash", init, {}),
        ("second-job", base, {"run_index": 2, "done_steps": 1000}),
        (
            "region-from-session",
            {**base, "job": {k: v for k, v in base["job"].items() if k != "region"}},
            {"region": "us-west-2"},
        ),
    ]


def _preference_cases() -> list[tuple[str, dict, dict]]:
    from aws_support import ROLE

    pref = [
        {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 1, "training_plan": B200_PLAN},
        {"instance_type": "ml.p6-b300.48xlarge", "instance_count": 1},
        {"instance_type": "ml.p5en.48xlarge", "instance_count": 2, "training_plan": "p5en-week"},
    ]
    spec = {
        "model": "llama-3.1-8b",
        "training": {"total_tokens": 2_000_000_000},
        "compute": {"instance_preferences": pref},
        "job": {
            "role_arn": ROLE,
            "region": "us-east-1",
            "s3_prefix": "s3://bsm-test-bucket/runs",
            "channels": {"train": {"s3_uri": "s3://bsm-test-bucket/data/train/"}},
            "tags": {"team": "ml"},
            "keep_alive_minutes": 10,
        },
    }
    return [
        ("preferences", spec, {}),
        ("preferences-resolved", spec, {"preference_arns": {2: P5EN_PLAN}}),
        ("preferences-second-job", spec, {"run_index": 3, "done_steps": 10}),
    ]


def _template_cases() -> list[tuple[str, dict, dict]]:
    import yaml

    out = []
    for path in sorted(TEMPLATES.glob("*.yaml")):
        data = yaml.safe_load(path.read_text())
        if "job" in data:  # a template without one is for `bsm plan` / run-local only
            out.append((f"template-{path.stem}", data, {}))
    return out


def _plans_for(name: str, spec: Any) -> Any:
    """The plan(s) a case is built from: `plan_for`'s fixed plan for the one-type cases, the
    planner's for templates and preferences."""
    from aws_support import plan_for

    from blackwell_sm.planner.api import make_plan
    from blackwell_sm.planner.preferences import plan_preferences

    if spec.compute.instance_preferences:
        return plan_preferences(spec)
    if name.startswith("template-"):
        return make_plan(spec)
    return plan_for(spec, hours=20.0)


def load_plans(text: str) -> Any:
    """A stored plan: a Plan, or a plan per preference."""
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.planner.preferences import PreferencePlans

    data = json.loads(text)
    if "preferences" in data:
        return PreferencePlans.model_validate(data)
    return Plan.model_validate_json(text)


def outcome(jr: Any) -> dict[str, Any]:
    """What the comparison holds of a JobRequest: everything a user sees, the bundle's sha256
    normalized; the bundle's own files (plans, manifest) by content hash."""
    members = {}
    with tarfile.open(fileobj=io.BytesIO(jr.bundle.data), mode="r:gz") as tar:
        for m in tar.getmembers():
            if m.isfile() and not m.name.startswith("blackwell_sm/"):
                members[m.name] = hashlib.sha256(tar.extractfile(m).read()).hexdigest()
    data = jr.model_dump(mode="json", exclude={"bundle", "wheelhouse"})
    # A string, not a mapping: the comparison holds the members' order too (byte-identical JSON).
    text = json.dumps(data).replace(jr.bundle.sha256, BUNDLE_SHA)
    return {"job_request_json": text, "bundle_members": members}


def build_case(spec_data: dict, plans_text: str, kwargs: dict) -> dict[str, Any]:
    from blackwell_sm.job.request import build_job_request
    from blackwell_sm.spec import parse_spec

    spec = parse_spec(spec_data)
    kw = dict(kwargs)
    if "preference_arns" in kw:
        kw["preference_arns"] = {int(k): v for k, v in kw["preference_arns"].items()}
    return outcome(build_job_request(spec, load_plans(plans_text), **kw))


def make_cases() -> list[dict[str, Any]]:
    from blackwell_sm.spec import parse_spec

    cases = []
    for name, spec_data, kwargs in _single_cases() + _preference_cases() + _template_cases():
        spec = parse_spec(spec_data)
        plans = _plans_for(name, spec)
        if not plans.feasible:
            continue
        text = plans.to_json() if hasattr(plans, "to_json") else plans.model_dump_json()
        kw = json.loads(json.dumps(kwargs))
        cases.append(
            {
                "name": name,
                "spec": spec_data,
                "plans": text,
                "kwargs": kw,
                "expected": build_case(spec_data, text, kw),
            }
        )
    return cases


def main() -> None:
    if "--write" not in sys.argv:
        sys.exit("usage: request_golden.py --write (rewrites tests/data/request_golden.json)")
    cases = make_cases()
    GOLDEN.write_text(json.dumps(cases, indent=1, sort_keys=True) + "\n")
    print(f"wrote {len(cases)} cases to {GOLDEN}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE))
    main()
