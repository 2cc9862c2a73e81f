"""A job's identity (pure): its name, spec hash, region and checkpoint prefix, decided once
before any capacity is looked up, so that submit can lock the prefix, find the job a rerun
reattaches to and name an `auto` plan; `build_job_request` takes it as decided."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import SpecError
from blackwell_sm.job.names import base_job_name, run_job_name, spec_hash, unique_suffix
from blackwell_sm.planner.preferences import PlanSet
from blackwell_sm.spec.job import JobSpec
from blackwell_sm.spec.run import RunSpec


class JobIdentity(BaseModel):
    """Who a job is: decided once per submit (a `--new` name has a random part)."""

    model_config = ConfigDict(extra="forbid")

    job_name: str
    base_job_name: str = Field(description="bsm-<model>-<hash>: the name a rerun reattaches to.")
    spec_hash: str
    region: str
    checkpoint_s3_uri: str


def job_and_region(spec: RunSpec, region: str | None) -> tuple[JobSpec, str]:
    """The spec's job section and the job's region (job.region, else `region`)."""
    job = spec.job
    if job is None:
        raise SpecError(
            "the spec has no job: section; it is needed to build a SageMaker job",
            field="job",
            hint="add job: {role_arn: ..., s3_prefix: s3://bucket/prefix} (bsm init writes a spec with one)",
        )
    region = job.region or region
    if region is None:
        raise SpecError(
            "no region: set job.region, AWS_REGION or a profile region",
            field="job.region",
        )
    return job, region


def job_identity(
    spec: RunSpec,
    plans: PlanSet,
    *,
    new: bool = False,
    run_index: int = 1,
    region: str | None = None,
) -> JobIdentity:
    """The job's name (`<base>`, `<base>-rN` for the N-th job of a run, or a fresh `--new`
    name), spec hash, region and checkpoint prefix (shared by every job of the spec)."""
    job, region = job_and_region(spec, region)
    digest = spec_hash(spec, plans.primary, plans.others)
    base = base_job_name(spec.model.name, digest)
    return JobIdentity(
        job_name=base + unique_suffix() if new else run_job_name(base, run_index),
        base_job_name=base,
        spec_hash=digest,
        region=region,
        checkpoint_s3_uri=f"{job.checkpoint_prefix}/{base}",
    )
