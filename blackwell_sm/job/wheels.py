"""The container's Python dependencies: which ones, built for which image, fetched once, cached.

The container imports pydantic (spec, plan and launcher models), numpy and torch; safetensors
when it exports the model; torchao for fp8/mxfp8. It needs neither click, rich nor PyYAML (a test
starts the launcher in a virtualenv without them). torch and numpy are the image's: checked, never
carried. The rest travel as wheels in the code bundle (`wheels/` + `wheels/manifest.json`), and
`blackwell_sm/entrypoints/bootstrap.py` installs, offline, only those the image lacks.

`fetch_wheels` runs `pip download --only-binary=:all: --python-version X --platform ...` for the
image target (`job/images.py`), once: each wheel is stored under its sha256 in the cache
(`$BSM_CACHE_DIR/wheels`, else `$XDG_CACHE_HOME/blackwell_sm/wheels`, else
`~/.cache/blackwell_sm/wheels`) and each resolution under a key of the requirements and target,
so a second build reads the cache and needs no network. Delete the cache to re-resolve.

    python -m blackwell_sm.job.wheels --target lent-h200 --torchao --out .whl   # GPU check
    python -m blackwell_sm.job.wheels --target this-machine --out DIR            # --cpu-dry here
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from blackwell_sm.atomic_write import atomic_open, write_text
from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.job.images import MANYLINUX_X86_64, TARGETS, ImageTarget
from blackwell_sm.job.requirements import (
    MANIFEST_VERSION,
    CarriedWheel,
    Requirement,
    Wheelhouse,
    container_requirements,
    requirements_for,
)

if TYPE_CHECKING:
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.spec.run import RunSpec

# progress(key, done, total, detail): what a display wants to hear (cli/progress.py)
Progress = Callable[..., None]
_NOT_CARRIED = re.compile(r"^(torch|triton|nvidia-.*)$")


def canonical(name: str) -> str:
    """PEP 503 project name: lower case, runs of -_. as one '-'."""
    return re.sub(r"[-_.]+", "-", name).lower()


def fetch_for(
    spec: RunSpec, plan: Plan, also: Sequence[Plan] = (), progress: Progress | None = None
) -> Wheelhouse:
    """The wheelhouse `build_job_request` wants for `spec` run as `plan` (cached download). A
    spec the builder would refuse for its trackers is refused first, before any download."""
    from blackwell_sm.job.native import check_wandb

    check_wandb(spec)
    target, reqs, _ = requirements_for(spec, plan, also)
    return fetch_wheels(reqs, target, progress=progress)


def cache_dir() -> Path:
    """Where wheels and resolutions are cached (see the module docstring)."""
    if os.environ.get("BSM_CACHE_DIR"):
        return Path(os.environ["BSM_CACHE_DIR"]) / "wheels"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "blackwell_sm" / "wheels"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _requires(wheel: Path) -> list[str]:
    """Canonical names of a wheel's unconditional-or-marker Requires-Dist (extras skipped)."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode("utf-8", "replace")
    out = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:") and "extra ==" not in line:
            m = re.match(r"\s*([A-Za-z0-9._-]+)", line.split(":", 1)[1])
            if m:
                out.append(canonical(m[1]))
    return out


def _download(
    specs: list[str], target: ImageTarget, dest: Path, progress: Progress | None = None
) -> None:
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--only-binary=:all:",
        "--python-version",
        target.python,
        "--implementation",
        "cp",
        "--dest",
        str(dest),
        "--disable-pip-version-check",
        "--no-input",
    ]
    for plat in target.platforms:
        cmd += ["--platform", plat]
    if progress is None:
        out = subprocess.run(
            [*cmd, "--quiet", *specs], capture_output=True, text=True, check=False, timeout=900
        )
        code, stderr = out.returncode, out.stderr
    else:
        code, stderr = _pip_with_progress([*cmd, "--progress-bar", "off", *specs], progress)
    if code != 0:
        tail = " ".join(stderr.split())[-600:]
        raise BsmError(
            f"pip download of the container's wheels ({', '.join(specs)}) for Python "
            f"{target.python} {target.platforms[0]} failed: {tail}",
            hint="it needs PyPI (or your pip index) once; later builds read the cache "
            f"({cache_dir()}). Check job.container_requirements names and versions.",
        )


def _pip_with_progress(cmd: list[str], progress: Progress) -> tuple[int, str]:
    """Run pip download, telling `progress("wheels", saved, None, file)` what it fetches."""
    lines: list[str] = []
    saved = 0
    with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as proc:
        watchdog = threading.Timer(900, proc.kill)  # as subprocess.run's timeout
        watchdog.start()
        try:
            for line in proc.stdout or ():
                lines.append(line)
                words = line.split()
                if words[:1] == ["Saved"] or line.startswith("File was already downloaded"):
                    saved += 1
                    progress("wheels", saved, None, Path(words[-1]).name)
                elif words[:1] in (["Collecting"], ["Downloading"]) and len(words) > 1:
                    progress("wheels", saved, None, Path(words[1]).name)
            code = proc.wait()
        finally:
            watchdog.cancel()
    return code, "".join(lines[-40:])


