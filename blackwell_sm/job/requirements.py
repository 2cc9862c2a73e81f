"""What the container needs to run a spec as planned: the requirements (checked against the
image, carried as wheels or not), the carried wheels and the wheelhouse the bundle holds. Pure:
`job/wheels.py` fetches and caches the wheels these name."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.job.images import ImageTarget, image_target
from blackwell_sm.planner.precision import is_low
from blackwell_sm.spec.trackers import tracker_packages

if TYPE_CHECKING:
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.spec.run import RunSpec

PYDANTIC = ">=2.6,<3"  # the same floor as pyproject's dependency (a test checks)
SAFETENSORS = ">=0.4"
TORCH_FLOOR = "2.6"  # FSDP2's public fully_shard
TORCH_FLOOR_SM100 = "2.7"  # B200/B300 (sm_100/sm_103) need a CUDA >= 12.8 build
MANIFEST_VERSION = 1


class Requirement(BaseModel):
    """One package the container needs: checked against the image, carried or not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    spec: str = Field("", description="Comma list of >=, >, <=, <, ==, != clauses; '' = any.")
    why: str
    carried: bool = Field(description="The bundle carries its wheels; else the image must have it.")

    @property
    def pip_spec(self) -> str:
        return self.name + self.spec


class CarriedWheel(BaseModel):
    """A wheel in the bundle's wheels/ folder."""

    model_config = ConfigDict(extra="forbid")

    file: str
    project: str
    version: str
    sha256: str
    size_bytes: int
    needed_by: list[str] = Field(description="The carried requirements whose install uses it.")
    path: str = Field(exclude=True, repr=False, description="The cached file on this machine.")


class Wheelhouse(BaseModel):
    """What the bundle carries for its container: requirements, target and wheels."""

    model_config = ConfigDict(extra="forbid")

    target: ImageTarget
    requirements: list[Requirement]
    wheels: list[CarriedWheel]

    @property
    def size_bytes(self) -> int:
        return sum(w.size_bytes for w in self.wheels)

    def manifest(self) -> dict:
        """wheels/manifest.json: what the entrypoints' bootstrap.py reads (stdlib JSON only)."""
        return {
            "version": MANIFEST_VERSION,
            "target": self.target.model_dump(mode="json"),
            "requirements": [r.model_dump(mode="json") for r in self.requirements],
            "wheels": [w.model_dump(mode="json") for w in self.wheels],
        }


def container_requirements(
    target: ImageTarget,
    *,
    precision: str = "bf16",
    export_model: bool = False,
    sm100: bool = False,
    extra: tuple[str, ...] | list[str] = (),
    trackers: Sequence[tuple[str, str, str]] = (),
) -> list[Requirement]:
    """What the container needs for a run of this kind on `target` (pure)."""
    floor = TORCH_FLOOR_SM100 if sm100 else TORCH_FLOOR
    torch_why = "FSDP2 (fully_shard)" + (", B200/B300 kernels (sm_100)" if sm100 else "")
    torch_spec = f">={floor}"
    reqs = [
        Requirement(
            name="pydantic", spec=PYDANTIC, why="the plan and launcher models", carried=True
        )
    ]
    if is_low(precision):
        reqs.append(
            Requirement(
                name="torchao",
                spec=target.torchao,
                carried=True,
                why=f"{precision} training (torchao float8/MX linears)",
            )
        )
        clauses = torch_spec.split(",")
        torch_spec = ",".join(
            clauses + [c for c in target.torchao_torch.split(",") if c not in clauses]
        )
        torch_why += f"; torchao{target.torchao} is built for torch{target.torchao_torch}"
    if export_model:
        reqs.append(
            Requirement(
                name="safetensors",
                spec=SAFETENSORS,
                carried=True,
                why="the Hugging Face export at the end",
            )
        )
    reqs += [Requirement(name=n, spec=v, carried=True, why=why) for n, v, why in trackers]
    reqs.append(Requirement(name="torch", spec=torch_spec, why=torch_why, carried=False))
    reqs.append(Requirement(name="numpy", why="token data and checkpoints", carried=False))
    for raw in extra:
        m = re.match(r"^\s*([A-Za-z0-9._-]+)\s*(.*)$", raw)
        assert m is not None  # JobSpec validated the form
        reqs.append(
            Requirement(
                name=m[1],
                spec=re.sub(r"\s+", "", m[2]),
                carried=True,
                why="job.container_requirements",
            )
        )
    return reqs


def requirements_for(
    spec: RunSpec, plan: Plan, also: Sequence[Plan] = ()
) -> tuple[ImageTarget, list[Requirement], list[str]]:
    """The image target, the requirements and any warning for `spec` run as `plan` (pure).

    `also`: the other instance preferences' plans; the bundle serves them all, so it needs
    torchao if any plan trains in fp8/mxfp8 and the sm_100 torch floor if any runs on B200/B300.
    """
    from blackwell_sm.hardware import get_instance

    job = spec.job
    target, warning = image_target(job.image_uri if job else None)
    every = [plan, *also]
    ccs = [get_instance(p.instance.type).gpu.compute_capability for p in every]
    lowp = [p.config.precision for p in every if is_low(p.config.precision)]
    reqs = container_requirements(
        target,
        precision=lowp[0] if lowp else plan.config.precision,
        export_model=spec.training.export_model,
        sm100=any(cc is not None and cc >= (10, 0) for cc in ccs),
        extra=job.container_requirements if job else (),
        trackers=tracker_packages(spec.training.report_to, spec.training.mlflow),
    )
    return target, reqs, [warning] if warning else []
