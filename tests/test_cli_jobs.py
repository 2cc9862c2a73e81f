"""`bsm submit|status|logs|stop|list` end to end: click in-process against moto (and a Stubber
where moto has no StopTrainingJob), plus one subprocess for the dry run's imports."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from aws_support import (
    FAKE_KEY_ID,
    FAKE_SECRET,
    describe_response,
    not_found_error,
    spec_dict,
)
from botocore.stub import Stubber
from cli_support import run

from blackwell_sm.aws.logs import LOG_GROUP
from blackwell_sm.cli import submit as submit_cli

ROOT = Path(__file__).resolve().parents[1]
TEMPLATES = sorted((ROOT / "templates").glob("*.yaml"))


@pytest.fixture
def aws(aws, monkeypatch):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


@pytest.fixture
def spec_file(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec_dict()))
    return str(path)


def test_dry_run_of_every_template_in_a_subprocess_imports_no_torch_or_sdk(tmp_path):
    """One interpreter runs `bsm submit T --dry-run --output json` for every template."""
    script = f"""
import json, sys
from click.testing import CliRunner
from blackwell_sm.cli import cli
out = {{}}
for path in {[str(t) for t in TEMPLATES]!r}:
    r = CliRunner().invoke(cli, ["submit", path, "--dry-run", "--output", "json"])
    out[path] = {{"code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr, "exc": repr(r.exception)}}
heavy = [m for m in ("torch", "sagemaker", "moto") if m in sys.modules]
print(json.dumps({{"runs": out, "heavy": heavy}}))
"""
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(tmp_path),
        "AWS_ACCESS_KEY_ID": "AKIAFAKEBSMTEST12345",
        "AWS_SECRET_ACCESS_KEY": "fake",
        # Any AWS call would go to a closed local port and fail: a dry run makes none.
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9",
        "AWS_MAX_ATTEMPTS": "1",
    }
    proc = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["heavy"] == []
    assert len(report["runs"]) == len(TEMPLATES) >= 2
    for path, r in report["runs"].items():
        if "demo-tiny" in path:  # the local-run template has no job: section to submit
            assert "no job: section" in r["exc"], r
            continue
        assert r["code"] == 0, (path, r)
        doc = json.loads(r["stdout"])  # JSON only on stdout
        assert doc["dry_run"] is True and doc["request"]["TrainingJobName"] == doc["job_name"]
        assert doc["placeholders"], path
        assert "REPLACE-ME" in r["stderr"]


def test_submit_then_status_logs_list_and_reattach(aws, spec_file):
    outputs: list[str] = []
    code, out, err = run("submit", spec_file, "--output", "json")
    assert code == 0, err
    outputs.append(out + err)
    job = json.loads(out)
    assert job["created"] and not job["reattached"]
    name = job["job_name"]
    assert "created training job" in err

    code, out, _ = run("submit", spec_file, "--output", "json")
    assert code == 0 and json.loads(out)["reattached"] is True

    code, out, _ = run("status", name, "--output", "json")
    assert code == 0 and json.loads(out)["name"] == name
    code, out, _ = run("status", name)
    assert code == 0 and "instances" in out and "ml.p6-b200.48xlarge" in out

    now = int(time.time() * 1000)
    aws.logs.create_log_group(logGroupName=LOG_GROUP)
    for host, offset in (("algo-1", 0), ("algo-2", 1)):
        stream = f"{name}/{host}-1700000000"
        aws.logs.create_log_stream(logGroupName=LOG_GROUP, logStreamName=stream)
        aws.logs.put_log_events(
            logGroupName=LOG_GROUP,
            logStreamName=stream,
            logEvents=[
                {"timestamp": now + 2 * i + offset, "message": f"{host} line {i}"} for i in range(3)
            ],
        )
    code, out, _ = run("logs", name, "--follow")  # the job has ended: follow drains and stops
    assert code == 0
    lines = out.strip().splitlines()
    assert lines[0] == "algo-1 | algo-1 line 0" and lines[1] == "algo-2 | algo-2 line 0"
    assert len(lines) == 6
    code, out, _ = run("logs", name, "--output", "json")
    assert [json.loads(x)["host"] for x in out.strip().splitlines()][:2] == ["algo-1", "algo-2"]

    code, out, _ = run("list", "--output", "json")
    assert code == 0 and [r["training_job_name"] for r in json.loads(out)] == [name]

    # --logs with --output json: log lines go to stderr, stdout is one JSON document.
    code, out, err = run("submit", spec_file, "--logs", "--output", "json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["reattached"] and doc["status"]["status"] == "Completed"
    assert "algo-2 | algo-2 line 2" in err
    outputs.append(out + err)
    for text in outputs:  # credentials never reach output
        assert FAKE_KEY_ID not in text and FAKE_SECRET not in text


def test_submit_refuses_placeholders_with_exit_2(aws, tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(spec_dict(role_arn="arn:aws:iam::123456789012:role/REPLACE-ME")))
    code, out, err = run("submit", str(path), "--output", "json")
    assert code == 2 and "job.role_arn" in err
    assert json.loads(out)["error"]["field"] == "job.role_arn"


def test_status_of_unknown_job_is_exit_4(aws):
    code, out, err = run("status", "no-such-job", "--output", "json")
    assert code == 4 and "no training job named 'no-such-job'" in err
    assert json.loads(out)["error"]["exit_code"] == 4


def test_stop_and_ctrl_c_during_wait_leaves_the_job_running(aws, spec_file, monkeypatch):
    from blackwell_sm.aws.submit import prepare

    _rs, _plan, jr = prepare(spec_file)
    running = describe_response(jr.request)
    with Stubber(aws.sagemaker) as sm:
        sm.add_client_error("describe_training_job", **not_found_error(jr.job_name))
        none_live = {"TrainingJobSummaries": []}
        sm.add_response("list_training_jobs", none_live)  # no live job on the prefix
        sm.add_response("create_training_job", {"TrainingJobArn": running["TrainingJobArn"]})
        sm.add_response("describe_training_job", running)  # the post-create check
        sm.add_response("list_training_jobs", none_live)  # still none came first
        sm.add_response("describe_training_job", running)  # wait(): still starting
        import blackwell_sm.aws.handle as handle

        def ctrl_c(_s: float) -> None:
            raise KeyboardInterrupt

        monkeypatch.setattr(handle.time, "sleep", ctrl_c)
        code, _out, err = run("submit", spec_file, "--wait")
        sm.assert_no_pending_responses()
        assert code == 130, err
        assert f"bsm status {jr.job_name}" in err and f"bsm logs {jr.job_name} --follow" in err
        monkeypatch.undo()
        monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)

        stopping = {**running, "TrainingJobStatus": "Stopping", "SecondaryStatus": "Stopping"}
        sm.add_response("describe_training_job", running, {"TrainingJobName": jr.job_name})
        sm.add_response("stop_training_job", {}, {"TrainingJobName": jr.job_name})
        sm.add_response("describe_training_job", stopping, {"TrainingJobName": jr.job_name})
        code, out, err = run("stop", jr.job_name, "--output", "json")
        sm.assert_no_pending_responses()
    assert code == 0, err
    assert json.loads(out)["status"] == "Stopping"
