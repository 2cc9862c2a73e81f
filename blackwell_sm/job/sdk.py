"""The SageMaker SDK v3 view: a `ModelTrainer` that sends the builder's CreateTrainingJob.

`to_model_trainer(spec)` builds the request with `build_job_request` and configures a
`sagemaker.train.ModelTrainer` from it, member by member as the table of job/sdk_table.py says
(`trainer_args`); a member the table does not list is named in a `SdkViewWarning` and sent by the
hook below, never dropped. Two things ModelTrainer cannot express:

- `AlgorithmSpecification.ContainerEntrypoint`: ModelTrainer sets an entrypoint only together
  with its own `SourceCode` driver (`/bin/bash sm_train.sh`), under which bash is PID 1 and
  SIGTERM never reaches the launcher. The trainer's boto session gets a
  `before-parameter-build.sagemaker.CreateTrainingJob` handler that sets the builder's
  entrypoint (and the table's other HOOK rows: `EnableSageMakerMetricsTimeSeries`, the native
  members TensorBoardOutputConfig, MlflowConfig, ModelPackageConfig, InfraCheckConfig when the
  spec asks for them) on this job's request, and nothing else.
- `TrainingJobName`: ModelTrainer always appends its own `-YYYYmmddHHMMSS` to `base_job_name`,
  so SDK-submitted jobs cannot be found again by name; `bsm submit` reattaches, the SDK cannot.

Both are reported in a `SdkViewWarning`. The SDK is imported here only (it costs ~3 s).
"""

from __future__ import annotations

import copy
import os
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from blackwell_sm.errors import MissingExtraError, SpecError
from blackwell_sm.job.capacity import refuse_preferences
from blackwell_sm.job.request import JobRequest, build_job_request
from blackwell_sm.job.sdk_table import HOOK, TABLE, leaves, set_path, unmapped
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec.run import RunSpec

if TYPE_CHECKING:
    from sagemaker.train import ModelTrainer

# Request fields that the hook sets because ModelTrainer has no way to: the table's HOOK rows.
HOOKED_FIELDS = tuple(r.path for r in TABLE.values() if r.v3 == HOOK)


class SdkViewWarning(UserWarning):
    """What the SageMaker SDK view cannot send exactly as the builder would."""


#: The SDK v3 classes the table builds its arguments with (sagemaker.core.shapes).
SDK_CLASSES = (
    "Channel",
    "CheckpointConfig",
    "Compute",
    "DataSource",
    "MetricDefinition",
    "Networking",
    "OutputDataConfig",
    "RetryStrategy",
    "S3DataSource",
    "StoppingCondition",
    "Tag",
)


def _load(spec: RunSpec | str | Path | dict[str, Any]) -> RunSpec:
    from blackwell_sm.spec import load_spec, parse_spec

    if isinstance(spec, RunSpec):
        return spec
    if isinstance(spec, dict):
        return parse_spec(spec)
    return load_spec(spec)


def refuse_placeholders(req: JobRequest) -> None:
    """SpecError for REPLACE-ME placeholders: checked before the SDK or AWS is called."""
    if req.placeholders:
        raise SpecError(
            "the spec still has REPLACE-ME placeholders: " + ", ".join(req.placeholders),
            field=req.placeholders[0],
            hint="set them to your role ARN and S3 locations (`bsm submit SPEC --dry-run` shows "
            "the request)",
        )


def view_inputs(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None,
    training_plan_arn: str | None,
    view: str,
) -> tuple[RunSpec, Plan]:
    """The spec and plan an SDK view (`view`: its function's name) is built from, after what
    neither view can map is refused: instance preferences, and a training plan given by name
    without its ARN (the job would run on on-demand capacity)."""
    run = _load(spec)
    refuse_preferences(run, view)
    wanted = run.compute.training_plan
    if wanted and not wanted.startswith("arn:") and training_plan_arn is None:
        raise SpecError(
            f"compute.training_plan {wanted!r} is not an ARN, and the job would run on "
            "on-demand capacity without one",
            field="compute.training_plan",
            hint="pass training_plan_arn=... (`bsm plans describe NAME` or `bsm plans search`)",
        )
    if plan is None:
        from blackwell_sm.planner.api import make_plan
        from blackwell_sm.planner.profile import profile_for

        plan = make_plan(run, calibration=profile_for(run))
    return run, plan


