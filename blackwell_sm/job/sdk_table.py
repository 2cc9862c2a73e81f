"""Request path → SDK argument: the one table both SDK views are derived from (job/sdk.py for
ModelTrainer, SDK v3; job/sdk_v2.py for the v2 Estimator).

A row names a request member (`Tags`) or one member of a structure (`ResourceConfig.InstanceType`)
and where each view puts it:

- `name`: a ModelTrainer / Estimator argument, the value passed as built;
- `group.name` (v3): an argument of the config class ModelTrainer takes as `group`
  (`compute.instance_type` → `Compute(instance_type=...)`);
- `with_name()` (v3): a ModelTrainer method the value is given to;
- `HOOK`: the view's `before-parameter-build` hook sets it on this job's request, as built (the
  SDK has no argument for it); named in the view's `SdkViewWarning`;
- `None`: not sent as built; `why` says what is sent instead and why.

A member the table does not list is never dropped silently: `unmapped(request)` names it, the
views warn (`SdkViewWarning`) and their hook sends it as built. tests/test_sdk_table.py checks
that every member of a full request has a row.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, NamedTuple

HOOK = "hook"


class Row(NamedTuple):
    path: str
    v3: str | None
    v2: str | None
    why: str = ""


ROWS: tuple[Row, ...] = (
    Row(
        "TrainingJobName",
        None,
        "fit(job_name)",
        "ModelTrainer names jobs <base_job_name>-<timestamp>: it gets the builder's base name, "
        "so an SDK v3 rerun makes a new job instead of reattaching",
    ),
    Row("RoleArn", "role", "role"),
    Row("AlgorithmSpecification.TrainingImage", "training_image", "image_uri"),
    Row("AlgorithmSpecification.TrainingInputMode", "training_input_mode", "input_mode"),
    Row(
        "AlgorithmSpecification.ContainerEntrypoint",
        HOOK,
        "container_entry_point",
        "ModelTrainer sets an entrypoint only with its own bash driver, under which SIGTERM "
        "never reaches the launcher",
    ),
    Row(
        "AlgorithmSpecification.MetricDefinitions",
        "with_metric_definitions()",
        "metric_definitions",
    ),
    Row(
        "AlgorithmSpecification.EnableSageMakerMetricsTimeSeries",
        HOOK,
        "enable_sagemaker_metrics",
        "ModelTrainer has no argument for it",
    ),
    Row("HyperParameters", "hyperparameters", "hyperparameters"),
    Row("InputDataConfig", "input_data_config", "fit(inputs)"),
    Row("OutputDataConfig.S3OutputPath", "output_data_config.s3_output_path", "output_path"),
    Row(
        "OutputDataConfig.CompressionType",
        "output_data_config.compression_type",
        "disable_output_compression",
    ),
    Row("OutputDataConfig.KmsKeyId", "output_data_config.kms_key_id", "output_kms_key"),
    Row("ResourceConfig.InstanceType", "compute.instance_type", "instance_type"),
    Row("ResourceConfig.InstanceCount", "compute.instance_count", "instance_count"),
    Row("ResourceConfig.VolumeSizeInGB", "compute.volume_size_in_gb", "volume_size"),
    Row("ResourceConfig.VolumeKmsKeyId", "compute.volume_kms_key_id", "volume_kms_key"),
    Row(
        "ResourceConfig.KeepAlivePeriodInSeconds",
        "compute.keep_alive_period_in_seconds",
        "keep_alive_period_in_seconds",
    ),
    Row(
        "ResourceConfig.TrainingPlanArn",
        "compute.training_plan_arn",
        "training_plan",
        "v2 SDKs before `training_plan`: set by the hook",
    ),
    Row(
        "ResourceConfig.InstancePreferences",
        None,
        None,
        "refused before the SDK is called (`view_inputs`): the bundle's plan per type is built "
        "only by `bsm submit`",
    ),
    Row(
        "StoppingCondition.MaxRuntimeInSeconds",
        "stopping_condition.max_runtime_in_seconds",
        "max_run",
    ),
    Row("CheckpointConfig.S3Uri", "checkpoint_config.s3_uri", "checkpoint_s3_uri"),
    Row("CheckpointConfig.LocalPath", "checkpoint_config.local_path", "checkpoint_local_path"),
    Row("Environment", "environment", "environment"),
    Row(
        "EnableNetworkIsolation",
        "networking.enable_network_isolation",
        "enable_network_isolation",
        "v2 leaves a false flag out: its hook puts it back",
    ),
    Row(
        "EnableInterContainerTrafficEncryption",
        "networking.enable_inter_container_traffic_encryption",
        "encrypt_inter_container_traffic",
        "v2 leaves a false flag out: its hook puts it back",
    ),
    Row("Tags", "tags", "tags"),
    Row("VpcConfig.Subnets", "networking.subnets", "subnets"),
    Row("VpcConfig.SecurityGroupIds", "networking.security_group_ids", "security_group_ids"),
    Row("RetryStrategy.MaximumRetryAttempts", "with_retry_strategy()", "max_retry_attempts"),
    Row("TensorBoardOutputConfig", HOOK, "tensorboard_output_config", "sent by the hook as built"),
    Row("MlflowConfig", HOOK, HOOK, "neither view has an argument for it"),
    Row("ModelPackageConfig", HOOK, HOOK, "neither view has an argument for it"),
    Row(
        "InfraCheckConfig",
        HOOK,
        "enable_infra_check",
        "v3: sent by the hook as built; v2 SDKs before `enable_infra_check`: the hook",
    ),
)
TABLE: dict[str, Row] = {r.path: r for r in ROWS}
# Structures whose members have rows of their own (the others are mapped whole).
STRUCTURES = frozenset(p.split(".", 1)[0] for p in TABLE if "." in p)


def leaves(request: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, value) for each member of `request` at the table's depth: a structure's members
    one by one, every other member whole."""
    for key, value in request.items():
        if key in STRUCTURES and isinstance(value, dict):
            for sub, v in value.items():
                yield f"{key}.{sub}", v
        else:
            yield key, value


def unmapped(request: dict[str, Any]) -> list[str]:
    """The members of `request` the table has no row for (a new request member nobody mapped)."""
    return [path for path, _ in leaves(request) if path not in TABLE]


def set_path(params: dict[str, Any], path: str, value: Any) -> None:
    """Set `path` (one dot at most) in a request being built."""
    head, _, sub = path.partition(".")
    if sub:
        params.setdefault(head, {})[sub] = value
    else:
        params[head] = value
