"""The bundle carries the container's dependencies (issue 18): wheels for the image's Python,
pip's resolver accepts them offline, and the stdlib-only bootstrap installs only what a bare
image lacks before the launcher starts, or writes output/failure naming what is wrong.

Network: the wheels are downloaded once per machine into the wheel cache
(`blackwell_sm.job.wheels.cache_dir()`); later runs read the cache and need no network."""

from __future__ import annotations

import importlib.metadata as md
import io
import json
import os
import platform
import re
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

import pytest
from aws_support import plan_for, run_spec
from cli_support import capture

from blackwell_sm.entrypoints import bootstrap
from blackwell_sm.job.bundle import build_bundle
from blackwell_sm.job.images import MANYLINUX_X86_64, PINNED_TARGET, TARGETS, ImageTarget
from blackwell_sm.job.request import CONTAINER_COMMAND, build_job_request
from blackwell_sm.job.requirements import PYDANTIC, container_requirements
from blackwell_sm.job.wheels import fetch_for, fetch_wheels, write_folder

ROOT = Path(__file__).resolve().parents[1]
LINUX_X86 = sys.platform == "linux" and platform.machine() == "x86_64"
needs_linux_x86 = pytest.mark.skipif(not LINUX_X86, reason="wheels here are manylinux x86_64")
#: Downloads the container's wheels from PyPI on a cold cache: not in `make test`
#: (`make test-network` runs these; the cache then serves them offline).
network = pytest.mark.network
DEAD_NETWORK = {  # any attempt to reach an index fails at once
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "PIP_INDEX_URL": "http://127.0.0.1:9/simple",
    "PIP_CONFIG_FILE": os.devnull,
}


def test_version_ranges_compare_release_numbers():
    s = bootstrap.satisfies
    assert s("2.8.0", ">=2.7") and s("2.8.0", ">=2.8,<2.9") and not s("2.9.1", ">=2.8,<2.9")
    assert s("2.8.0a0+5228986c39.nv25.06", ">=2.8")  # NVIDIA's builds count as the release
    assert s("2.11.0+cu130", ">=2.11") and not s("2.5.1", ">=2.6") and s("1.0", "")
    assert s("0.13.0", "==0.13.0") and s("0.13", "==0.13.0") and not s("0.13.1", "==0.13.0")
    with pytest.raises(ValueError, match="unsupported"):
        s("1.0", "~=1.0")


def test_pydantic_floor_is_pyprojects():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    floor = next(d for d in deps if d.startswith("pydantic"))
    assert floor.removeprefix("pydantic") in PYDANTIC


def test_requirements_follow_the_plan():
    bf16 = container_requirements(PINNED_TARGET, sm100=True)
    assert [r.name for r in bf16 if r.carried] == ["pydantic"]
    assert {r.name for r in bf16} >= {"torch", "numpy"} and "click" not in {r.name for r in bf16}
    torch = next(r for r in bf16 if r.name == "torch")
    assert torch.spec == ">=2.7" and not torch.carried
    fp8 = container_requirements(PINNED_TARGET, precision="fp8", export_model=True)
    carried = {r.name: r.spec for r in fp8 if r.carried}
    assert carried == {"pydantic": PYDANTIC, "torchao": "==0.13.0", "safetensors": ">=0.4"}
    assert next(r for r in fp8 if r.name == "torch").spec == ">=2.6,>=2.8,<2.9"


