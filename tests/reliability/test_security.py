"""Security promises, as tests.

1. No credential or session token ever appears in what the toolkit produces: CLI output (plan,
   submit --dry-run, iam-policy), the job request (incl. hyperparameters and environment), the
   code bundle's every byte, the objects a real submit leaves in S3 (moto), or the launcher's and
   workers' output and files (test_faults.py's reference run gets the same planted values).
   Recognisable fake credentials are planted in the environment AND in a temporary ~/.aws.
2. Reserving a training plan is impossible without consent: no TTY and no --yes/yes=True →
   ConsentRequiredError (exit 5) and no CreateTrainingPlan call (a Stubber with nothing queued
   for it raises on any such call).
3. The code bundle holds only what a wheel holds (the package's modules and package data, the
   container's entrypoint among them) and the plan: a package directory seeded with .git, .env,
   .aws, keys, notebooks, logs, tests/ and caches still bundles none of them.
"""

from __future__ import annotations

import gzip
import io
import json
import shutil
import tarfile
from datetime import UTC, datetime, timedelta
from pathlib import Path

import boto3
import pytest
from aws_support import BUCKET, PLAN_ARN, PLAN_NAME, REGION, offering, plan_response, spec_dict
from botocore.stub import Stubber
from moto import mock_aws

from blackwell_sm.cli import main
from blackwell_sm.errors import ConsentRequiredError

ROOT = Path(__file__).resolve().parents[2]
ENV_KEY_ID = "AKIABSMPLANTEDENV001"
ENV_SECRET = "bsmPlantedEnvSecret/ZZZ0123456789abcdefghij"
ENV_TOKEN = "bsmPlantedSessionToken+IQoJb3JpZ2luX2VjEXAMPLE"
FILE_KEY_ID = "AKIABSMPLANTEDFILE01"
FILE_SECRET = "bsmPlantedFileSecret/YYY0123456789abcdefghij"
FILE_TOKEN = "bsmPlantedFileToken+FwoGZXIvYXdzEXAMPLE"
SECRETS = [ENV_KEY_ID, ENV_SECRET, ENV_TOKEN, FILE_KEY_ID, FILE_SECRET, FILE_TOKEN]


@pytest.fixture
def planted(monkeypatch, tmp_path):
    """Fake credentials in the environment and in $HOME/.aws (a default and a named profile)."""
    home = tmp_path / "home"
    (home / ".aws").mkdir(parents=True)
    (home / ".aws" / "credentials").write_text(
        f"[default]\naws_access_key_id = {FILE_KEY_ID}\naws_secret_access_key = {FILE_SECRET}\n"
        f"aws_session_token = {FILE_TOKEN}\n"
    )
    (home / ".aws" / "config").write_text(f"[default]\nregion = {REGION}\n")
    for var in (
        "AWS_PROFILE",
        "AWS_CONFIG_FILE",
        "AWS_SHARED_CREDENTIALS_FILE",
        "AWS_ENDPOINT_URL",
        "AWS_DEFAULT_PROFILE",
    ):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ENV_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", ENV_SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", ENV_TOKEN)
    monkeypatch.setenv("AWS_REGION", REGION)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.chdir(ROOT)
    return home


def leaks(blob: bytes | str) -> list[str]:
    text = blob.decode("latin-1") if isinstance(blob, bytes) else blob
    return [s for s in SECRETS if s in text]


