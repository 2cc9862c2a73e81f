"""The SageMaker SDK v2 view: a `sagemaker.estimator.Estimator` that sends the builder's
CreateTrainingJob (`pip install 'blackwell-sm[sdk-v2]'`; v2 and v3 cannot share a virtualenv).

`to_estimator(spec, plan)` builds the request with `build_job_request` and configures an SDK 2.x
`Estimator` from it, member by member as the v2 column of job/sdk_table.py says: the
SIGTERM-safe command through `container_entry_point` (no `container_arguments`: the launcher
takes its own), the plan ARN through `training_plan`, the channels and the job's own name as
`fit()`'s defaults (so `estimator.fit()` sends the builder's TrainingJobName and a rerun
reattaches by name, which the v3 view cannot). The profiler and the debugger hook, which v2
switches on by default, are off. Members v2 has no argument for (`MlflowConfig`,
`ModelPackageConfig`, `TrainingPlanArn` and `InfraCheckConfig` on SDKs before `training_plan` /
`enable_infra_check`, and any member the table has no row for) are set by a
`before-parameter-build` hook on the session, for this job only, and named in a
`SdkViewWarning`; the same hook sends the two false flags v2 leaves out and drops the
`ProfilerConfig {DisableProfiler: true}` v2 adds, so the request is the builder's exactly.
tests/sdk_v2/ compares the request on the wire with the builder's (`make test-sdk-v2`, its own
virtualenv).
"""

from __future__ import annotations

import copy
import inspect
import warnings
from pathlib import Path
from typing import Any

from blackwell_sm.errors import BsmError, MissingExtraError, SpecError
from blackwell_sm.job.request import JobRequest, build_job_request
from blackwell_sm.job.sdk import SdkViewWarning, refuse_placeholders, view_inputs
from blackwell_sm.job.sdk_table import HOOK, TABLE, leaves, unmapped
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec.run import RunSpec

# Request members v2's Estimator has no argument for: set by the hook (the table's HOOK rows).
HOOKED = tuple(r.path for r in TABLE.values() if r.v2 == HOOK)
# Arguments only newer 2.x SDKs take; before them the hook sets the whole member.
NEWER = frozenset({"training_plan", "enable_infra_check"})


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


def _v2_value(path: str, value: Any) -> Any:
    """A request value as the v2 Estimator takes it."""
    if path == "OutputDataConfig.CompressionType":
        return value == "NONE"  # disable_output_compression
    if path == "InfraCheckConfig":
        return value["EnableInfraCheck"]
    if path == "TensorBoardOutputConfig":
        from sagemaker.debugger import TensorBoardOutputConfig

        return TensorBoardOutputConfig(
            s3_output_path=value["S3OutputPath"], container_local_output_path=value["LocalPath"]
        )
    return copy.deepcopy(value)


def _kwargs(req: JobRequest, accepted: set[str]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(Estimator arguments, request members left to the hook), by the table's v2 column
    (job/sdk_table.py); a member without a row goes to the hook too, named in a warning."""
    q = req.request
    kw: dict[str, Any] = {
        "base_job_name": req.base_job_name,
        "disable_profiler": True,
        "debugger_hook_config": False,
    }
    hooked: dict[str, Any] = {}
    for path, value in leaves(q):
        target = TABLE[path].v2 if path in TABLE else HOOK
        if target is None or target.startswith("fit("):
            continue  # fit()'s defaults (BsmEstimator), or refused before (view_inputs)
        if target == HOOK or (target in NEWER and target not in accepted):
            member = path.split(".", 1)[0]
            hooked[member] = copy.deepcopy(q[member])
            continue
        kw[target] = _v2_value(path, value)
    return kw, hooked


def estimator_and_request(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
) -> tuple[Any, JobRequest]:
    """`to_estimator`, also returning the builder's JobRequest it was configured from (no AWS
    call: blackwell_sm.aws.sdk uploads the code bundle afterwards)."""
    run, plan = view_inputs(spec, plan, training_plan_arn, "to_estimator")
    from blackwell_sm.job.wheels import fetch_for

    try:
        import sagemaker
        from sagemaker.estimator import Estimator
        from sagemaker.inputs import TrainingInput
    except ImportError as e:
        raise MissingExtraError(
            e.name or "sagemaker", "the SageMaker SDK v2 view (sagemaker>=2,<3)", extra="sdk-v2"
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
    req = build_job_request(
        run,
        plan,
        training_plan_arn=training_plan_arn,
        region=region,
        wheelhouse=fetch_for(run, plan),
    )
    refuse_placeholders(req)
    accepted = set(inspect.signature(Estimator.__init__).parameters)
    kw, hooked = _kwargs(req, accepted)
    for path in unmapped(req.request):
        warnings.warn(
            SdkViewWarning(
                f"the SDK view has no mapping for request member {path} (job/sdk_table.py): "
                "the before-parameter-build hook sends it as the builder built it"
            ),
            stacklevel=3,
        )
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

        def fit(
            self,
            inputs: Any = None,
            wait: bool = True,
            logs: Any = "All",
            job_name: str | None = None,
            experiment_config: Any = None,
        ) -> Any:
            return super().fit(
                inputs if inputs is not None else channels,
                wait=wait,
                logs=logs,
                job_name=job_name or req.job_name,
                experiment_config=experiment_config,
            )

    for w in req.warnings:
        warnings.warn(SdkViewWarning(w), stacklevel=3)
    return BsmEstimator(sagemaker_session=sagemaker_session, **kw), req


def to_estimator(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
) -> Any:
    """A SageMaker SDK 2.x `Estimator` whose `fit()` sends the builder's CreateTrainingJob,
    field by field (module docstring). `blackwell_sm.to_estimator` (blackwell_sm.aws.sdk) also
    uploads the code bundle."""
    est, _ = estimator_and_request(
        spec,
        plan,
        training_plan_arn=training_plan_arn,
        sagemaker_session=sagemaker_session,
    )
    return est
