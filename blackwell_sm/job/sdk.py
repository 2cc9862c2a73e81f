"""The SageMaker SDK v3 view: a `ModelTrainer` that sends the builder's CreateTrainingJob.

`to_model_trainer(spec)` builds the request with `build_job_request` and configures a
`sagemaker.train.ModelTrainer` from it, field by field. Two things ModelTrainer cannot express:

- `AlgorithmSpecification.ContainerEntrypoint`: ModelTrainer sets an entrypoint only together
  with its own `SourceCode` driver (`/bin/bash sm_train.sh`), under which bash is PID 1 and
  SIGTERM never reaches the launcher. The trainer's boto session gets a
  `before-parameter-build.sagemaker.CreateTrainingJob` handler that sets the builder's
  entrypoint (and `EnableSageMakerMetricsTimeSeries`) on this job's request, and nothing else.
- `TrainingJobName`: ModelTrainer always appends its own `-YYYYmmddHHMMSS` to `base_job_name`,
  so SDK-submitted jobs cannot be found again by name; `bsm submit` reattaches, the SDK cannot.

Both are reported in a `SdkViewWarning`. The SDK is imported here only (it costs ~3 s).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.job.request import JobRequest, build_job_request
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec.run import RunSpec

if TYPE_CHECKING:
    from sagemaker.train import ModelTrainer

# Request fields that the hook sets because ModelTrainer has no way to.
HOOKED_FIELDS = (
    "AlgorithmSpecification.ContainerEntrypoint",
    "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries",
)


class SdkViewWarning(UserWarning):
    """What the SageMaker SDK view cannot send exactly as the builder would."""


def _load(spec: RunSpec | str | Path | dict[str, Any]) -> RunSpec:
    from blackwell_sm.spec import load_spec, parse_spec

    if isinstance(spec, RunSpec):
        return spec
    if isinstance(spec, dict):
        return parse_spec(spec)
    return load_spec(spec)


Uploader = Callable[[Any, JobRequest], None]  # (boto3 session, request) -> bundle in S3


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
    if run.compute.instance_preferences:
        raise SpecError(
            f"{view} does not map compute.instance_preferences: the SDK passes the list "
            "through, but the bundle's plan per type is built only by `bsm submit`",
            field="compute.instance_preferences",
            hint="submit with `bsm submit SPEC` (blackwell_sm.submit), or use one instance_type",
        )
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


def _entrypoint_hook(req: JobRequest) -> Any:
    algo = req.request["AlgorithmSpecification"]

    def hook(params: dict[str, Any], **_: Any) -> None:
        # Only this trainer's jobs: ModelTrainer names them <base_job_name>-<timestamp>.
        if not str(params.get("TrainingJobName", "")).startswith(req.base_job_name):
            return
        spec = params.setdefault("AlgorithmSpecification", {})
        spec["ContainerEntrypoint"] = list(algo["ContainerEntrypoint"])
        spec["EnableSageMakerMetricsTimeSeries"] = algo["EnableSageMakerMetricsTimeSeries"]

    return hook


# long function: mirrors the request argument by argument for the SDK (to be derived from a table: issue 25 item 3)
def model_trainer_and_request(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload: Uploader | None = None,
) -> tuple[ModelTrainer, JobRequest]:
    """`to_model_trainer`, also returning the builder's JobRequest it was configured from.

    `upload` puts the code bundle in S3 (the AWS layer passes its verified upload; this module
    makes no AWS call of its own). Placeholders are refused before the SDK is imported.
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
        run, plan, training_plan_arn=training_plan_arn, region=boto_session.region_name,
        wheelhouse=fetch_for(run, plan),
    )  # fmt: skip
    refuse_placeholders(req)
    try:
        from sagemaker.core.helper.session_helper import Session
        from sagemaker.core.training.configs import (
            Channel,
            CheckpointConfig,
            Compute,
            DataSource,
            MetricDefinition,
            Networking,
            OutputDataConfig,
            RetryStrategy,
            S3DataSource,
            StoppingCondition,
            Tag,
        )
        from sagemaker.train import ModelTrainer
    except ImportError as e:
        raise BsmError(
            f"the SageMaker SDK is not installed ({e.name})",
            hint="pip install 'blackwell-sm[sdk]' (sagemaker>=3)",
        ) from None

    hook = _entrypoint_hook(req)
    # Registered before the SDK creates its clients from this session, so they all carry it.
    boto_session.events.register("before-parameter-build.sagemaker.CreateTrainingJob", hook)
    if sagemaker_session is None:
        sagemaker_session = Session(boto_session=boto_session)
    else:
        sagemaker_session.sagemaker_client.meta.events.register(
            "before-parameter-build.sagemaker.CreateTrainingJob", hook
        )
    if upload is not None:
        upload(boto_session, req)

    q = req.request
    res, algo, out = q["ResourceConfig"], q["AlgorithmSpecification"], q["OutputDataConfig"]
    compute = Compute(
        instance_type=res["InstanceType"],
        instance_count=res["InstanceCount"],
        volume_size_in_gb=res["VolumeSizeInGB"],
        **({"training_plan_arn": res["TrainingPlanArn"]} if "TrainingPlanArn" in res else {}),
        **({"volume_kms_key_id": res["VolumeKmsKeyId"]} if "VolumeKmsKeyId" in res else {}),
        **(
            {"keep_alive_period_in_seconds": res["KeepAlivePeriodInSeconds"]}
            if "KeepAlivePeriodInSeconds" in res
            else {}
        ),
    )
    vpc = q.get("VpcConfig", {})
    networking = Networking(
        subnets=vpc.get("Subnets"),
        security_group_ids=vpc.get("SecurityGroupIds"),
        enable_network_isolation=q["EnableNetworkIsolation"],
        enable_inter_container_traffic_encryption=q["EnableInterContainerTrafficEncryption"],
    )
    channels = [
        Channel(
            channel_name=c["ChannelName"],
            data_source=DataSource(
                s3_data_source=S3DataSource(
                    s3_data_type=c["DataSource"]["S3DataSource"]["S3DataType"],
                    s3_uri=c["DataSource"]["S3DataSource"]["S3Uri"],
                    s3_data_distribution_type=c["DataSource"]["S3DataSource"][
                        "S3DataDistributionType"
                    ],
                )
            ),
            input_mode=c["InputMode"],
        )
        for c in q["InputDataConfig"]
    ]
    trainer = ModelTrainer(
        sagemaker_session=sagemaker_session,
        role=q["RoleArn"],
        base_job_name=req.base_job_name,
        training_image=algo["TrainingImage"],
        training_input_mode=algo["TrainingInputMode"],
        compute=compute,
        networking=networking,
        stopping_condition=StoppingCondition(
            max_runtime_in_seconds=q["StoppingCondition"]["MaxRuntimeInSeconds"]
        ),
        output_data_config=OutputDataConfig(
            s3_output_path=out["S3OutputPath"],
            compression_type=out["CompressionType"],
            **({"kms_key_id": out["KmsKeyId"]} if "KmsKeyId" in out else {}),
        ),
        checkpoint_config=CheckpointConfig(
            s3_uri=q["CheckpointConfig"]["S3Uri"], local_path=q["CheckpointConfig"]["LocalPath"]
        ),
        input_data_config=channels,
        environment=dict(q["Environment"]),
        hyperparameters=dict(q["HyperParameters"]),
        tags=[Tag(key=t["Key"], value=t["Value"]) for t in q["Tags"]],
    )
    trainer = trainer.with_metric_definitions(
        [MetricDefinition(name=m["Name"], regex=m["Regex"]) for m in algo["MetricDefinitions"]]
    )
    if "RetryStrategy" in q:
        trainer = trainer.with_retry_strategy(
            RetryStrategy(maximum_retry_attempts=q["RetryStrategy"]["MaximumRetryAttempts"])
        )
    warnings.warn(
        SdkViewWarning(
            "ModelTrainer cannot set "
            + ", ".join(HOOKED_FIELDS)
            + ": a before-parameter-build hook on its session sets them; and it names jobs "
            f"{req.base_job_name}-<timestamp>, so an SDK rerun makes a new job instead of "
            "reattaching (bsm submit reattaches)"
        ),
        stacklevel=3,
    )
    for w in req.warnings:
        warnings.warn(SdkViewWarning(w), stacklevel=3)
    return trainer, req


def to_model_trainer(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload: Uploader | None = None,
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
        upload=upload,
    )
    return trainer
