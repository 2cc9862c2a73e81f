"""The SageMaker SDK v2 view: a `sagemaker.estimator.Estimator` that sends the builder's
CreateTrainingJob (`pip install 'blackwell-sm[sdk-v2]'`; v2 and v3 cannot share a virtualenv).

`to_estimator(spec, plan)` builds the request with `build_job_request` and configures an SDK 2.x
`Estimator` from it, field by field: the SIGTERM-safe command through `container_entry_point`
(no `container_arguments`: the launcher takes its own), the plan ARN through `training_plan`,
the channels and the job's own name as `fit()`'s defaults (so `estimator.fit()` sends the
builder's TrainingJobName and a rerun reattaches by name, which the v3 view cannot). The
profiler and the debugger hook, which v2 switches on by default, are off. Members v2 has no
argument for (`MlflowConfig`, `ModelPackageConfig`, and `TrainingPlanArn` on SDKs before
`training_plan`) are set by a `before-parameter-build` hook on the session, for this job only,
and named in a `SdkViewWarning`; the same hook sends the two false flags v2 leaves out and drops
the `ProfilerConfig {DisableProfiler: true}` v2 adds, so the request is the builder's exactly. tests/sdk_v2/ compares the request on the wire with the
builder's (`make test-sdk-v2`, its own virtualenv).
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path
from typing import Any

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.job.request import JobRequest, build_job_request
from blackwell_sm.job.sdk import SdkViewWarning, Uploader, refuse_placeholders, view_inputs
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec.run import RunSpec

# Request members v2's Estimator has no argument for: set by the hook.
HOOKED = ("MlflowConfig", "ModelPackageConfig")


# Sent by the builder even when false; v2 leaves a false flag out (the same meaning): the hook
# puts them back so that the request is the builder's, member for member.
FLAGS = ("EnableNetworkIsolation", "EnableInterContainerTrafficEncryption")
# What `disable_profiler=True` makes v2 send; the builder sends no profiler member (no profiling
# either way): the hook takes it out.
PROFILER_OFF = {"DisableProfiler": True}


def _hook(req: JobRequest, members: dict[str, Any]) -> Any:
    def hook(params: dict[str, Any], **_: Any) -> None:
        if params.get("TrainingJobName") != req.job_name:  # this job only
            return
        params.update(members)
        for flag in FLAGS:
            params[flag] = req.request[flag]
        if params.get("ProfilerConfig") == PROFILER_OFF:
            del params["ProfilerConfig"]

    return hook


def _kwargs(req: JobRequest, accepted: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Estimator arguments, request members left to the hook)."""
    from sagemaker.debugger import TensorBoardOutputConfig

    q = req.request
    res, algo, out = q["ResourceConfig"], q["AlgorithmSpecification"], q["OutputDataConfig"]
    kw: dict[str, Any] = dict(
        image_uri=algo["TrainingImage"], role=q["RoleArn"], instance_type=res["InstanceType"],
        instance_count=res["InstanceCount"], volume_size=res["VolumeSizeInGB"],
        max_run=q["StoppingCondition"]["MaxRuntimeInSeconds"],
        input_mode=algo["TrainingInputMode"], output_path=out["S3OutputPath"],
        base_job_name=req.base_job_name, hyperparameters=dict(q["HyperParameters"]),
        tags=[dict(t) for t in q["Tags"]], metric_definitions=list(algo["MetricDefinitions"]),
        enable_sagemaker_metrics=algo["EnableSageMakerMetricsTimeSeries"],
        checkpoint_s3_uri=q["CheckpointConfig"]["S3Uri"],
        checkpoint_local_path=q["CheckpointConfig"]["LocalPath"],
        enable_network_isolation=q["EnableNetworkIsolation"],
        encrypt_inter_container_traffic=q["EnableInterContainerTrafficEncryption"],
        environment=dict(q["Environment"]), container_entry_point=list(algo["ContainerEntrypoint"]),
        disable_output_compression=out["CompressionType"] == "NONE",
        disable_profiler=True, debugger_hook_config=False,
    )  # fmt: skip
    optional = {
        "output_kms_key": out.get("KmsKeyId"),
        "volume_kms_key": res.get("VolumeKmsKeyId"),
        "keep_alive_period_in_seconds": res.get("KeepAlivePeriodInSeconds"),
        "subnets": q.get("VpcConfig", {}).get("Subnets"),
        "security_group_ids": q.get("VpcConfig", {}).get("SecurityGroupIds"),
        "max_retry_attempts": q.get("RetryStrategy", {}).get("MaximumRetryAttempts"),
        "enable_infra_check": q.get("InfraCheckConfig", {}).get("EnableInfraCheck"),
    }
    kw.update({k: v for k, v in optional.items() if v is not None})
    if "TensorBoardOutputConfig" in q:
        tb = q["TensorBoardOutputConfig"]
        kw["tensorboard_output_config"] = TensorBoardOutputConfig(
            s3_output_path=tb["S3OutputPath"], container_local_output_path=tb["LocalPath"]
        )
    hooked = {k: q[k] for k in HOOKED if k in q}
    if "TrainingPlanArn" in res:
        if "training_plan" in accepted:
            kw["training_plan"] = res["TrainingPlanArn"]
        else:
            hooked["ResourceConfig"] = dict(res)
    if "enable_infra_check" in kw and "enable_infra_check" not in accepted:
        hooked["InfraCheckConfig"] = q["InfraCheckConfig"]
        del kw["enable_infra_check"]
    return kw, hooked


