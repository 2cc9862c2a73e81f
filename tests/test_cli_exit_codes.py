"""The CLI's exit codes and JSON error objects, one test per code (README "Exit codes").

The AWS cases drive `bsm` as a process against a moto server on 127.0.0.1 (one interpreter runs
each command through `main()` so the import cost is paid once); consent (exit 5) needs the
training-plan API that moto lacks, and Ctrl-C (130) a KeyboardInterrupt, so those two run
in-process with a Stubber.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from aws_support import BUCKET, REGION, offering, spec_dict
from botocore.stub import Stubber
from cli_support import capture, run

from blackwell_sm.cli import cli, main
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.cli.output import OUTPUT_OPTION
from blackwell_sm.errors import BsmError

ROOT = Path(__file__).resolve().parents[1]
KEYS = {"code", "message", "field", "hint", "exit_code"}

SCRIPT = """
import contextlib, io, json, os, sys
from blackwell_sm.cli import main
results = []
for env, argv in json.load(sys.stdin):
    saved = dict(os.environ)
    os.environ.update(env)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
            code = 0
        except SystemExit as e:
            code = int(e.code or 0)
    os.environ.clear(); os.environ.update(saved)
    results.append({"code": code, "out": out.getvalue(), "err": err.getvalue()})
print(json.dumps(results))
"""


def _run_cli_process(endpoint: str, tmp_path: Path, cases: list) -> list[dict]:
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "PYTHONPATH": str(ROOT),
        "AWS_ACCESS_KEY_ID": "AKIAFAKEBSMTEST12345",
        "AWS_SECRET_ACCESS_KEY": "fake",
        "AWS_REGION": REGION,
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        "AWS_EC2_METADATA_DISABLED": "true",
    }
    cmd = [sys.executable, "-c", SCRIPT]
    proc = capture(cmd, input=json.dumps(cases), env=env, cwd=tmp_path, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _error(result: dict, exit_code: int) -> dict:
    assert result["code"] == exit_code, result
    obj = json.loads(result["out"])["error"]  # stdout is exactly one JSON document
    assert set(obj) == KEYS and obj["exit_code"] == exit_code
    assert obj["message"] in result["err"]  # the human message stays on stderr
    return obj


def test_exit_codes_0_2_3_4_from_a_cli_process_on_a_moto_server(moto_server, tmp_path):
    import boto3

    boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=moto_server,
        aws_access_key_id="AKIAFAKEBSMTEST12345",
        aws_secret_access_key="fake",
    ).create_bucket(Bucket=BUCKET)
    good = tmp_path / "good.yaml"
    good.write_text(yaml.safe_dump(spec_dict()))
    placeholder = tmp_path / "placeholder.yaml"
    placeholder.write_text(yaml.safe_dump(spec_dict(role_arn="arn:aws:iam::1:role/REPLACE-ME")))
    huge = spec_dict("llama-3.1-70b")
    huge["training"] = {  # with the state on the GPUs (offload would fit it: issue 33)
        "seq_len": 131072,
        "global_batch_tokens": 1048576,
        "pins": {"offload": False},
    }
    infeasible = tmp_path / "huge.yaml"
    infeasible.write_text(yaml.safe_dump(huge))
    cases = [
        ({}, ["submit", str(good), "--output", "json"]),
        ({}, ["submit", str(placeholder), "--output", "json"]),
        ({"AWS_MAX_ATTEMPTS": "abc"}, ["status", "bsm-x", "--output", "json"]),
        ({}, ["submit", str(infeasible), "--output", "json"]),
        ({}, ["status", "bsm-no-such-job", "--output", "json"]),
        ({}, ["status", "bsm-no-such-job"]),
    ]
    ok, spec_err, setting_err, infeasible_err, aws_err, human = _run_cli_process(
        moto_server, tmp_path, cases
    )
    assert ok["code"] == 0, ok["err"]
    assert json.loads(ok["out"])["created"] is True

    obj = _error(spec_err, 2)
    assert obj["code"] == "bad_input" and obj["field"] == "job.role_arn"
    obj = _error(setting_err, 2)
    assert obj["code"] == "bad_setting" and obj["field"] == "AWS_MAX_ATTEMPTS"
    obj = _error(infeasible_err, 3)
    assert obj["code"] == "infeasible_plan"
    obj = _error(aws_err, 4)
    assert obj["code"] == "not_found" and "bsm list" in obj["hint"]
    assert human["code"] == 4 and human["out"] == ""  # no JSON without --output json


def test_exit_1_any_other_error(capsys):
    @cli.command("exit-one-test", hidden=True)
    @OUTPUT_OPTION
    def boom(output: str) -> None:
        raise BsmError("something else went wrong", code="wait_timeout")

    try:
        with pytest.raises(SystemExit) as e:
            main(["exit-one-test", "--output", "json"])
    finally:
        cli.commands.pop("exit-one-test", None)
    out, err = capsys.readouterr()
    assert e.value.code == 1 and "something else went wrong" in err
    assert json.loads(out)["error"]["exit_code"] == 1


@pytest.fixture
def aws_cli(aws, monkeypatch):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


def test_exit_5_consent_required(aws_cli):
    from datetime import UTC, datetime, timedelta

    offer_id = "tpo-" + "d" * 20
    start = datetime.now(UTC) + timedelta(days=1)
    with Stubber(aws_cli.plans) as st:
        st.add_client_error(  # no plan named p1 yet
            "describe_training_plan", service_error_code="ResourceNotFound", http_status_code=400
        )
        st.add_response(
            "search_training_plan_offerings",
            {"TrainingPlanOfferings": [offering(offer_id, start=start, hours=24, fee="9.00")]},
        )
        code, out, err = run(
            "plans",
            "reserve",
            offer_id,
            "--name",
            "p1",
            "--instance-type",
            "ml.p6-b200.48xlarge",
            "--hours",
            "24",
            "--output",
            "json",
        )
        st.assert_no_pending_responses()  # no CreateTrainingPlan was sent
    obj = _error({"code": code, "out": out, "err": err}, 5)
    assert obj["code"] == "consent_required" and "--yes" in obj["hint"]


def test_exit_130_ctrl_c(aws_cli, monkeypatch):
    from blackwell_sm.aws.handle import TrainingJob

    def interrupted(self, **_kw):
        raise KeyboardInterrupt

    monkeypatch.setattr(TrainingJob, "wait", interrupted)
    code, out, err = run("status", "bsm-x-1", "--wait", "--output", "json")
    obj = _error({"code": code, "out": out, "err": err}, 130)
    assert obj["code"] == "interrupted" and "bsm status bsm-x-1" in obj["hint"]
