"""CreateTrainingJob members for what SageMaker offers natively, one small pure builder each:

- `TensorBoardOutputConfig` (`training.report_to: [tensorboard]`): SageMaker syncs the event
  files the job writes under /opt/ml/output/tensorboard to `<tensorboard prefix>/<job name>`.
- `MlflowConfig` (`training.mlflow.tracking_uri` is a SageMaker managed MLflow ARN): the job is
  linked to that tracking server, experiment and run (DescribeTrainingJob's MlflowDetails).
- `ModelPackageConfig` (`job.model_package_group`): the job's output registered as a model
  package in that group.
- `InfraCheckConfig` (`job.infra_check`): SageMaker's hardware and network health check before
  training, on GPU instance types only. SageMaker publishes no duration for it: the job's
  start-up grows by the check's time (not in the plan's hours; docs/job-request.md).

Each returns the member's value, or None when the spec does not ask for it; `native_members`
collects them for `build_job_request`.
"""

from __future__ import annotations

from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import CATALOG
from blackwell_sm.opt_ml import ENV_EXPORT_URI
from blackwell_sm.spec.job import JobSpec
from blackwell_sm.spec.run import RunSpec

TENSORBOARD_LOCAL_PATH = "/opt/ml/output/tensorboard"  # = OptMl(DEFAULT_ROOT).tensorboard


def tensorboard_output(spec: RunSpec, job: JobSpec, job_base: str) -> dict[str, Any] | None:
    if "tensorboard" not in spec.training.report_to:
        return None
    return {
        "S3OutputPath": f"{job.tensorboard_prefix}/{job_base}",
        "LocalPath": TENSORBOARD_LOCAL_PATH,
    }


def mlflow_config(spec: RunSpec, job_name: str) -> dict[str, Any] | None:
    ml = spec.training.mlflow
    if "mlflow" not in spec.training.report_to or ml is None or not ml.is_sagemaker:
        return None  # another tracking server: the container's client alone reports to it
    out = {
        "MlflowResourceArn": ml.tracking_uri,
        "MlflowExperimentName": ml.experiment or spec.model.name,
        "MlflowRunName": ml.run_name or job_name,
    }
    return out


def model_package_group_arn(job: JobSpec, region: str) -> str | None:
    """job.model_package_group as an ARN (a name is placed in the role's account and the job's
    region)."""
    group = job.model_package_group
    if group is None or group.startswith("arn:"):
        return group
    parts = job.role_arn.split(":")
    return f"arn:{parts[1]}:sagemaker:{job.region or region}:{parts[4]}:model-package-group/{group}"


def model_package(spec: RunSpec, job: JobSpec, region: str) -> dict[str, Any] | None:
    arn = model_package_group_arn(job, region)
    if arn is None:
        return None
    if not spec.training.export_model:
        raise SpecError(
            "job.model_package_group registers the exported model, but training.export_model "
            "is false: there would be nothing to register",
            field="job.model_package_group",
            hint="set training.export_model: true, or remove job.model_package_group",
        )
    return {"ModelPackageGroupArn": arn}


def infra_check(job: JobSpec, instance_types: list[str]) -> dict[str, Any] | None:
    if not job.infra_check:
        return None
    no_gpu = [t for t in instance_types if t not in CATALOG]
    if no_gpu:
        raise SpecError(
            f"job.infra_check applies to SageMaker GPU instance types; {', '.join(no_gpu)} is "
            "not one",
            field="job.infra_check",
            hint=f"use one of {', '.join(CATALOG)}, or remove job.infra_check",
        )
    return {"EnableInfraCheck": True}


def tracker_environment(spec: RunSpec, job: JobSpec, job_name: str) -> dict[str, str]:
    """The container variables the trackers read: where the export will be (a reference the
    MLflow run keeps; opt_ml.ENV_EXPORT_URI)."""
    if not spec.training.report_to or not spec.training.export_model:
        return {}
    where = "model/" if job.output_compression == "NONE" else "model.tar.gz"
    return {ENV_EXPORT_URI: f"{job.output_prefix}/{job_name}/output/{where}"}


def check_wandb(spec: RunSpec) -> None:
    """W&B online needs an API key in the container, which a job cannot be given safely here."""
    wb = spec.training.wandb
    if "wandb" in spec.training.report_to and wb is not None and wb.mode == "online":
        raise SpecError(
            "W&B online needs an API key inside the job: bsm passes no credential through the "
            "job's environment (DescribeTrainingJob shows it) and the container makes no AWS "
            "call to fetch one from Secrets Manager",
            field="training.wandb.mode",
            hint="set training.wandb.mode: offline (the run's W&B files leave in output.tar.gz; "
            "`wandb sync` them), or use mlflow / tensorboard for a live view",
        )


def native_members(
    spec: RunSpec,
    job: JobSpec,
    *,
    job_name: str,
    job_base: str,
    region: str,
    instance_types: list[str],
) -> dict[str, Any]:
    """The members above that the spec asks for, by request member name."""
    check_wandb(spec)
    members = {
        "TensorBoardOutputConfig": tensorboard_output(spec, job, job_base),
        "MlflowConfig": mlflow_config(spec, job_name),
        "ModelPackageConfig": model_package(spec, job, region),
        "InfraCheckConfig": infra_check(job, instance_types),
    }
    return {k: v for k, v in members.items() if v is not None}
