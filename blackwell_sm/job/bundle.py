"""The code bundle: `blackwell_sm/`, `entrypoints/`, `plan.json` (with instance preferences
also `plans/<instance-type>.json`, one per type) and, given a wheelhouse,
`wheels/*.whl` with `wheels/manifest.json` (the container's dependencies, `job/wheels.py`), in a
reproducible tar.gz.

Same inputs give the same bytes (sorted members, zero mtimes/uids, fixed modes, gzip header
without a name or time), so the bundle's sha256 addresses it in S3 and it is uploaded once.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

import blackwell_sm
from blackwell_sm.errors import BsmError
from blackwell_sm.job.names import sha256_hex
from blackwell_sm.job.wheels import CarriedWheel, Requirement, Wheelhouse
from blackwell_sm.opt_ml import plan_file_for

__all__ = ["BUNDLE_FILE", "PLAN_FILE", "CodeBundle", "build_bundle", "plan_file_for"]

PACKAGE_DIR = Path(blackwell_sm.__file__).resolve().parent
ENTRYPOINTS_DIR = PACKAGE_DIR.parent / "entrypoints"
BUNDLE_FILE = "bundle.tar.gz"
PLAN_FILE = "plan.json"

_SKIP_DIRS = {"__pycache__", "tests", "test"}
_SKIP_SUFFIXES = {".pyc", ".pyo", ".so", ".egg-info"}


class CodeBundle(BaseModel):
    """A built bundle. `data` is left out of JSON dumps (it is binary)."""

    model_config = ConfigDict(extra="forbid")

    data: bytes = Field(exclude=True, repr=False)
    sha256: str
    size_bytes: int
    files: list[str] = Field(description="Member paths, in archive order.")
    target: str | None = Field(None, description="The image target the wheels are built for.")
    requirements: list[Requirement] = Field(
        default_factory=list, description="What the container's bootstrap checks, and why."
    )
    carried: list[CarriedWheel] = Field(default_factory=list, description="wheels/ members.")
    wheels_bytes: int = Field(0, description="Uncompressed size of the carried wheels.")


def _wanted(rel: Path) -> bool:
    for part in rel.parts:
        if part.startswith(".") or part in _SKIP_DIRS or part.endswith(".egg-info"):
            return False
    return rel.suffix not in _SKIP_SUFFIXES


def _collect(root: Path, arc_root: str) -> list[tuple[str, Path]]:
    out = []
    for path in root.rglob("*"):
        rel = path.relative_to(root)
        if path.is_file() and not path.is_symlink() and _wanted(rel):
            out.append((f"{arc_root}/{rel.as_posix()}", path))
    return sorted(out)


def _member(name: str, size: int, executable: bool = False) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o755 if executable else 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_bundle(
    plan_json: str,
    wheelhouse: Wheelhouse | None = None,
    plans: dict[str, str] | None = None,
) -> CodeBundle:
    """Pack the installed package, the entrypoints, `plan_json`, the per-type `plans` (bundle
    path -> plan JSON) and the wheelhouse (if any)."""
    if not ENTRYPOINTS_DIR.is_dir():
        raise BsmError(
            f"cannot build the code bundle: {ENTRYPOINTS_DIR} is missing",
            hint="install blackwell_sm from a source checkout (pip install -e .) so that "
            "entrypoints/ sits next to the package",
        )
    files = _collect(PACKAGE_DIR, "blackwell_sm") + _collect(ENTRYPOINTS_DIR, "entrypoints")
    raw = io.BytesIO()
    names = []
    # PAX: wheel file names can pass USTAR's 100 characters (charset_normalizer's manylinux
    # wheel, a dependency of the trackers' clients); an extended header carries them.
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, path in files:
            data = path.read_bytes()
            tar.addfile(
                _member(arcname, len(data), path.stat().st_mode & 0o111 != 0), io.BytesIO(data)
            )
            names.append(arcname)
        extra = [(PLAN_FILE, plan_json.encode())]
        extra += [(path, text.encode()) for path, text in sorted((plans or {}).items())]
        if wheelhouse is not None:
            extra += [(f"wheels/{w.file}", Path(w.path).read_bytes()) for w in wheelhouse.wheels]
            manifest = json.dumps(wheelhouse.manifest(), indent=1, sort_keys=True) + "\n"
            extra.append(("wheels/manifest.json", manifest.encode()))
        for arcname, data in extra:
            tar.addfile(_member(arcname, len(data)), io.BytesIO(data))
            names.append(arcname)
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=6) as f:
        f.write(raw.getvalue())
    data = gz.getvalue()
    house = wheelhouse or Wheelhouse.model_construct(target=None, requirements=[], wheels=[])
    return CodeBundle(
        data=data,
        sha256=sha256_hex(data),
        size_bytes=len(data),
        files=names,
        target=wheelhouse.target.name if wheelhouse else None,
        requirements=house.requirements,
        carried=house.wheels,
        wheels_bytes=house.size_bytes,
    )