def estimator_and_request(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload: Uploader | None = None,
) -> tuple[Any, JobRequest]:
    """`to_estimator`, also returning the builder's JobRequest it was configured from. `upload`
    puts the code bundle in S3 (blackwell_sm.aws.sdk passes its verified upload)."""
    run, plan = view_inputs(spec, plan, training_plan_arn, "to_estimator")
    from blackwell_sm.job.wheels import fetch_for

    try:
        import sagemaker
        from sagemaker.estimator import Estimator
        from sagemaker.inputs import TrainingInput
    except ImportError as e:
        raise BsmError(
            f"the SageMaker SDK v2 is not installed ({e.name})",
            hint="pip install 'blackwell-sm[sdk-v2]' (sagemaker>=2,<3; not beside sagemaker 3)",
        ) from None
    if not sagemaker.__version__.startswith("2."):
        raise BsmError(
            f"to_estimator needs the SageMaker SDK 2.x; this is {sagemaker.__version__}",
            hint="use to_model_trainer with SDK 3, or a virtualenv with 'blackwell-sm[sdk-v2]'",
        )
    if sagemaker_session is None:
        sagemaker_session = sagemaker.Session()  # the SDK's region: AWS_REGION or the profile's
    region = sagemaker_session.boto_region_name
    if run.job is not None and run.job.region and run.job.region != region:
        raise SpecError(
            f"job.region is {run.job.region} but the SageMaker session is in {region}",
            field="job.region",
            hint="pass sagemaker_session=sagemaker.Session(boto3.Session(region_name="
            f"{run.job.region!r}))",
        )
    req = build_job_request(run, plan, training_plan_arn=training_plan_arn, region=region,
                            wheelhouse=fetch_for(run, plan))  # fmt: skip
    refuse_placeholders(req)
    accepted = set(inspect.signature(Estimator.__init__).parameters)
    kw, hooked = _kwargs(req, accepted)
    if upload is not None:
        upload(sagemaker_session.boto_session, req)
    sagemaker_session.sagemaker_client.meta.events.register(
        "before-parameter-build.sagemaker.CreateTrainingJob", _hook(req, hooked)
    )
    if hooked:
        warnings.warn(
            SdkViewWarning(
                f"the SDK v2 Estimator has no argument for {', '.join(sorted(hooked))}: a "
                "before-parameter-build hook on its session sets them for this job"
            ),
            stacklevel=3,
        )
    channels = {
        c["ChannelName"]: TrainingInput(
            s3_data=c["DataSource"]["S3DataSource"]["S3Uri"],
            distribution=c["DataSource"]["S3DataSource"]["S3DataDistributionType"],
            s3_data_type=c["DataSource"]["S3DataSource"]["S3DataType"],
            input_mode=c["InputMode"],
        )
        for c in req.request["InputDataConfig"]
    }

    class BsmEstimator(Estimator):
        """An Estimator whose `fit()` defaults to the builder's channels and job name."""

        def fit(self, inputs: Any = None, wait: bool = True, logs: Any = "All",
                job_name: str | None = None, experiment_config: Any = None) -> Any:  # fmt: skip
            return super().fit(inputs if inputs is not None else channels, wait=wait, logs=logs,
                               job_name=job_name or req.job_name,
                               experiment_config=experiment_config)  # fmt: skip

    for w in req.warnings:
        warnings.warn(SdkViewWarning(w), stacklevel=3)
    return BsmEstimator(sagemaker_session=sagemaker_session, **kw), req


def to_estimator(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload: Uploader | None = None,
) -> Any:
    """A SageMaker SDK 2.x `Estimator` whose `fit()` sends the builder's CreateTrainingJob,
    field by field (module docstring). `blackwell_sm.to_estimator` (blackwell_sm.aws.sdk) also
    uploads the code bundle."""
    est, _ = estimator_and_request(spec, plan, training_plan_arn=training_plan_arn,
                                   sagemaker_session=sagemaker_session, upload=upload)  # fmt: skip
    return est