def fetch_wheels(
    requirements: list[Requirement],
    target: ImageTarget,
    *,
    cache: Path | None = None,
    progress: Progress | None = None,
) -> Wheelhouse:
    """Resolve and download the carried requirements' wheels for `target`, through the cache."""
    cache = cache or cache_dir()
    specs = sorted(r.pip_spec for r in requirements if r.carried)
    key_src = {
        "v": MANIFEST_VERSION,
        "specs": specs,
        "python": target.python,
        "platforms": list(target.platforms),
    }
    key = hashlib.sha256(json.dumps(key_src, sort_keys=True).encode()).hexdigest()
    resolution = cache / "resolutions" / f"{key}.json"
    entries = json.loads(resolution.read_text()) if resolution.is_file() else None
    if entries is not None and not all(
        (cache / "blobs" / e["sha256"] / e["file"]).is_file() for e in entries
    ):
        entries = None
    if entries is None:
        entries = []
        with tempfile.TemporaryDirectory(prefix="bsm-wheels-") as tmp:
            if specs:
                _download(specs, target, Path(tmp), progress)
            for f in sorted(Path(tmp).glob("*.whl")):
                sha = _sha256(f)
                blob = cache / "blobs" / sha / f.name
                if not blob.is_file():
                    blob.parent.mkdir(parents=True, exist_ok=True)
                    with f.open("rb") as src, atomic_open(blob, "wb", flag=None) as dst:
                        shutil.copyfileobj(src, dst)
                entries.append({"file": f.name, "sha256": sha, "size": f.stat().st_size})
        resolution.parent.mkdir(parents=True, exist_ok=True)
        write_text(resolution, json.dumps(entries, indent=1), flag=None)
    return _wheelhouse(requirements, target, entries, cache)


def _wheelhouse(
    requirements: list[Requirement], target: ImageTarget, entries: list[dict], cache: Path
) -> Wheelhouse:
    deps: dict[str, list[str]] = {}
    files: dict[str, dict] = {}
    for e in entries:
        path = cache / "blobs" / e["sha256"] / e["file"]
        project = canonical(e["file"].split("-")[0])
        if _NOT_CARRIED.match(project):
            raise SpecError(
                f"the container's requirements pull in {project} ({e['file']}); torch and its "
                "CUDA libraries are the image's and are never carried",
                field="job.container_requirements",
                hint="drop the requirement that depends on torch, or use an image that has it",
            )
        deps[project] = _requires(path)
        files[project] = {
            **e,
            "path": str(path),
            "project": project,
            "version": e["file"].split("-")[1],
        }
    needed_by: dict[str, list[str]] = {p: [] for p in files}
    for req in (r for r in requirements if r.carried):
        seen, stack = set(), [canonical(req.name)]
        while stack:
            p = stack.pop()
            if p in seen or p not in files:
                continue
            seen.add(p)
            needed_by[p].append(req.name)
            stack.extend(deps[p])
    wheels = [
        CarriedWheel(
            file=f["file"],
            project=p,
            version=f["version"],
            sha256=f["sha256"],
            size_bytes=f["size"],
            needed_by=needed_by[p],
            path=f["path"],
        )
        for p, f in sorted(files.items())
    ]
    return Wheelhouse(target=target, requirements=list(requirements), wheels=wheels)


def write_folder(house: Wheelhouse, out: Path) -> Path:
    """Lay `house` out as OUT/wheels/*.whl + OUT/wheels/manifest.json (the bundle's layout)."""
    dest = out / "wheels"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    for w in house.wheels:
        shutil.copyfile(w.path, dest / w.file)
    write_text(dest / "manifest.json", json.dumps(house.manifest(), indent=1) + "\n", flag=None)
    return dest


def this_machine_target() -> ImageTarget:
    """A target for this interpreter (tests, and the GPU check's --cpu-dry); Linux x86_64 only."""
    import importlib.metadata as md
    import platform

    if sys.platform != "linux" or platform.machine() != "x86_64":
        raise BsmError("wheels for this machine: only Linux x86_64 (manylinux) is supported")
    try:
        torchao = "==" + md.version("torchao")
    except md.PackageNotFoundError:
        torchao = ">=0.10"
    return ImageTarget(
        name="this-machine",
        python=f"{sys.version_info.major}.{sys.version_info.minor}",
        platforms=MANYLINUX_X86_64,
        torch=md.version("torch"),
        torchao=torchao,
        torchao_torch=">=2.6",
        source=f"this interpreter ({sys.executable})",
    )


def main(argv: list[str] | None = None) -> int:
    """Prepare a wheels folder for a target (the GPU check carries it; see benchmarks/README)."""
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("--target", choices=[*sorted(TARGETS), "this-machine"], default="lent-h200")
    ap.add_argument("--torchao", action="store_true", help="carry torchao (fp8/mxfp8 runs)")
    ap.add_argument("--export", action="store_true", help="carry safetensors (model export)")
    ap.add_argument("--out", type=Path, required=True, help="folder; OUT/wheels/ is replaced")
    args = ap.parse_args(argv)
    target = this_machine_target() if args.target == "this-machine" else TARGETS[args.target]
    reqs = container_requirements(
        target, precision="fp8" if args.torchao else "bf16", export_model=args.export
    )
    house = fetch_wheels(reqs, target)
    dest = write_folder(house, args.out)
    for w in house.wheels:
        print(f"{w.file}  {w.size_bytes / 2**20:.2f} MiB  for {', '.join(w.needed_by)}")
    print(f"{len(house.wheels)} wheels, {house.size_bytes / 2**20:.2f} MiB in {dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
