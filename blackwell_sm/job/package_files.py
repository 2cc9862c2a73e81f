"""The files a wheel of blackwell_sm holds: what the code bundle carries of the package.

Two sources, one answer, never a walk of whatever lies in the folder:

* an installed wheel says it itself: its RECORD lists every file it put under `blackwell_sm/`
  with a sha256. Those files are the members, each checked against its RECORD hash (a file
  edited after the install is refused, naming it);
* a source checkout (or an editable install of one) has no such list, so the build's own
  configuration in its `pyproject.toml` is applied as setuptools applies it: the packages
  `[tool.setuptools] packages` lists, each from its `package-dir` folder (the repository's
  top-level `entrypoints/` and `templates/` are `blackwell_sm/entrypoints/` and
  `blackwell_sm/templates/` in the wheel and the bundle), their `*.py` modules, and the
  `[tool.setuptools.package-data]` patterns (`include-package-data = false`, so nothing else can
  slip in). A key, a notebook, a log or a 200 MB file left in the tree is never a member; a stray
  `.py` file inside a package is, as it would be in a wheel built from that tree; a package
  folder the list leaves out is refused (a wheel would silently lack it).

`tests/test_wheel_install.py` builds the wheel and checks that both sources give the same list.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import tomllib
from pathlib import Path
from typing import Any, NamedTuple

import blackwell_sm
from blackwell_sm.errors import BsmError

DIST = "blackwell-sm"
PACKAGE = "blackwell_sm"
PACKAGE_DIR = Path(blackwell_sm.__file__).resolve().parent


class PackageFile(NamedTuple):
    """One member: its name in the bundle (`blackwell_sm/...`), the file, its size."""

    arcname: str
    path: Path
    size: int


class PackageFiles(NamedTuple):
    files: list[PackageFile]
    source: str  # where the list came from, in words


def package_files(package_dir: Path | None = None) -> PackageFiles:
    """The files a wheel of the package at `package_dir` (default: the one imported) holds."""
    package_dir = (package_dir or PACKAGE_DIR).resolve()
    dist = _wheel_install(package_dir)
    if dist is not None:
        return _from_record(dist, package_dir)
    pyproject = package_dir.parent / "pyproject.toml"
    if pyproject.is_file():
        return _from_pyproject(pyproject, package_dir)
    raise BsmError(
        f"cannot tell which files belong to blackwell_sm at {package_dir}: it is neither an "
        "installed wheel (with a RECORD) nor a source checkout (with pyproject.toml)",
        code="bundle",
        hint="install it with pip (pip install blackwell-sm, or pip install . in a clone)",
    )


# -- an installed wheel -----------------------------------------------------------------------
def _wheel_install(package_dir: Path) -> Any:
    """The installed distribution whose RECORD holds the package imported from `package_dir`."""
    for dist in md.distributions(name=DIST):
        if dist.read_text("RECORD") is None:
            continue  # an egg-info (a checkout's build leftover) lists sources, not an install
        for f in dist.files or ():
            here = f.as_posix() == f"{PACKAGE}/__init__.py"
            if here and Path(str(dist.locate_file(f))).resolve() == package_dir / "__init__.py":
                return dist
    return None


def _record_hash(path: Path) -> str:
    digest = hashlib.sha256(path.read_bytes()).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def _from_record(dist: Any, package_dir: Path) -> PackageFiles:
    out = []
    for f in dist.files or ():
        parts = f.parts
        if parts[0] != PACKAGE or "__pycache__" in parts or f.suffix in (".pyc", ".pyo"):
            continue
        path = package_dir.joinpath(*parts[1:])
        if f.hash is not None and _record_hash(path) != f"{f.hash.mode}={f.hash.value}":
            raise BsmError(
                f"{path} differs from the file the installed wheel put there (its RECORD hash): "
                "the bundle carries only what the wheel holds",
                code="bundle",
                hint="reinstall blackwell-sm (pip install --force-reinstall), or work from a "
                "clone with an editable install (pip install -e .)",
            )
        out.append(PackageFile(f.as_posix(), path, path.stat().st_size))
    version = dist.metadata["Version"]
    return PackageFiles(sorted(out), f"the RECORD of the installed wheel {DIST} {version}")


# -- a source checkout ------------------------------------------------------------------------
def source_folders(pyproject: Path) -> dict[str, Path]:
    """{package: its folder} as `[tool.setuptools]` in `pyproject` builds them: the listed
    `packages`, each in its `package-dir` folder (the longest mapped prefix, as setuptools
    resolves it), else under its parent's. Refuses a configuration it does not mirror, a listed
    package without a folder, and a package folder (one with an `__init__.py`) left unlisted,
    which a wheel would silently leave out."""
    st = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {}).get("setuptools", {})
    packages, dirs = st.get("packages"), st.get("package-dir", {})
    problems = []
    if not (isinstance(packages, list) and all(isinstance(p, str) for p in packages)):
        problems.append("[tool.setuptools] packages must be a list of package names")
        packages = []
    if st.get("include-package-data", True) is not False:
        problems.append("include-package-data must be false")
    folders = {pkg: _folder(pyproject.parent, pkg, dirs) for pkg in packages}
    for pkg, folder in folders.items():
        if not (folder / "__init__.py").is_file():
            problems.append(f"package {pkg}: no {folder}/__init__.py")
            continue
        for d in sorted(p for p in folder.iterdir() if p.is_dir()):
            name = f"{pkg}.{d.name}"
            if (d / "__init__.py").is_file() and "." not in d.name and name not in folders:
                problems.append(f"{d} is a package that packages does not list ({name})")
    if problems:
        raise BsmError(
            f"{pyproject}: the bundle rule mirrors only a plain setuptools layout: "
            + "; ".join(problems),
            code="bundle",
        )
    return folders


def _folder(root: Path, pkg: str, dirs: dict[str, str]) -> Path:
    parts = pkg.split(".")
    for i in range(len(parts), -1, -1):
        mapped = dirs.get(".".join(parts[:i]))
        if mapped is not None:
            return root.joinpath(mapped, *parts[i:])
    return root.joinpath(*parts)


def _from_pyproject(pyproject: Path, package_dir: Path) -> PackageFiles:
    data = tomllib.loads(pyproject.read_text(encoding="utf-8")).get("tool", {})
    data = data.get("setuptools", {}).get("package-data", {})
    members: dict[str, Path] = {}  # arcname (its place in the wheel) -> file
    for pkg, folder in source_folders(pyproject).items():
        if pkg != PACKAGE and not pkg.startswith(PACKAGE + "."):
            continue
        names = {p for p in folder.glob("*.py") if p.is_file()}
        for pattern in [*data.get(pkg, []), *data.get("*", [])]:
            names |= {p for p in folder.glob(pattern) if p.is_file()}
        prefix = pkg.replace(".", "/")
        members |= {f"{prefix}/{p.relative_to(folder).as_posix()}": p for p in names}
    files = [
        PackageFile(arcname, p, p.stat().st_size)
        for arcname, p in sorted(members.items())
        if not p.is_symlink()
    ]
    return PackageFiles(files, f"what a wheel built from {pyproject} holds")
