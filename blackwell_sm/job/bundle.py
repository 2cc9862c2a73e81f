"""The code bundle: the files a wheel of blackwell_sm holds (`job/package_files.py`; the
container's entrypoint `blackwell_sm/entrypoints/launch.py` is one of them), `plan.json` (with
instance preferences also `plans/<instance-type>.json`, one per type) and, given a wheelhouse,
`wheels/*.whl` with `wheels/manifest.json` (the container's dependencies, `job/wheels.py`), in a
reproducible tar.gz. A wheel install and a clone build the same bundle; nothing else that lies in
the folder (keys, notebooks, logs, data) is ever packed.

Same inputs give the same bytes (sorted members, zero mtimes/uids, fixed modes, gzip header
without a name or time), so the bundle's sha256 addresses it in S3 and it is uploaded once.
Its members add up to at most `MAX_BUNDLE_BYTES` (64 MiB), checked before any file is read: a
larger bundle is refused (exit 2), naming its largest members.
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.job.names import sha256_hex
from blackwell_sm.job.package_files import PackageFiles, package_files
from blackwell_sm.job.requirements import CarriedWheel, Requirement, Wheelhouse
from blackwell_sm.opt_ml import plan_file_for

__all__ = [
    "BUNDLE_FILE",
    "ENTRYPOINT_SCRIPT",
    "MAX_BUNDLE_BYTES",
    "PLAN_FILE",
    "CodeBundle",
    "build_bundle",
    "plan_file_for",
]

BUNDLE_FILE = "bundle.tar.gz"
PLAN_FILE = "plan.json"
ENTRYPOINT_SCRIPT = "blackwell_sm/entrypoints/launch.py"
MAX_BUNDLE_BYTES = 64 * 2**20  # the members' sum; the carried wheels are most of a real one
_LARGEST_SHOWN = 5


class CodeBundle(BaseModel):
    """A built bundle. `data` is left out of JSON dumps (it is binary)."""

    model_config = ConfigDict(extra="forbid")

    data: bytes = Field(exclude=True, repr=False)
    sha256: str
    size_bytes: int
    files: list[str] = Field(description="Member paths, in archive order.")
    sizes: list[int] = Field(
        default_factory=list, description="Each member's uncompressed bytes, in `files` order."
    )
    package_source: str = Field("", description="Where the package's member list came from.")
    target: str | None = Field(None, description="The image target the wheels are built for.")
    requirements: list[Requirement] = Field(
        default_factory=list, description="What the container's bootstrap checks, and why."
    )
    carried: list[CarriedWheel] = Field(default_factory=list, description="wheels/ members.")
    wheels_bytes: int = Field(0, description="Uncompressed size of the carried wheels.")


def _member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    info.mtime = 0
    info.mode = 0o644
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info


def build_bundle(
    plan_json: str,
    wheelhouse: Wheelhouse | None = None,
    plans: dict[str, str] | None = None,
    *,
    package: PackageFiles | None = None,
) -> CodeBundle:
    """Pack the package's wheel files (default: `package_files()`), `plan_json`, the per-type
    `plans` (bundle path -> plan JSON) and the wheelhouse (if any)."""
    package = package or package_files()
    if ENTRYPOINT_SCRIPT not in {f.arcname for f in package.files}:
        raise BsmError(
            f"cannot build the code bundle: {ENTRYPOINT_SCRIPT} is not among the package's "
            f"files ({package.source})",
            code="bundle",
            hint="reinstall blackwell-sm; the container's entrypoint ships inside the package",
        )
    # (name, size, reader): every member is 0644, so a clone and a wheel install (whose file
    # modes differ) build the same bytes; the container runs `python <script>`.
    members: list[tuple[str, int, Callable[[], bytes]]] = [
        (f.arcname, f.size, f.path.read_bytes) for f in package.files
    ]
    extra = [(PLAN_FILE, plan_json.encode())]
    extra += [(path, text.encode()) for path, text in sorted((plans or {}).items())]
    for arcname, data in extra:
        members.append((arcname, len(data), partial(bytes, data)))
    if wheelhouse is not None:
        for w in wheelhouse.wheels:
            path = Path(w.path)
            members.append((f"wheels/{w.file}", path.stat().st_size, path.read_bytes))
        manifest = (json.dumps(wheelhouse.manifest(), indent=1, sort_keys=True) + "\n").encode()
        members.append(("wheels/manifest.json", len(manifest), lambda: manifest))
    _check_size([(name, size) for name, size, _ in members], package.source)

    raw = io.BytesIO()
    # PAX: wheel file names can pass USTAR's 100 characters (charset_normalizer's manylinux
    # wheel, a dependency of the trackers' clients); an extended header carries them.
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for arcname, _size, read in members:
            data = read()
            tar.addfile(_member(arcname, len(data)), io.BytesIO(data))
    gz = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=gz, mtime=0, compresslevel=6) as f:
        f.write(raw.getvalue())
    data = gz.getvalue()
    return CodeBundle(
        data=data,
        sha256=sha256_hex(data),
        size_bytes=len(data),
        files=[m[0] for m in members],
        sizes=[m[1] for m in members],
        package_source=package.source,
        target=wheelhouse.target.name if wheelhouse else None,
        requirements=wheelhouse.requirements if wheelhouse else [],
        carried=wheelhouse.wheels if wheelhouse else [],
        wheels_bytes=wheelhouse.size_bytes if wheelhouse else 0,
    )


def _check_size(members: list[tuple[str, int]], source: str) -> None:
    total = sum(size for _, size in members)
    if total <= MAX_BUNDLE_BYTES:
        return
    largest = sorted(members, key=lambda m: -m[1])[:_LARGEST_SHOWN]
    raise SpecError(
        f"the code bundle would hold {total / 2**20:.1f} MiB, over its limit of "
        f"{MAX_BUNDLE_BYTES / 2**20:.0f} MiB; largest members: "
        + ", ".join(f"{name} ({size / 2**20:.1f} MiB)" for name, size in largest),
        code="bundle_too_large",
        hint="carry fewer or smaller wheels (job.container_requirements: use an image that has "
        f"them, job.image_uri); the package's files come from {source}",
    )
