"""Issue 29: money is spent once per intent, and one job runs per checkpoint prefix, when `bsm`
runs several times at once (retries, two terminals, a CI matrix) or again after a success.

The processes are real `bsm` processes (tests/together.py starts them at the same moment)
against one endpoint on 127.0.0.1: moto's server for S3 and jobs, and the training-plan API
and SageMaker's job behaviour that moto lacks emulated in tests/sagemaker_server.py, every
request and response of which is checked against botocore's model (`server.invalid`). "One
machine" shares a BSM_STATE_DIR (the lock); "machines" each get their own.

Figures: 3 processes per concurrent round (BSM_SPEND_PROCS for more, e.g. 12).
"""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path

import boto3
import pytest
import yaml
from aws_support import BUCKET, P6, REGION, spec_dict
from sagemaker_server import SageMakerServer
from together import base_env, run_one, run_together

PROCS = int(os.environ.get("BSM_SPEND_PROCS", "3"))


@pytest.fixture(scope="module")
def server():
    s = SageMakerServer().start()
    client = boto3.client(
        "s3",
        region_name=REGION,
        endpoint_url=s.url,
        aws_access_key_id="AKIAFAKEBSMTEST12345",
        aws_secret_access_key="fake",
    )
    client.create_bucket(Bucket=BUCKET)
    yield s
    s.stop()
    assert s.invalid == []  # every emulated request and response matched botocore's model


@pytest.fixture(scope="module")
def wheel_cache(tmp_path_factory):
    """The container's wheels as stubs in a cache of this module's own, made offline by the real
    `fetch_wheels` (tests/wheel_support.py); the processes read that cache, and pip in them sees
    only the stubs' folder: nothing here downloads, warm cache or cold."""
    from wheel_support import offline_pip

    from blackwell_sm.aws.submit import prepare
    from blackwell_sm.job.requirements import container_requirements, image_target

    root = tmp_path_factory.mktemp("wheel-cache")
    target, _ = image_target(None)  # the default image's Python and platform
    reqs = container_requirements(target, precision="fp8", export_model=True, sm100=True)
    saved = os.environ.get("BSM_CACHE_DIR")
    os.environ["BSM_CACHE_DIR"] = str(root)
    try:
        with offline_pip(reqs, root / "links"):
            prepare(spec_dict())  # the cache filled from the stubs
    finally:
        if saved is None:
            os.environ.pop("BSM_CACHE_DIR", None)
        else:
            os.environ["BSM_CACHE_DIR"] = saved
    return root


@pytest.fixture
def env(server, wheel_cache, tmp_path):
    def make(state: str = "machine-1") -> dict[str, str]:
        e = base_env(server.url, tmp_path)
        e["BSM_CACHE_DIR"] = str(wheel_cache)
        e["PIP_NO_INDEX"], e["PIP_FIND_LINKS"] = "1", str(wheel_cache / "links")
        e["BSM_STATE_DIR"] = str(tmp_path / state)
        return e

    return make


def _no_traceback(results) -> None:
    for r in results:
        assert "Traceback" not in r.err, r.err[-3000:]


def _sagemaker(server):
    return boto3.client(
        "sagemaker",
        region_name=REGION,
        endpoint_url=server.url,
        aws_access_key_id="AKIAFAKEBSMTEST12345",
        aws_secret_access_key="fake",
    )


def _a_plan(server, name: str) -> dict:
    sm = _sagemaker(server)
    offer = sm.search_training_plan_offerings(
        InstanceType=P6, InstanceCount=1, DurationHours=48, TargetResources=["training-job"]
    )["TrainingPlanOfferings"][0]
    sm.create_training_plan(
        TrainingPlanName=name, TrainingPlanOfferingId=offer["TrainingPlanOfferingId"]
    )
    return sm.describe_training_plan(TrainingPlanName=name)


def _bought(server, kind: str, name: str) -> list:
    return [b for b in server.bought if b[0] == kind and b[1] == name]


def test_a_retried_and_a_concurrent_extend_buy_once(server, env, tmp_path):
    plan = _a_plan(server, "spend-extend")
    until = (plan["EndTime"] + timedelta(days=2, hours=5)).isoformat()
    cmd = ["plans", "extend", "spend-extend", "--until", until, "--yes", "-o", "json"]
    results = run_together([cmd] * PROCS, [env()] * PROCS, tmp_path)
    _no_traceback(results)
    assert [r.code for r in results] == [0] * PROCS, [r.err for r in results]
    docs = [r.json() for r in results]
    assert sum(d["bought"] is not None for d in docs) == 1  # one purchase for PROCS processes
    assert len({d["key"] for d in docs}) == 1  # every process computed the same intent key
    ext = _bought(server, "extension", "spend-extend")
    assert (
        len(ext) == 1 and ext[0][2] == next(d for d in docs if d["bought"])["bought"]["offering_id"]
    )
    # the 3-day offering is the shortest that reaches the target; the others said so
    assert all("meets the target: nothing bought" in d["reason"] for d in docs if not d["bought"])
    record = Path(next(d for d in docs if d["bought"])["bought"]["record"])
    assert json.loads(record.read_text())["key"] == docs[0]["key"]

    # at once: a CI rerun of the very command from another machine (nothing bought), and
    # --days right after (refused, naming the extension to buy one more anyway)
    days = ["plans", "extend", "spend-extend", "--days", "1", "--yes", "-o", "json"]
    again, refused = run_together([cmd, days], [env("machine-2"), env()], tmp_path)
    assert again.code == 0 and again.json()["bought"] is None, again.err
    error = refused.json()["error"]
    assert refused.code == 5 and error["code"] == "already_extended"
    assert f"--again-after {ext[0][2]}" in error["hint"]
    assert len(_bought(server, "extension", "spend-extend")) == 1
    more = [*days, "--again-after", ext[0][2]]
    results = run_together([more] * 2, [env()] * 2, tmp_path)  # the intent twice at once
    _no_traceback(results)
    assert sorted(r.code for r in results) == [0, 5], [r.err for r in results]
    assert "already_extended" in next(r for r in results if r.code == 5).out
    assert len(_bought(server, "extension", "spend-extend")) == 2