def _hook(req: JobRequest, hooked: dict[str, Any]) -> Any:
    """Sets the members ModelTrainer has no argument for, as the builder built them."""

    def hook(params: dict[str, Any], **_: Any) -> None:
        # Only this trainer's jobs: ModelTrainer names them <base_job_name>-<timestamp>.
        if not str(params.get("TrainingJobName", "")).startswith(req.base_job_name):
            return
        for path, value in hooked.items():
            set_path(params, path, copy.deepcopy(value))

    return hook


def _sdk_classes() -> dict[str, Any]:
    """The ModelTrainer config classes by name (the SDK's import costs ~3 s: here only)."""
    try:
        from sagemaker.core.helper.session_helper import Session
        from sagemaker.core.training import configs
        from sagemaker.train import ModelTrainer
    except ImportError as e:
        raise MissingExtraError(e.name or "sagemaker", "the SageMaker SDK view") from None
    return {
        "Session": Session,
        "ModelTrainer": ModelTrainer,
        **{n: getattr(configs, n) for n in SDK_CLASSES},
    }


# ModelTrainer's config-class arguments (the `group` of a `group.name` row of the table).
GROUPS = {
    "compute": "Compute",
    "networking": "Networking",
    "stopping_condition": "StoppingCondition",
    "output_data_config": "OutputDataConfig",
    "checkpoint_config": "CheckpointConfig",
}


def _sdk_value(path: str, value: Any, c: dict[str, Any]) -> Any:
    """A request value as ModelTrainer takes it (its own classes for lists of structures)."""
    if path == "InputDataConfig":
        return [
            c["Channel"](
                channel_name=ch["ChannelName"],
                data_source=c["DataSource"](
                    s3_data_source=c["S3DataSource"](
                        s3_data_type=ch["DataSource"]["S3DataSource"]["S3DataType"],
                        s3_uri=ch["DataSource"]["S3DataSource"]["S3Uri"],
                        s3_data_distribution_type=ch["DataSource"]["S3DataSource"][
                            "S3DataDistributionType"
                        ],
                    )
                ),
                input_mode=ch["InputMode"],
            )
            for ch in value
        ]
    if path == "Tags":
        return [c["Tag"](key=t["Key"], value=t["Value"]) for t in value]
    if path == "AlgorithmSpecification.MetricDefinitions":
        return [c["MetricDefinition"](name=m["Name"], regex=m["Regex"]) for m in value]
    if path == "RetryStrategy.MaximumRetryAttempts":
        return c["RetryStrategy"](maximum_retry_attempts=value)
    return copy.deepcopy(value)


class TrainerArgs(NamedTuple):
    """The request sorted by the table (job/sdk_table.py) into what ModelTrainer is given."""

    kwargs: dict[str, Any]  # ModelTrainer arguments, config classes built
    methods: dict[str, Any]  # with_<x>() -> its argument
    hooked: dict[str, Any]  # request path -> value the hook sets
    unknown: list[str]  # members the table has no row for (hooked too)


