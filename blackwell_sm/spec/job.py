"""JobSpec: the SageMaker side of a run (role, region, S3 locations, image, ...)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class JobSpec(BaseModel):
    """Where and how the training job runs on SageMaker."""

    model_config = ConfigDict(extra="forbid")

    role_arn: str = Field(description="IAM role SageMaker assumes for the job.")
    region: str | None = Field(None, description="AWS region; default: the session's.")
    s3_prefix: str = Field(description="s3://bucket/prefix under which code/output/checkpoints go.")