def tar_bytes(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _cli(args: list[str], capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        main(args)
    out, err = capsys.readouterr()
    return int(e.value.code or 0), out + err


def test_cli_output_never_shows_credentials(planted, capsys):
    outputs = []
    for args in (
        ["plan", "templates/llama-3.1-8b.yaml", "--output", "json"],
        ["plan", "templates/llama-3.1-8b.yaml"],
        ["submit", "templates/llama-3.1-8b.yaml", "--dry-run", "--output", "json"],
        ["submit", "templates/llama-3.1-8b.yaml", "--dry-run"],
        ["iam-policy", "--output", "json"],
    ):
        code, text = _cli(args, capsys)
        assert code == 0, (args, text[-2000:])
        outputs.append(text)
        assert leaks(text) == [], args
    # the dry run really printed the request (so the grep had something to look at)
    assert "CreateTrainingJob" in outputs[2] or "TrainingJobName" in outputs[2]


def test_request_bundle_and_s3_never_hold_credentials(planted, capsys):
    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.submit import submit

    messages: list[str] = []
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        aws = AwsContext(REGION)
        env = {"SOME_USER_VAR": "ok"}
        with Stubber(aws.plans) as plans:
            plans.add_response(
                "describe_training_plan", plan_response(), {"TrainingPlanName": PLAN_NAME}
            )
            job = submit(
                spec_dict(training_plan=PLAN_ARN, environment=env),
                aws=aws,
                notify=messages.append,
            )
        jr = job.job_request
        request = json.dumps(jr.request, default=str)
        assert "HyperParameters" in jr.request and jr.request["Environment"]["SOME_USER_VAR"]
        described = aws.sagemaker.describe_training_job(TrainingJobName=job.name)
        s3 = boto3.client("s3", region_name=REGION)
        objects = {
            o["Key"]: s3.get_object(Bucket=BUCKET, Key=o["Key"])["Body"].read()
            for o in s3.list_objects_v2(Bucket=BUCKET)["Contents"]
        }
    out, err = capsys.readouterr()
    assert leaks(request) == [] and leaks(json.dumps(described, default=str)) == []
    assert leaks(jr.model_dump_json()) == []
    assert leaks("\n".join(messages) + out + err) == [] and repr(aws).count("AKIA") == 0
    members = tar_bytes(jr.bundle.data)
    assert "plan.json" in members
    for name, data in members.items():
        assert leaks(data) == [] and leaks(name) == [], name
    assert len(objects) == 1
    for key, data in objects.items():
        assert leaks(data) == [] and leaks(key) == []
        assert tar_bytes(data) == members


# The container side (launcher, torchrun, workers) is checked in test_faults.py: its shared
# reference run gets PLANTED_ENV below, and nothing it prints or writes may repeat a value.
PLANTED_ENV = {
    "AWS_ACCESS_KEY_ID": ENV_KEY_ID,
    "AWS_SECRET_ACCESS_KEY": ENV_SECRET,
    "AWS_SESSION_TOKEN": ENV_TOKEN,
}


# -- consent -------------------------------------------------------------------------------
def _auto_stubs(plans: Stubber) -> None:
    start = datetime.now(UTC) + timedelta(hours=2)
    plans.add_client_error("describe_training_plan", "ResourceNotFound", "no such plan")
    plans.add_response(
        "search_training_plan_offerings",
        {"TrainingPlanOfferings": [offering("tpo-1", start=start, hours=96, fee="12345.00")]},
    )
    # nothing queued for create_training_plan: a call would raise inside the Stubber


def test_auto_plan_without_consent_reserves_nothing(monkeypatch, tmp_path):
    from aws_support import fake_credentials

    from blackwell_sm.aws.session import AwsContext
    from blackwell_sm.aws.submit import submit

    fake_credentials(monkeypatch, tmp_path)
    with mock_aws():
        boto3.client("s3", region_name=REGION).create_bucket(Bucket=BUCKET)
        aws = AwsContext(REGION)
        with Stubber(aws.plans) as plans:
            _auto_stubs(plans)
            with pytest.raises(ConsentRequiredError) as e:
                submit(spec_dict(training_plan="auto"), aws=aws)  # no TTY here, no yes
            plans.assert_no_pending_responses()  # searched; CreateTrainingPlan never called
        assert e.value.exit_code == 5 and "--yes" in (e.value.hint or "") + str(e.value)
        assert "12345" in str(e.value)  # the fee was shown
        sm = boto3.client("sagemaker", region_name=REGION)
        assert sm.list_training_jobs()["TrainingJobSummaries"] == []
        assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket=BUCKET)


def test_reserve_refuses_without_consent_and_on_a_no(monkeypatch, tmp_path):
    from aws_support import fake_credentials

    from blackwell_sm.aws import training_plans as tp
    from blackwell_sm.aws.session import AwsContext

    fake_credentials(monkeypatch, tmp_path)
    aws = AwsContext(REGION)
    start = datetime.now(UTC) + timedelta(hours=2)
    offer = tp.Offering.from_api(offering("tpo-2", start=start, hours=24, fee="99.00"))
    asked: list[str] = []
    with Stubber(aws.plans) as plans:  # no responses at all: any call raises
        with pytest.raises(ConsentRequiredError):
            tp.reserve(aws.plans, offer, "p1")
        with pytest.raises(ConsentRequiredError):
            tp.reserve(aws.plans, offer, "p1", consent=lambda text: asked.append(text) or False)
        plans.assert_no_pending_responses()
    assert asked and "99.00" in asked[0]


# -- the bundle's contents --------------------------------------------------------------------
def test_the_bundle_holds_only_what_a_wheel_holds(monkeypatch, tmp_path):
    from blackwell_sm.job import bundle, package_files

    checkout = tmp_path / "checkout"
    pkg = checkout / "blackwell_sm"
    real = package_files.PACKAGE_DIR
    shutil.copytree(real, pkg, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", checkout / "pyproject.toml")
    for folder in ("entrypoints", "templates"):  # shipped inside the package (package-dir)
        shutil.copytree(
            ROOT / folder, checkout / folder, ignore=shutil.ignore_patterns("__pycache__")
        )
    # what a developer's checkout and home hold next to the code
    junks = [".env", ".git/config", ".aws/credentials", "tests/test_x.py", ".DS_Store"]
    junks += ["__pycache__/m.cpython-311.pyc", "x.egg-info/PKG-INFO", "credentials.json"]
    junks += ["tls/server.key", "notes.ipynb", "logs/tracker.log"]
    planted = [pkg / j for j in junks] + [
        checkout / "entrypoints/.env",
        checkout / "templates/x.txt",
    ]
    for junk in planted:
        junk.parent.mkdir(parents=True, exist_ok=True)
        junk.write_text(f"AWS_SECRET_ACCESS_KEY={ENV_SECRET}\n")
    home_aws = tmp_path / "home" / ".aws"
    home_aws.mkdir(parents=True)
    (home_aws / "credentials").write_text(f"aws_secret_access_key = {FILE_SECRET}\n")
    (pkg / "aws_home").symlink_to(home_aws, target_is_directory=True)
    monkeypatch.setattr(package_files, "PACKAGE_DIR", pkg)

    built = bundle.build_bundle('{"plan": true}')
    members = tar_bytes(built.data)
    assert set(members) == set(built.files)
    assert "plan.json" in members and bundle.ENTRYPOINT_SCRIPT in members
    assert "blackwell_sm/__init__.py" in members
    for name in members:
        assert name == "plan.json" or name.startswith("blackwell_sm/"), name
        parts = name.split("/")
        assert not any(p.startswith(".") for p in parts), name
        assert not {"tests", "__pycache__", "aws_home", "tls", "logs"} & set(parts), name
        assert name.endswith((".py", ".yaml", "py.typed")) or name == "plan.json", name
    assert all(leaks(d) == [] for d in members.values())
    # and every .py of the real package is there (nothing wanted was dropped)
    expected = {"blackwell_sm/" + p.relative_to(real).as_posix() for p in real.rglob("*.py")}
    expected |= {f"blackwell_sm/entrypoints/{p.name}" for p in (ROOT / "entrypoints").glob("*.py")}
    assert expected <= set(members)
