"""The SageMaker SDK view with its AWS side: `to_model_trainer` that also uploads the bundle.

`blackwell_sm.job.sdk` configures the `ModelTrainer` and makes no AWS call; this module adds
the code bundle's verified, content-addressed upload (the same one `bsm submit` does, so each
recognises the other's upload) after checking the bucket is in the job's region.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blackwell_sm.job.request import JobRequest
    from blackwell_sm.job.sdk import ModelTrainer
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.spec.run import RunSpec


def upload_for_sdk(boto_session: Any, req: JobRequest) -> None:
    """Check the bucket's region, then put the bundle at its content address (once)."""
    from blackwell_sm.aws.s3 import check_bucket_region, upload_bundle
    from blackwell_sm.aws.session import check_settings, client_config, install_deadline

    check_settings()
    s3 = boto_session.client("s3", config=client_config())
    install_deadline(s3)
    check_bucket_region(s3, req.bundle_s3_uri, req.region)
    upload_bundle(s3, req.bundle.data, req.bundle_s3_uri, sha256=req.bundle.sha256)


def model_trainer_and_request(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload_bundle: bool = True,
) -> tuple[ModelTrainer, JobRequest]:
    """`to_model_trainer`, also returning the builder's JobRequest; the bundle is uploaded
    after the view is made (the job layer makes no AWS call and calls nothing back)."""
    from blackwell_sm.job import sdk

    trainer, req = sdk.model_trainer_and_request(
        spec, plan, training_plan_arn=training_plan_arn, sagemaker_session=sagemaker_session
    )
    if upload_bundle:
        upload_for_sdk(trainer.sagemaker_session.boto_session, req)
    return trainer, req


def to_model_trainer(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload_bundle: bool = True,
) -> ModelTrainer:
    """A `sagemaker.train.ModelTrainer` that sends the builder's CreateTrainingJob (see
    `blackwell_sm.job.sdk`). `upload_bundle` puts the code bundle at its S3 address first, so
    that `trainer.train()` can run. REPLACE-ME placeholders are refused before any call."""
    trainer, _ = model_trainer_and_request(
        spec,
        plan,
        training_plan_arn=training_plan_arn,
        sagemaker_session=sagemaker_session,
        upload_bundle=upload_bundle,
    )
    return trainer


def to_estimator(
    spec: RunSpec | str | Path | dict[str, Any],
    plan: Plan | None = None,
    *,
    training_plan_arn: str | None = None,
    sagemaker_session: Any = None,
    upload_bundle: bool = True,
) -> Any:
    """A SageMaker SDK 2.x `Estimator` that sends the builder's CreateTrainingJob
    (`blackwell_sm.job.sdk_v2`), the code bundle uploaded first so that `estimator.fit()` runs."""
    from blackwell_sm.job.sdk_v2 import estimator_and_request

    est, req = estimator_and_request(
        spec, plan, training_plan_arn=training_plan_arn, sagemaker_session=sagemaker_session
    )
    if upload_bundle:
        upload_for_sdk(est.sagemaker_session.boto_session, req)
    return est
