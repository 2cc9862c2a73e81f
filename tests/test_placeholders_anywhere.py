"""Placeholders anywhere in the spec (issue 37, item 1), through the real commands on moto:
`bsm init llama-3.1-8b --task finetune` with `job:` filled in still has the `init_from`
placeholder; `submit --dry-run` lists it, `submit` refuses it (exit 2, before any call), and
`bsm iam-policy` grants nothing on it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from aws_support import BUCKET, ROLE
from cli_support import run

from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.spec import parse_spec
from blackwell_sm.spec.placeholders import spec_placeholders


@pytest.fixture
def aws(aws, monkeypatch):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


@pytest.fixture
def finetune_spec(tmp_path: Path) -> Path:
    """`bsm init llama-3.1-8b --task finetune`, with every REPLACE-ME under `job:` set."""
    path = tmp_path / "ft.yaml"
    code, _out, err = run("init", "llama-3.1-8b", "--task", "finetune", "--out", str(path))
    assert code == 0, err
    text = path.read_text()
    job_at = text.index("\njob:")
    head, job = text[:job_at], text[job_at:]
    job = job.replace("arn:aws:iam::123456789012:role/REPLACE-ME-SageMakerExecutionRole", ROLE)
    job = job.replace("REPLACE-ME-bucket", BUCKET)
    assert "REPLACE-ME-" not in job and "init_from: s3://REPLACE-ME-bucket/" in head
    path.write_text(head + job)
    return path


def test_dry_run_lists_the_init_from_placeholder_in_text_and_json(aws, finetune_spec):
    code, out, err = run("submit", str(finetune_spec), "--dry-run", "--output", "json")
    assert code == 0, err
    assert json.loads(out)["placeholders"] == ["training.init_from"]
    code, _out, err = run("submit", str(finetune_spec), "--dry-run")
    assert code == 0 and "training.init_from" in err


def test_submit_refuses_the_init_from_placeholder_before_any_call(aws, finetune_spec):
    code, out, err = run("submit", str(finetune_spec), "--output", "json")
    assert code == 2, err
    error = json.loads(out)["error"]
    assert error["field"] == "training.init_from" and "training.init_from" in error["message"]
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
    assert "Contents" not in aws.s3.list_objects_v2(Bucket=BUCKET)  # nothing uploaded


def test_iam_policy_grants_no_placeholder_resource(finetune_spec):
    code, out, err = run("iam-policy", str(finetune_spec), "--output", "json")
    assert code == 0, err
    doc = json.loads(out)
    granted = json.dumps([doc["caller"], doc["job_role"]])
    assert "REPLACE-ME" not in granted and f"arn:aws:s3:::{BUCKET}/" in granted
    assert any(n.startswith("training.init_from is still a placeholder") for n in doc["notes"])


def test_every_string_field_and_key_is_searched(tmp_path):
    init = tmp_path / "init"
    init.mkdir()
    (init / "config.json").write_text('{"_name_or_path": "REPLACE-ME/model"}')
    spec = parse_spec(
        {
            "model": {"preset": "tiny", "name": "replace-me-name"},
            "training": {
                "init_from": str(init),
                "report_to": ["mlflow"],
                "mlflow": {"tracking_uri": "https://REPLACE-ME.example.com"},
            },
            "job": {
                "role_arn": ROLE,
                "s3_prefix": f"s3://{BUCKET}/x",
                "environment": {"A": "REPLACE-ME"},
                "tags": {"REPLACE-ME-key": "v"},
                "channels": {"train": {"s3_uri": f"s3://{BUCKET}/data"}},
            },
        }
    )
    assert sorted(spec_placeholders(spec)) == [
        "job.environment.A",
        "job.tags.REPLACE-ME-key",
        "model.name",
        "training.init_from/config.json",
        "training.mlflow.tracking_uri",
    ]