def trainer_args(request: dict[str, Any], c: dict[str, Any]) -> TrainerArgs:
    """Each member of `request` where the table's v3 column puts it."""
    kwargs: dict[str, Any] = {}
    groups: dict[str, dict[str, Any]] = {}
    methods: dict[str, Any] = {}
    hooked: dict[str, Any] = {}
    unknown = unmapped(request)
    for path, value in leaves(request):
        target = TABLE[path].v3 if path in TABLE else HOOK
        if target is None:
            continue
        if target == HOOK:
            hooked[path] = value
        elif target.endswith("()"):
            methods[target[:-2]] = _sdk_value(path, value, c)
        elif "." in target:
            group, name = target.split(".")
            groups.setdefault(group, {})[name] = _sdk_value(path, value, c)
        else:
            kwargs[target] = _sdk_value(path, value, c)
    for group, members in groups.items():
        kwargs[group] = c[GROUPS[group]](**members)
    return TrainerArgs(kwargs, methods, hooked, unknown)


def model_trainer_and_request(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
) -> tuple[ModelTrainer, JobRequest]:
    """`to_model_trainer`, also returning the builder's JobRequest it was configured from.

    This module makes no AWS call (`blackwell_sm.aws.sdk` uploads the code bundle afterwards).
    Placeholders are refused before the SDK is imported.
    """
    run, plan = view_inputs(spec, plan, training_plan_arn, "to_model_trainer")
    if sagemaker_session is None:
        import boto3

        region = run.job.region if run.job else None
        boto_session = boto3.Session(region_name=region or os.environ.get("AWS_REGION"))
    else:
        boto_session = sagemaker_session.boto_session
    from blackwell_sm.job.wheels import fetch_for

    req = build_job_request(
        run,
        plan,
        training_plan_arn=training_plan_arn,
        region=boto_session.region_name,
        wheelhouse=fetch_for(run, plan),
    )
    refuse_placeholders(req)
    c = _sdk_classes()
    args = trainer_args(req.request, c)
    hook = _hook(req, args.hooked)
    # Registered before the SDK creates its clients from this session, so they all carry it.
    boto_session.events.register("before-parameter-build.sagemaker.CreateTrainingJob", hook)
    if sagemaker_session is None:
        sagemaker_session = c["Session"](boto_session=boto_session)
    else:
        sagemaker_session.sagemaker_client.meta.events.register(
            "before-parameter-build.sagemaker.CreateTrainingJob", hook
        )
    trainer = c["ModelTrainer"](
        sagemaker_session=sagemaker_session, base_job_name=req.base_job_name, **args.kwargs
    )
    for method, value in args.methods.items():
        trainer = getattr(trainer, method)(value)
    _warn(req, args)
    return trainer, req


def _warn(req: JobRequest, args: TrainerArgs) -> None:
    for path in args.unknown:
        warnings.warn(
            SdkViewWarning(
                f"the SDK view has no mapping for request member {path} (job/sdk_table.py): "
                "the before-parameter-build hook sends it as the builder built it"
            ),
            stacklevel=4,
        )
    hooked = [p for p in args.hooked if p not in args.unknown]
    warnings.warn(
        SdkViewWarning(
            "ModelTrainer cannot set "
            + ", ".join(hooked)
            + ": a before-parameter-build hook on its session sets them; and it names jobs "
            f"{req.base_job_name}-<timestamp>, so an SDK rerun makes a new job instead of "
            "reattaching (bsm submit reattaches)"
        ),
        stacklevel=4,
    )
    for w in req.warnings:
        warnings.warn(SdkViewWarning(w), stacklevel=4)


def to_model_trainer(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
) -> ModelTrainer:
    """A `sagemaker.train.ModelTrainer` whose CreateTrainingJob equals the builder's request
    (plan ARN, instance, image, entrypoint, environment, checkpoints, stopping condition,
    metric definitions, tags, channels); see the module docstring for the two exceptions.

    `plan` defaults to `make_plan(spec)`. `training_plan_arn` is needed when
    `compute.training_plan` is a name or 'auto'. `blackwell_sm.to_model_trainer` (in
    `blackwell_sm.aws.sdk`) also uploads the code bundle so that `trainer.train()` can run.
    """
    trainer, _ = model_trainer_and_request(
        spec,
        plan,
        training_plan_arn=training_plan_arn,
        sagemaker_session=sagemaker_session,
    )
    return trainer
