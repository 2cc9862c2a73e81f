"""The container's wheels without the network, for tests that need a wheelhouse but do not test
its contents (the spend-once processes, the GPU check's dry run): every carried requirement as a
minimal pure-Python wheel in a local folder, at this interpreter's installed version (or the
pinned one), downloaded by the real `fetch_wheels` (pip, `PIP_NO_INDEX`, `PIP_FIND_LINKS`) into
a cache of the test's own. The real wheels are fetched by `make test-network`'s tests."""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from blackwell_sm.job.requirements import Requirement


def stub_wheel(folder: Path, name: str, version: str) -> Path:
    """A minimal pure-Python wheel pip will download from a local folder."""
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    info = f"{dist}-{version}.dist-info"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{dist}_stub/__init__.py", "")
        z.writestr(f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(
            f"{info}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        )
        z.writestr(f"{info}/RECORD", "")
    return path


def _version(req: Requirement) -> str:
    allowed = SpecifierSet(req.spec)
    try:
        installed = importlib.metadata.version(req.name)
        if Version(installed) in allowed:
            return installed
    except importlib.metadata.PackageNotFoundError:
        pass
    pinned = [s.version for s in allowed if s.operator == "=="]
    floors = [s.version for s in allowed if s.operator == ">="]
    if not pinned and not floors:
        raise AssertionError(f"no version of {req.pip_spec} installed here to stand in for")
    return (pinned or floors)[0]


def every_carried_requirement() -> list[Requirement]:
    """Each requirement a bundle may carry, on the default image and this machine: every
    precision, the export, every tracker (SageMaker's MLflow plugin too)."""
    from blackwell_sm.job.requirements import container_requirements, image_target
    from blackwell_sm.job.wheels import this_machine_target
    from blackwell_sm.spec.trackers import MlflowSpec, tracker_packages

    arn = "arn:aws:sagemaker:us-east-1:123456789012:mlflow-tracking-server/bsm"
    trackers = tracker_packages(["tensorboard", "mlflow", "wandb"], MlflowSpec(tracking_uri=arn))
    out: dict[str, Requirement] = {}
    for target in (image_target(None)[0], this_machine_target()):
        for precision in ("bf16", "fp8"):
            for req in container_requirements(
                target, precision=precision, export_model=True, sm100=True, trackers=trackers
            ):
                out.setdefault(f"{req.name}{req.spec}", req)
    return list(out.values())


def stub_wheel_folder(requirements: Iterable[Requirement], links: Path) -> Path:
    """`links` holding a stub wheel of each carried requirement."""
    links.mkdir(parents=True, exist_ok=True)
    for req in requirements:
        if req.carried:
            stub_wheel(links, req.name, _version(req))
    return links


@contextlib.contextmanager
def offline_pip(requirements: Iterable[Requirement], links: Path) -> Iterator[None]:
    """While inside: pip reads only `links`, which holds a stub of each carried requirement."""
    stub_wheel_folder(requirements, links)
    saved = {k: os.environ.get(k) for k in ("PIP_NO_INDEX", "PIP_FIND_LINKS")}
    os.environ.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(links))
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