@network
@needs_linux_x86
@pytest.mark.parametrize("name", sorted(TARGETS))
def test_each_targets_wheels_pass_pips_offline_resolver(name, tmp_path):
    """The pinned SageMaker image and the lent H200 (the GPU check's wheels)."""
    target = TARGETS[name]
    reqs = container_requirements(target, precision="fp8", export_model=True)
    house = fetch_wheels(reqs, target)
    wheels = write_folder(house, tmp_path)
    assert house.size_bytes < 16 * 2**20
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--no-index",
        "--find-links",
        str(wheels),
        "--python-version",
        target.python,
        "--implementation",
        "cp",
        *[a for p in MANYLINUX_X86_64 for a in ("--platform", p)],
        "--only-binary=:all:",
        "--target",
        str(tmp_path / "t"),
        "--report",
        "-",
        "--quiet",
        *[r.pip_spec for r in reqs if r.carried],
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **DEAD_NETWORK})
    assert out.returncode == 0, out.stderr
    got = {
        i["metadata"]["name"].lower().replace("_", "-") for i in json.loads(out.stdout)["install"]
    }
    assert got == {w.project for w in house.wheels}
    assert {
        "pydantic",
        "pydantic-core",
        "annotated-types",
        "typing-inspection",
        "torchao",
        "safetensors",
    } <= got and "torch" not in got
    manifest = json.loads((wheels / "manifest.json").read_text())
    assert manifest["target"]["python"] == "3.12" == target.python
    assert next(w for w in house.wheels if w.project == "pydantic-core").needed_by == ["pydantic"]


def _image_shim(dest: Path) -> Path:
    """A folder of links to exactly what the image brings: torch with its dependency closure,
    numpy and pip (each package and its .dist-info, so importlib.metadata sees them too)."""
    dest.mkdir()
    todo, seen = ["torch", "numpy", "pip"], set()
    while todo:
        name = todo.pop()
        dist = md.distribution(name)
        key = dist.metadata["Name"].lower()
        if key in seen:
            continue
        seen.add(key)
        for f in dist.files or []:
            top = f.parts[0]
            if top != ".." and not (dest / top).exists() and (f.locate().parents[0]).exists():
                src = Path(dist.locate_file(top))
                if src.exists() and not top.endswith(".pth"):
                    (dest / top).symlink_to(src)
        for req in dist.requires or []:
            if "extra ==" not in req:
                todo.append(re.match(r"[A-Za-z0-9._-]+", req)[0])
    return dest


@pytest.fixture(scope="module")
def bare_image(tmp_path_factory):
    """A fresh venv of this Python with the image's packages only (no pydantic, PyYAML, click).

    `venv --without-pip` takes well under a second; a .pth file puts the shim folder on its
    path. Not `--system-site-packages`: that would show the dev venv's pydantic too."""
    if not LINUX_X86:
        pytest.skip("wheels here are manylinux x86_64")
    base = tmp_path_factory.mktemp("image")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    shim = _image_shim(base / "shim")
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "image.pth").write_text(str(shim) + "\n")
    py = venv / "bin" / "python"
    probe = "import importlib.util as u; print([u.find_spec(m) is not None for m in "
    probe += "('torch', 'numpy', 'pip', 'pydantic', 'yaml', 'click', 'rich')])"
    seen = subprocess.run([py, "-c", probe], capture_output=True, text=True, env=_clean_env())
    assert seen.stdout.strip() == "[True, True, True, False, False, False, False]", seen.stderr
    return venv


@pytest.fixture(scope="module")
def local_house():
    """The wheels for this machine's Python (the bare image's)."""
    py = f"{sys.version_info.major}.{sys.version_info.minor}"
    target = ImageTarget(
        name="this-machine",
        python=py,
        platforms=MANYLINUX_X86_64,
        torch=md.version("torch"),
        torchao="==" + md.version("torchao"),
        torchao_torch=">=2.0",
        source="tests",
    )
    return fetch_wheels(container_requirements(target), target)


def _clean_env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "BSM_", "AWS_"))}
    return {**env, **DEAD_NETWORK, **extra}


def _opt_ml(tmp_path: Path, bundle: bytes) -> Path:
    opt_ml = tmp_path / "opt" / "ml"
    (opt_ml / "input" / "data" / "code").mkdir(parents=True)
    (opt_ml / "input" / "data" / "code" / "bundle.tar.gz").write_bytes(bundle)
    (opt_ml / "input" / "config").mkdir(parents=True)
    (opt_ml / "input" / "config" / "resourceconfig.json").write_text(
        json.dumps(
            {
                "current_host": "algo-1",
                "hosts": ["algo-1", "algo-2"],
                "network_interface_name": "eth0",
            }
        )
    )
    return opt_ml


