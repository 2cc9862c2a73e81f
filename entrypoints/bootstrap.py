"""Container bootstrap: make the image able to run the bundle, before anything of ours is imported.

Standard library only (it runs on an image we have not checked). The code bundle carries
`wheels/manifest.json` (written by `blackwell_sm.job.wheels`) and the wheels it names. For each
requirement in the manifest this

1. reads the image's installed version with `importlib.metadata` and checks the version range;
2. if it is missing or out of range and the bundle carries it: installs it, and only it, with
   `pip install --no-index --find-links wheels/ --only-binary=:all: --target SITE`, puts SITE first
   on `sys.path` and on `PYTHONPATH` (so torchrun's workers see it too), and checks again;
3. if it is not carried (torch, numpy: the image's own) or cannot be installed: writes the reason,
   naming the package, the version found and the range needed, to `output/failure` (SageMaker's
   FailureReason) and exits 1.

Nothing here reaches the network (`--no-index`), and torch is never installed or replaced. A
folder without a manifest (a source checkout run directly) is said so on stderr and not checked.
Versions compare on their release numbers (`2.8.0a0+nv25.06` counts as 2.8.0); a range is a comma
list of `>=, >, <=, <, ==, !=` clauses, which the client side checks when it writes the manifest.

    python blackwell_sm/entrypoints/bootstrap.py --root BUNDLE [--site DIR] [--failure FILE] [-- CMD ...]
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import importlib.metadata as md
import json
import os
import re
import subprocess
import sys
from pathlib import Path

MANIFEST = "wheels/manifest.json"
SITE_DIR = ".bsm-site"
FAILURE_LIMIT = 1024  # SageMaker keeps the first 1024 characters of output/failure
LOG = "[bsm-bootstrap]"
NEVER_INSTALLED = frozenset({"torch"})
_CLAUSE = re.compile(r"^\s*(==|!=|>=|<=|>|<)\s*(\d+(?:\.\d+)*)\s*$")
_RELEASE = re.compile(r"^\s*v?(\d+(?:\.\d+)*)")


class BootstrapError(Exception):
    """Why the bundle cannot run on this image (the text goes to output/failure)."""


def release(version: str) -> tuple[int, ...]:
    """The release numbers of a version string, without trailing zeros ('2.8.0a0+x' -> (2, 8))."""
    m = _RELEASE.match(version)
    if not m:
        raise ValueError(f"not a version: {version!r}")
    parts = [int(p) for p in m[1].split(".")]
    while len(parts) > 1 and parts[-1] == 0:
        parts.pop()
    return tuple(parts)


def satisfies(version: str, spec: str) -> bool:
    """Whether `version` is inside `spec` ('' or a comma list of simple clauses)."""
    have = release(version)
    for clause in filter(None, (c.strip() for c in spec.split(","))):
        m = _CLAUSE.match(clause)
        if not m:
            raise ValueError(f"unsupported version clause {clause!r} (use >=, >, <=, <, ==, !=)")
        op, want = m[1], release(m[2])
        ok = {
            "==": have == want,
            "!=": have != want,
            ">=": have >= want,
            "<=": have <= want,
            ">": have > want,
            "<": have < want,
        }[op]
        if not ok:
            return False
    return True


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def installed_version(name: str) -> str | None:
    try:
        return md.version(name)
    except md.PackageNotFoundError:
        return None


def _say(msg: str) -> None:
    print(f"{LOG} {msg}", file=sys.stderr, flush=True)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _label(req: dict) -> str:
    return f"{req['name']}{req.get('spec') or ''}"


def plan_installs(manifest: dict) -> list[dict]:
    """The carried requirements the image lacks; BootstrapError for those it must have."""
    todo, problems = [], []
    for req in manifest["requirements"]:
        have = installed_version(req["name"])
        if have is not None and satisfies(have, req.get("spec", "")):
            _say(f"{req['name']} {have}: the image's (needs {req.get('spec') or 'any'})")
            continue
        found = f"the image has {req['name']} {have}" if have else f"the image has no {req['name']}"
        if not req.get("carried") or req["name"].lower() in NEVER_INSTALLED:
            problems.append(
                f"{_label(req)} is needed ({req.get('why', '')}) but {found}, and the bundle "
                "does not carry it: use an image that provides it (job.image_uri)"
            )
        else:
            _say(f"{_label(req)}: {found}; installing the carried wheel")
            todo.append(req)
    if problems:
        raise BootstrapError("; ".join(problems))
    return todo


def install(manifest: dict, todo: list[dict], wheels: Path, site: Path) -> None:
    """pip-install `todo` from the carried wheels only, into `site`, and check the result."""
    want_py = manifest["target"]["python"]
    have_py = f"{sys.version_info.major}.{sys.version_info.minor}"
    names = ", ".join(_label(r) for r in todo)
    if want_py != have_py:
        raise BootstrapError(
            f"cannot install {names}: the bundle's wheels are for Python {want_py} but this image "
            f"runs Python {have_py} (set the image's Python in the image table or use an image "
            "that has these packages)"
        )
    carried = {_canonical(w["project"]) for w in manifest["wheels"]}
    lacking = [_label(r) for r in todo if _canonical(r["name"]) not in carried]
    if lacking:
        raise BootstrapError(
            f"the image lacks {', '.join(lacking)} and the bundle carries no wheel for it "
            "(was it built without fetching wheels? see the dry run's warnings)"
        )
    for w in manifest["wheels"]:
        path = wheels / w["file"]
        if not path.is_file():
            raise BootstrapError(
                f"cannot install {names}: the bundle lacks the wheel {w['file']} "
                f"({w['project']} {w['version']}) that its manifest lists"
            )
        if _sha256(path) != w["sha256"]:
            raise BootstrapError(f"the carried wheel {w['file']} does not match its sha256")
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--no-index",
        "--find-links",
        str(wheels),
        "--only-binary=:all:",
        "--target",
        str(site),
        "--disable-pip-version-check",
        "--no-input",
        "--quiet",
        *(_label(r) for r in todo),
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        tail = " ".join((out.stderr or out.stdout).split())[-500:]
        listed = ", ".join(f"{w['project']} {w['version']}" for w in manifest["wheels"])
        raise BootstrapError(
            f"pip could not install {names} from the carried wheels ({listed or 'none'}): {tail}"
        )
    if (site / "torch").exists():
        raise BootstrapError(f"installing {names} pulled in torch; the image's torch is kept")
    activate(site)
    bad = []
    for req in todo:
        have = installed_version(req["name"])
        if have is None or not satisfies(have, req.get("spec", "")):
            bad.append(f"{_label(req)} (found {have or 'none'} after installing)")
    if bad:
        raise BootstrapError("installed but still not usable: " + ", ".join(bad))
    _say(f"installed {names} into {site}")


def activate(site: Path) -> None:
    """Put `site` first on sys.path and PYTHONPATH (child processes inherit it)."""
    sys.path.insert(0, str(site))
    importlib.invalidate_caches()
    pp = os.environ.get("PYTHONPATH", "")
    os.environ["PYTHONPATH"] = str(site) + (os.pathsep + pp if pp else "")


def ensure(root: Path, *, site: Path | None = None, failure: Path | None = None) -> None:
    """Check and complete the image for the bundle at `root`; on failure write `failure`, exit 1."""
    try:
        manifest_path = root / MANIFEST
        if not manifest_path.is_file():
            # A source checkout run directly (tests, run-local); bsm's bundles always have one.
            _say(f"no {MANIFEST} under {root}: not a bsm code bundle, nothing checked")
            return
        manifest = json.loads(manifest_path.read_text())
        todo = plan_installs(manifest)
        if todo:
            install(manifest, todo, manifest_path.parent, site or root / SITE_DIR)
    except (BootstrapError, ValueError, OSError, KeyError) as e:
        reason = f"bootstrap: {e}"
        _say(reason)
        if failure is not None:
            failure.parent.mkdir(parents=True, exist_ok=True)
            failure.write_text(reason[:FAILURE_LIMIT])
        raise SystemExit(1) from None


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    cmd = argv[argv.index("--") + 1 :] if "--" in argv else []
    own = argv[: argv.index("--")] if "--" in argv else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--root", type=Path, required=True, help="folder holding wheels/manifest.json")
    p.add_argument("--site", type=Path, help=f"install folder (default ROOT/{SITE_DIR})")
    p.add_argument("--failure", type=Path, help="file to write the reason to on failure")
    args = p.parse_args(own)
    ensure(args.root, site=args.site, failure=args.failure)
    if cmd:
        os.execvp(cmd[0], cmd)
    return 0


if __name__ == "__main__":
    sys.exit(main())
