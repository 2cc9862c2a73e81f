"""A wheel install submits exactly like a clone (issue 29).

The wheel is built from a copy of this checkout's package folders (with a key, a notebook, a log
planted in it, which neither the wheel nor the bundle may hold), installed offline
(`--no-index --no-deps`) into a fresh virtual environment that sees this venv's dependencies
through a `.pth` file but not the clone, and `bsm` runs from an empty folder: `submit --dry-run`
builds the same bundle, byte for byte, as the clone does; a real submit against a moto server
uploads a bundle whose members are exactly the wheel's package files, the container
entrypoint among them, plus the plan and the carried wheels. An installed file edited after the
install is refused by name.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import tarfile
import zipfile
from pathlib import Path

import pytest
import yaml
from aws_support import BUCKET, REGION, spec_dict
from cli_support import capture

from blackwell_sm.job.bundle import ENTRYPOINT_SCRIPT

REPO = Path(__file__).resolve().parents[1]
JUNK = ("secrets/key.pem", "notes.ipynb", "runs/tracker.log", "credentials.json")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("src")
    shutil.copy(REPO / "pyproject.toml", src)
    shutil.copy(REPO / "README.md", src)
    for folder in ("blackwell_sm", "entrypoints", "templates"):  # the last two: package-dir
        shutil.copytree(REPO / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
        for junk in JUNK:
            (src / folder / junk).parent.mkdir(parents=True, exist_ok=True)
            (src / folder / junk).write_text("AWS_SECRET_ACCESS_KEY=planted\n")
    dist = src / "dist"
    args = ["wheel", "--no-deps", "--no-build-isolation", "--no-index", "--quiet", "-w", dist]
    _pip(sys.executable, *args, src)
    [whl] = dist.glob("blackwell_sm-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv with the wheel installed; the dependencies through a .pth, no clone."""
    v = tmp_path_factory.mktemp("venv") / "v"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(v)], check=True)
    site = Path(
        subprocess.run(
            [
                str(v / "bin" / "python"),
                "-c",
                "import sysconfig; print(sysconfig.get_paths()['purelib'])",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    (site / "_bsm_test_deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    args = ["install", "--no-index", "--no-deps", "--quiet", "--disable-pip-version-check"]
    _pip(v / "bin" / "python", *args, wheel)
    return v


def _pip(python: str | Path, *args: str | Path) -> None:
    """`python -m pip ARGS...` without the user's pip configuration; it must succeed."""
    cmd = [python, "-m", "pip", *args]
    out = capture(cmd, timeout=300, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert out.returncode == 0, out.stderr


def _env(home: Path, **extra: str) -> dict[str, str]:
    from blackwell_sm.job.wheels import cache_dir

    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "AWS_", "BSM_"))}
    env.update(
        HOME=str(home),
        BSM_CACHE_DIR=str(cache_dir().parent),
        AWS_REGION=REGION,
        AWS_ACCESS_KEY_ID="AKIAFAKEBSMTEST12345",
        AWS_SECRET_ACCESS_KEY="fake",
        AWS_CONFIG_FILE=str(home / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(home / "none"),
        AWS_EC2_METADATA_DISABLED="true",
        BSM_STATE_DIR=str(home / "state"),
        **extra,
    )
    return env


def _bsm(venv: Path, args: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(venv / "bin" / "bsm"), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _members(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_wheel_install_submits_exactly_like_a_clone(wheel, venv, tmp_path):
    from moto.server import ThreadedMotoServer

    from blackwell_sm.aws.submit import prepare

    names = set(zipfile.ZipFile(wheel).namelist())
    pkg = {n for n in names if n.startswith("blackwell_sm/")}
    assert ENTRYPOINT_SCRIPT in pkg and not [n for n in pkg if any(j in n for j in JUNK)]
    empty = tmp_path / "empty"
    empty.mkdir()
    spec = spec_dict("tiny")
    (empty / "spec.yaml").write_text(yaml.safe_dump(spec))
    env = _env(tmp_path)

    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import blackwell_sm; print(blackwell_sm.__file__)"],
        cwd=empty,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert str(venv) in where and str(REPO) not in where  # the wheel, not the clone

    dry = _bsm(venv, ["submit", "spec.yaml", "--dry-run", "-o", "json"], empty, env)
    assert dry.returncode == 0, dry.stderr
    bundle = json.loads(dry.stdout)["bundle"]
    assert "RECORD of the installed wheel blackwell-sm" in bundle["package_source"]
    assert {f for f in bundle["files"] if f.startswith("blackwell_sm/")} == pkg
    clone = prepare(spec)[2].bundle  # this checkout's bundle for the same spec
    assert bundle["sha256"] == clone.sha256 and bundle["files"] == clone.files

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        import boto3

        s3 = boto3.client(
            "s3",
            region_name=REGION,
            endpoint_url=url,
            aws_access_key_id="AKIAFAKEBSMTEST12345",
            aws_secret_access_key="fake",
        )
        s3.create_bucket(Bucket=BUCKET)
        real = _bsm(
            venv, ["submit", "spec.yaml", "-o", "json"], empty, {**env, "AWS_ENDPOINT_URL": url}
        )
        assert real.returncode == 0, real.stderr
        job = json.loads(real.stdout)
        assert job["created"] and job["bundle_sha256"] == clone.sha256
        key = job["bundle_s3_uri"].split(f"s3://{BUCKET}/", 1)[1]
        uploaded = _members(s3.get_object(Bucket=BUCKET, Key=key)["Body"].read())
    finally:
        server.stop()
    ours = {n for n in uploaded if n.startswith("blackwell_sm/")}
    assert ours == pkg  # nothing a wheel would not hold, nothing it holds left out
    assert set(uploaded) - ours == {"plan.json"} | {n for n in uploaded if n.startswith("wheels/")}
    assert b"AWS_SECRET_ACCESS_KEY=planted" not in b"".join(uploaded.values())
    assert list(empty.iterdir()) == [empty / "spec.yaml"]  # nothing written where it ran

    # an installed file edited after the install: refused by name, nothing built from it
    site = Path(where.strip()).parent
    target = site / "hardware.py"
    original = target.read_bytes()
    target.write_bytes(original + b"\n# edited\n")
    try:
        edited = _bsm(venv, ["submit", "spec.yaml", "--dry-run", "-o", "json"], empty, env)
    finally:
        target.write_bytes(original)
    assert edited.returncode == 1 and "Traceback" not in edited.stderr
    error = json.loads(edited.stdout)["error"]
    assert error["code"] == "bundle" and str(target) in error["message"]


def test_a_wheel_install_inits_and_plans_without_a_clone(venv, tmp_path):
    """Issue 21: `bsm init llama-3.1-70b > s.yaml && bsm plan s.yaml` from an empty folder: the
    templates come from the installed package's data."""
    empty = tmp_path / "empty"
    empty.mkdir()
    env = _env(tmp_path)
    init = _bsm(venv, ["init", "llama-3.1-70b"], empty, env)
    assert init.returncode == 0, init.stderr
    (empty / "s.yaml").write_text(init.stdout)
    plan = _bsm(venv, ["plan", "s.yaml", "-o", "json"], empty, env)
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["model"]["name"] == "llama-3.1-70b"
    presets = _bsm(venv, ["presets", "-o", "json"], empty, env)
    assert presets.returncode == 0 and "llama-3.1-70b" in presets.stdout


def test_a_package_folder_the_build_does_not_list_is_refused(tmp_path):
    """A new subpackage left out of `[tool.setuptools] packages` would be missing from the wheel
    (the packages are listed, not found): the bundle rule refuses that checkout, naming it."""
    from blackwell_sm.errors import BsmError
    from blackwell_sm.job.package_files import package_files

    shutil.copy(REPO / "pyproject.toml", tmp_path)
    for folder in ("blackwell_sm", "entrypoints", "templates"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("*.pyc"))
    assert len(package_files(tmp_path / "blackwell_sm").files) > 100  # as listed: accepted
    (tmp_path / "blackwell_sm" / "newpkg").mkdir()
    (tmp_path / "blackwell_sm" / "newpkg" / "__init__.py").write_text("")
    with pytest.raises(BsmError, match=r"packages does not list \(blackwell_sm\.newpkg\)"):
        package_files(tmp_path / "blackwell_sm")
