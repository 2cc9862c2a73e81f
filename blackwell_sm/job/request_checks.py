"""What the request builder checks before it builds anything: a plan made for this spec, the
`init` channel of `training.init_from`, and the data spec's channels (pure)."""

from __future__ import annotations

from blackwell_sm.errors import InfeasiblePlanError, SpecError
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec.job import JobSpec
from blackwell_sm.spec.run import RunSpec

INIT_CHANNEL = "init"  # training.init_from (s3://), mounted with FastFile: read once, lazily


def check_plan_matches(spec: RunSpec, plan: Plan) -> None:
    """The plan is feasible and was made for this spec's instance type and count."""
    if not plan.feasible:
        raise InfeasiblePlanError(
            "refusing to build a job for an infeasible plan",
            plan=plan,
            hint="; ".join(plan.advice) or "see `bsm plan` for what would make it fit",
        )
    if plan.instance.type != spec.compute.instance_type:
        raise SpecError(
            f"the plan is for {plan.instance.type} but compute.instance_type is "
            f"{spec.compute.instance_type}",
            field="compute.instance_type",
            hint="make the plan from this spec (bsm.plan(spec))",
        )
    count = spec.compute.instance_count
    if isinstance(count, int) and count != plan.instance.count:
        raise SpecError(
            f"the plan is for {plan.instance.count} instances but compute.instance_count is "
            f"{count}",
            field="compute.instance_count",
            hint="make the plan from this spec (bsm.plan(spec))",
        )


def check_init_from(spec: RunSpec, job: JobSpec) -> str | None:
    """The S3 URI of `training.init_from` for the `init` channel, or None when it is unset."""
    init = spec.training.init_from
    peft = spec.training.peft
    if peft is not None and peft.init_adapter is not None:
        raise SpecError(
            f"training.peft.init_adapter is a local folder ({peft.init_adapter}); a SageMaker "
            "job cannot read it (an adapter from S3 is not supported yet)",
            field="training.peft.init_adapter",
            hint="continue it with bsm run-local, or unset init_adapter",
        )
    if init is None:
        return None
    if not init.startswith("s3://"):
        raise SpecError(
            f"training.init_from is a local path ({init}); a SageMaker job reads it from S3",
            field="training.init_from",
            hint="upload the folder (aws s3 sync DIR s3://bucket/prefix/) and set "
            "training.init_from: s3://bucket/prefix/",
        )
    if INIT_CHANNEL in job.channels:
        raise SpecError(
            f"job.channels.{INIT_CHANNEL} is reserved for training.init_from",
            field=f"job.channels.{INIT_CHANNEL}",
            hint="rename that channel",
        )
    return init


def check_channels(spec: RunSpec, job: JobSpec) -> None:
    """Every channel the data spec names is one of the job's channels."""
    data = spec.training.data
    if data.source != "channel":
        return
    for role, name in (
        ("train_channel", data.train_channel),
        ("validation_channel", data.validation_channel),
    ):
        if name is not None and name not in job.channels:
            raise SpecError(
                f"training.data.{role} is {name!r} but job.channels has no such channel; "
                f"defined: {', '.join(job.channels) or 'none'}",
                field="job.channels",
                hint=f"add job.channels.{name}.s3_uri: s3://bucket/prefix/of/token/shards",
            )