def _container(venv: Path, opt_ml: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    """The request's ContainerEntrypoint command, with the bare venv's python as `python`."""
    env = _clean_env(BSM_OPT_ML=str(opt_ml))
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    cmd = ["bash", "-c", CONTAINER_COMMAND + " --dry-run"]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@network
def test_bootstrap_installs_what_a_bare_image_lacks_then_the_launcher_starts(
    bare_image, local_house, tmp_path
):
    plan = plan_for(run_spec())
    opt_ml = _opt_ml(tmp_path, build_bundle(plan.to_json(), local_house).data)
    out = _container(bare_image, opt_ml, tmp_path)
    assert out.returncode == 0, out.stderr
    launch = json.loads(out.stdout)  # the launcher's --dry-run: it imported pydantic and ran
    assert launch["torchrun"][launch["torchrun"].index("-m", 3) + 1] == "blackwell_sm.train.main"
    site = opt_ml / "code" / bootstrap.SITE_DIR
    assert (site / "pydantic").is_dir() and not (site / "torch").exists()
    assert "installing the carried wheel" in out.stderr and "torch " in out.stderr
    assert str(site) in launch["env"]["PYTHONPATH"]  # torchrun's workers see it too
    assert not (opt_ml / "output" / "failure").exists()
    # The worker's modules import in the bare image with what was installed: no click, PyYAML
    # or rich anywhere in the container's import graph.
    code = opt_ml / "code"
    probe = (
        "import sys, blackwell_sm.train.main, blackwell_sm.train.loop, blackwell_sm.train.export; "
        "bad = [m for m in ('click', 'yaml', 'rich', 'boto3') if m in sys.modules]; "
        "assert not bad, bad; print(sys.modules['pydantic'].__file__)"
    )
    env = _clean_env(PYTHONPATH=f"{code}{os.pathsep}{site}")
    seen = capture([bare_image / "bin" / "python", "-c", probe], cwd=code, env=env, timeout=120)
    assert seen.returncode == 0, seen.stderr[-2000:]
    assert seen.stdout.startswith(str(site))


@network
def test_a_missing_wheel_fails_with_a_clear_failure_file(bare_image, local_house, tmp_path):
    plan = plan_for(run_spec())
    full = build_bundle(plan.to_json(), local_house).data
    # The manifest names pydantic-core's wheel, the archive lacks it.
    opt_ml = _opt_ml(tmp_path, _without_member(full, "pydantic_core"))
    out = _container(bare_image, opt_ml, tmp_path)
    assert out.returncode == 1
    failure = (opt_ml / "output" / "failure").read_text()
    assert failure.startswith("bootstrap:") and "lacks the wheel pydantic_core" in failure
    assert "pydantic>=2.6,<3" in failure
    # A bundle built without wheels: the gap is named, not a traceback at the first import.
    opt_ml = _opt_ml(
        tmp_path / "b",
        build_bundle(plan.to_json(), local_house.model_copy(update={"wheels": []})).data,
    )
    assert _container(bare_image, opt_ml, tmp_path / "b").returncode == 1
    reason = (opt_ml / "output" / "failure").read_text()
    assert "the image lacks pydantic>=2.6,<3 and the bundle carries no wheel" in reason


def _without_member(bundle: bytes, fragment: str) -> bytes:
    buf = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(bundle), mode="r:gz") as src,
        tarfile.open(fileobj=buf, mode="w:gz") as dst,
    ):
        for m in src.getmembers():
            if fragment not in m.name:
                dst.addfile(m, src.extractfile(m))
    return buf.getvalue()