def test_two_machines_extending_at_once_buy_once_through_the_shared_claim(server, env, tmp_path):
    """Issue 32: two state folders (two machines), one plan, the same `--until` at once: the
    claim in S3 under the spec's job.s3_prefix lets one buy (tests/test_intent_across_machines.py
    repeats the race in threads)."""
    plan = _a_plan(server, "spend-machines")
    spec = _spec(tmp_path)
    until = (plan["EndTime"] + timedelta(days=1, hours=5)).isoformat()
    cmd = ["plans", "extend", "spend-machines", "--until", until, "--spec", str(spec), "--yes"]
    envs = [env("machine-a"), env("machine-b")]
    results = run_together([[*cmd, "-o", "json"]] * 2, envs, tmp_path)
    _no_traceback(results)
    assert [r.code for r in results] == [0, 0], [r.err for r in results]
    docs = [r.json() for r in results]
    assert sum(d["bought"] is not None for d in docs) == 1
    assert len(_bought(server, "extension", "spend-machines")) == 1
    record = next(d for d in docs if d["bought"])["intent_record"]
    assert record.startswith(f"s3://{BUCKET}/runs/purchase-intents/extension-")


def _spec(tmp_path: Path, **over) -> Path:
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump({**spec_dict("tiny"), **over}))
    return path


def test_concurrent_auto_yes_buys_one_plan_and_creates_one_job(server, env, tmp_path):
    spec = spec_dict("tiny", training_plan="auto")
    spec["training"] = {"total_steps": 1000}  # a spec (and plan name) of this test's own
    path = tmp_path / "auto.yaml"
    path.write_text(yaml.safe_dump(spec))
    cmd = ["submit", str(path), "--yes", "-o", "json"]
    # separate machines: no shared lock, only what AWS itself refuses protects them
    envs = [env(f"machine-{i}") for i in range(PROCS)]
    results = run_together([cmd] * PROCS, envs, tmp_path)
    _no_traceback(results)
    assert [r.code for r in results] == [0] * PROCS, [r.err[-2000:] for r in results]
    docs = [r.json() for r in results]
    plans = [b for b in server.bought if b[0] == "plan" and b[1].startswith("bsm-tiny-")]
    assert len(plans) == 1  # one purchase for PROCS processes
    assert {d["training_plan_arn"] for d in docs} == {
        f"arn:aws:sagemaker:{REGION}:123456789012:training-plan/{plans[0][1]}"
    }
    assert len({d["job_name"] for d in docs}) == 1
    assert [d["created"] for d in docs].count(True) == 1  # created once, the rest reattached
    assert all(d["reattached"] for d in docs if not d["created"])
    assert server.created_jobs.count(docs[0]["job_name"]) == 1


def test_new_beside_a_running_job_never_shares_its_checkpoint_prefix(server, env, tmp_path):
    spec = spec_dict("tiny")
    spec["training"] = {"total_steps": 1100}
    path = tmp_path / "new.yaml"
    path.write_text(yaml.safe_dump(spec))
    first = run_one(["submit", str(path), "-o", "json"], env(), tmp_path)
    assert first.code == 0, first.err
    running = first.json()["job_name"]
    base = running

    cmd = ["submit", str(path), "--new", "-o", "json"]
    results = run_together([cmd] * PROCS, [env()] * PROCS, tmp_path)  # one machine
    _no_traceback(results)
    assert [r.code for r in results] == [5] * PROCS, [r.err[-2000:] for r in results]
    for r in results:
        error = r.json()["error"]
        assert error["code"] == "prefix_in_use" and running in error["message"]
    assert [j for j in server.created_jobs if j.startswith(base)] == [running]

    # the job ends; --new from separate machines at once: one job runs on the prefix after all
    server.finish(running)
    machines = max(2, PROCS - 1)
    envs = [env(f"machine-{i}") for i in range(machines)]
    results = run_together([cmd] * machines, envs, tmp_path)
    _no_traceback(results)
    codes = sorted(r.code for r in results)
    assert codes == [0] + [5] * (machines - 1), [r.err[-2000:] for r in results]
    sm = _sagemaker(server)
    live = [
        j["TrainingJobName"]
        for j in sm.list_training_jobs(NameContains=base)["TrainingJobSummaries"]
        if j["TrainingJobStatus"] in ("InProgress", "Stopping")
    ]
    winner = next(r for r in results if r.code == 0).json()["job_name"]
    assert live == [winner]
