"""Progress for the long waits (issue 21): the bundle upload and the wheel download report to a
plain callback (moto, and a real `pip download` from a local folder), and `bsm submit --wait`
draws them with rich.progress on a terminal (a pty) and stays silent in a pipe or under JSON."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
from pathlib import Path

import boto3
import yaml
from aws_support import BUCKET, FAKE_KEY_ID, FAKE_SECRET, REGION, spec_dict
from cli_support import run
from wheel_support import stub_wheel

from blackwell_sm.aws.s3 import upload_bundle
from blackwell_sm.job.images import TARGETS
from blackwell_sm.job.requirements import Requirement
from blackwell_sm.job.wheels import fetch_wheels

ROOT = Path(__file__).resolve().parents[1]


def test_the_upload_reports_its_bytes(aws):
    data = os.urandom(3 * 2**20 + 5)
    heard: list[tuple[str, float, float | None]] = []
    uri = f"s3://{BUCKET}/code/x/bundle.tar.gz"
    result = upload_bundle(aws.s3, data, uri, progress=lambda *a: heard.append(a[:3]))
    assert result.uploaded and result.size_bytes == len(data)
    assert heard and {k for k, _, _ in heard} == {"upload"}
    assert heard[-1][1:] == (len(data), len(data))
    head = aws.s3.head_object(Bucket=BUCKET, Key="code/x/bundle.tar.gz")
    assert head["ContentLength"] == len(data)
    heard.clear()  # already there: nothing to send, nothing to report
    assert not upload_bundle(aws.s3, data, uri, progress=lambda *a: heard.append(a)).uploaded
    assert heard == []


def test_the_wheel_download_reports_each_wheel(tmp_path, monkeypatch):
    links = tmp_path / "links"
    links.mkdir()
    stub_wheel(links, "bsmprogressa", "1.0")
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # pip reads only the folder: no network
    monkeypatch.setenv("PIP_FIND_LINKS", str(links))
    reqs = [Requirement(name="bsmprogressa", why="test", carried=True)]
    heard: list[tuple] = []
    target = next(iter(TARGETS.values()))
    house = fetch_wheels(
        reqs, target, cache=tmp_path / "cache", progress=lambda *a: heard.append(a)
    )
    assert [w.file for w in house.wheels] == ["bsmprogressa-1.0-py3-none-any.whl"]
    assert ("wheels", 1, None, "bsmprogressa-1.0-py3-none-any.whl") in heard
    assert {a[0] for a in heard} == {"wheels"}


def _env(moto_server: str, tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        AWS_ACCESS_KEY_ID=FAKE_KEY_ID,
        AWS_SECRET_ACCESS_KEY=FAKE_SECRET,
        AWS_REGION=REGION,
        AWS_ENDPOINT_URL=moto_server,
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        PYTHONPATH=str(ROOT),
        COLUMNS="120",
    )
    return env


def _in_a_terminal(args: list[str], env: dict[str, str]) -> tuple[int, str]:
    """Run `bsm ARGS` with stdout and stderr on a pty; everything it drew, and its exit code."""
    master, slave = pty.openpty()
    cmd = [sys.executable, "-m", "blackwell_sm", *args]
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=slave, stderr=slave, env=env)
    os.close(slave)
    chunks = []
    while True:
        ready, _, _ = select.select([master], [], [], 120)
        if not ready:
            p.kill()
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(master)
    return p.wait(timeout=60), b"".join(chunks).decode("utf-8", "replace")


def _spec(tmp_path: Path, model: str) -> Path:
    d = spec_dict(model)
    d["training"] = {"total_steps": 5}
    path = tmp_path / f"{model}.yaml"
    path.write_text(yaml.safe_dump(d))
    return path


def test_submit_wait_draws_progress_on_a_terminal_only(moto_server, tmp_path):
    env = _env(moto_server, tmp_path)
    keys = {"aws_access_key_id": FAKE_KEY_ID, "aws_secret_access_key": FAKE_SECRET}
    s3 = boto3.client("s3", region_name=REGION, endpoint_url=moto_server, **keys)
    s3.create_bucket(Bucket=BUCKET)
    spec = _spec(tmp_path, "tiny")
    code, drawn = _in_a_terminal(["submit", str(spec), "--wait"], env)
    assert code == 0, drawn
    assert "uploading the code bundle" in drawn and "100%" in drawn
    assert "waiting for bsm-tiny-" in drawn and "Completed" in drawn

    code, drawn = _in_a_terminal(["submit", str(spec), "--wait", "--output", "json"], env)
    assert code == 0 and "waiting for" not in drawn  # JSON: no progress even on a terminal
    assert json.loads(drawn[drawn.index("{") :])["reattached"] is True


def test_no_progress_off_a_terminal(aws, tmp_path, monkeypatch):
    """In a pipe or a CI log (here: stdout and stderr are StringIO), only the usual messages."""
    from blackwell_sm.cli import submit as submit_cli

    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    code, out, err = run("submit", str(_spec(tmp_path, "tiny")), "--wait")
    assert code == 0, err
    assert "submitted bsm-tiny-" in out and "uploaded code bundle" in err
    assert "uploading the code bundle" not in out + err and "waiting for" not in err