def test_an_image_torch_older_than_the_plan_needs_is_named(tmp_path):
    have = md.version("torch")
    manifest = {
        "target": {"python": "3.12"},
        "wheels": [],
        "requirements": [
            {"name": "torch", "spec": ">=99", "why": "sm_200 kernels", "carried": False}
        ],
    }
    (tmp_path / "wheels").mkdir()
    (tmp_path / "wheels" / "manifest.json").write_text(json.dumps(manifest))
    failure = tmp_path / "output" / "failure"
    with pytest.raises(SystemExit):
        bootstrap.ensure(tmp_path, failure=failure)
    text = failure.read_text()
    assert f"torch {have}" in text and "torch>=99" in text and "sm_200 kernels" in text


@network
@needs_linux_x86
def test_the_job_bundle_carries_the_pinned_images_wheels_and_says_why():
    spec = run_spec()
    plan = plan_for(spec)
    jr = build_job_request(spec, plan, wheelhouse=fetch_for(spec, plan))
    b = jr.bundle
    assert b.target == PINNED_TARGET.name and "wheels/manifest.json" in b.files
    assert {w.project for w in b.carried} >= {"pydantic", "pydantic-core", "safetensors"}
    assert all(f"wheels/{w.file}" in b.files and w.needed_by for w in b.carried)
    assert b.wheels_bytes == sum(w.size_bytes for w in b.carried) and b.size_bytes > 10**6
    dumped = b.model_dump(mode="json")
    assert "path" not in dumped["carried"][0] and dumped["requirements"][0]["why"]
    assert not any("carries no wheels" in w for w in jr.warnings)
    bare = build_job_request(spec, plan)
    assert any("carries no wheels" in w for w in bare.warnings) and not bare.bundle.carried


@network
@needs_linux_x86
def test_dry_run_lists_what_the_bundle_carries_why_and_its_size():
    from click.testing import CliRunner

    from blackwell_sm.cli import cli

    tpl = str(ROOT / "templates" / "llama-3.2-1b.yaml")
    text = CliRunner().invoke(cli, ["submit", tpl, "--dry-run"])
    assert text.exit_code == 0, text.output
    assert "# container requirements (wheels for sagemaker-pytorch-2.8):" in text.output
    assert "pydantic>=2.6,<3: carried; the plan and launcher models" in text.output
    assert re.search(r"# carried wheels: \d+, \d+\.\d\d MiB", text.output)
    out = CliRunner().invoke(cli, ["submit", tpl, "--dry-run", "--output", "json"])
    bundle = json.loads(out.stdout)["bundle"]
    assert bundle["wheels_bytes"] > 0 and bundle["size_bytes"] > bundle["wheels_bytes"] // 2
    assert {w["project"] for w in bundle["carried"]} >= {"pydantic", "pydantic-core"}


def test_spec_container_requirements_are_checked_and_carried():
    from blackwell_sm.errors import SpecError
    from blackwell_sm.job.requirements import requirements_for

    spec = run_spec(container_requirements=["sentencepiece>=0.2, <1", "einops"])
    _, reqs, warnings = requirements_for(spec, plan_for(spec))
    extra = [r for r in reqs if r.why == "job.container_requirements"]
    assert [(r.name, r.spec, r.carried) for r in extra] == [
        ("sentencepiece", ">=0.2,<1", True),
        ("einops", "", True),
    ]
    assert warnings == []
    for bad in ["torch>=2.9", "pkg~=1.0", "pkg>=1.0rc1", "git+https://x/y"]:
        with pytest.raises(SpecError, match=r"job\.container_requirements"):
            run_spec(container_requirements=[bad])
    _, _, warned = requirements_for(
        run_spec(image_uri="123456789012.dkr.ecr.us-east-1.amazonaws.com/mine:1"), plan_for(spec)
    )
    assert "not in the image table" in warned[0]


def test_a_source_checkout_without_manifest_is_said_and_not_checked(tmp_path, capfd):
    bootstrap.ensure(tmp_path, failure=tmp_path / "failure")
    assert "not a bsm code bundle, nothing checked" in capfd.readouterr().err
    assert not (tmp_path / "failure").exists()
