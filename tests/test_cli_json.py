"""Every command's `--output json` speaks snake_case (issue 21): run each against moto (Stubber
where moto has no training plans) and walk every key of what it prints.

Exempt, by design: documents in another grammar that users paste elsewhere (`bsm schema`: JSON
Schema; `bsm iam-policy`: IAM policy JSON; the CreateTrainingJob `request` of a submit) and maps
whose keys are data, not field names (metric names, tags, environment variables).
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta

import pytest
import yaml
from aws_support import PLAN_NAME, plan_response, put_log_lines, spec_dict, stub_plan_commands
from botocore.stub import Stubber
from cli_support import run

from blackwell_sm.aws.logs import LOG_GROUP
from blackwell_sm.cli import submit as submit_cli

SNAKE = re.compile(r"^[a-z][a-z0-9_]*$")
# keys whose values are documents of another grammar, or maps keyed by data
VERBATIM = {"request"}
DATA_MAPS = {"final_metrics", "check", "tags", "environment", "hyper_parameters"}
OFFER = "tpo-" + "d" * 20


def bad_keys(obj, path: str = "") -> list[str]:
    """Every key under `obj` that is not snake_case, with its path."""
    out: list[str] = []
    if isinstance(obj, dict):
        for key, value in obj.items():
            here = f"{path}.{key}" if path else str(key)
            if not SNAKE.match(str(key)):
                out.append(here)
            if key in VERBATIM or key in DATA_MAPS:
                continue
            out += bad_keys(value, here)
    elif isinstance(obj, list):
        for i, value in enumerate(obj):
            out += bad_keys(value, f"{path}[{i}]")
    return out


@pytest.fixture
def aws(aws, monkeypatch):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


def json_of(*args: str) -> object:
    code, out, err = run(*args, "--output", "json")
    assert code == 0, (args, err)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    if args[0] == "logs":  # one object per line
        return [json.loads(ln) for ln in lines]
    return json.loads(out)


def test_every_command_prints_snake_case_json(aws, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(spec_dict()))
    outputs: dict[str, object] = {}
    outputs["plan"] = json_of("plan", "--model", "tiny")
    outputs["submit --dry-run"] = json_of("submit", str(spec), "--dry-run")
    outputs["submit"] = json_of("submit", str(spec))
    name = outputs["submit"]["job_name"]
    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    at = datetime.fromtimestamp(1_700_000_000, UTC)
    put_log_lines(aws, f"{name}/algo-1-1", ["[bsm-step] step=1 loss=2.5"], at=at)
    outputs["status"] = json_of("status", name)
    outputs["logs"] = json_of("logs", name)
    outputs["list"] = json_of("list")
    described = aws.sagemaker.describe_training_job(TrainingJobName=name)
    with Stubber(aws.sagemaker) as st:  # moto has no StopTrainingJob
        st.add_response("describe_training_job", described)
        st.add_response("stop_training_job", {})
        st.add_response("describe_training_job", {**described, "TrainingJobStatus": "Stopping"})
        outputs["stop"] = json_of("stop", name)
    now = datetime.now(UTC) + timedelta(hours=1)
    with Stubber(aws.plans) as st:
        summary = {k: v for k, v in plan_response().items() if k != "ReservedCapacitySummaries"}
        stub_plan_commands(st, OFFER, start=now, listed=[summary])
        cap = ["--instance-type", "ml.p6-b200.48xlarge", "--hours", "24"]
        outputs["plans search"] = json_of("plans", "search", *cap)
        reserve = ("plans", "reserve", OFFER, "--name", PLAN_NAME, *cap, "--yes")
        outputs["plans reserve"] = json_of(*reserve)
        outputs["plans list"] = json_of("plans", "list")
        outputs["plans describe"] = json_of("plans", "describe", PLAN_NAME)
        st.add_response("describe_training_plan", plan_response())
        extension = {
            "TrainingPlanExtensionOfferingId": "ext-1",
            "DurationHours": 24,
            "UpfrontFee": "10.00",
            "CurrencyCode": "USD",
        }
        st.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": [], "TrainingPlanExtensionOfferings": [extension]},
        )
        outputs["plans extend"] = json_of("plans", "extend", PLAN_NAME)
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("hello world\n" * 50)
    outputs["data prepare"] = json_of("data", "prepare", str(corpus), "--out", str(tmp_path / "s"))
    outputs["data verify"] = json_of("data", "verify", str(tmp_path / "s"))
    sources = {outputs[k]["region_source"] for k in ("submit --dry-run", "submit")}
    assert outputs["submit"]["created"] and sources == {"job.region"}  # one region_source
    found = {cmd: bad_keys(obj) for cmd, obj in outputs.items()}
    assert {cmd: keys for cmd, keys in found.items() if keys} == {}


@pytest.mark.parametrize(("flag", "source"), [(True, "--region"), (False, "AWS_REGION")])
def test_a_dry_run_and_a_submit_tell_the_same_region_source(aws, tmp_path, flag, source):
    """(`job.region` in the spec: the test above checks it on its dry run and submit.)"""
    d = spec_dict()
    if not flag:
        del d["job"]["region"]  # the fixture's AWS_REGION decides
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(d))
    args = [str(spec), *(["--region", aws.region] if flag else [])]
    dry = json_of("submit", *args, "--dry-run")
    real = json_of("submit", *args)
    assert dry["region_source"] == real["region_source"] == source
