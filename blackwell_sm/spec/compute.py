"""ComputeSpec: which capacity the run goes on (instance type, count, training plan, price)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from annotated_types import Le
from pydantic import BaseModel, ConfigDict, Field, field_validator

from blackwell_sm.spec.types import MAX_INSTANCES, PosFloat, PosInt

TRAINING_PLAN_ARN_RE = re.compile(
    r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$"
)
TRAINING_PLAN_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$")


class ComputeSpec(BaseModel):
    """Instance type and count, optional Flexible Training Plan, deadline and price override."""

    model_config = ConfigDict(extra="forbid")

    instance_type: str = Field(
        "ml.p6-b200.48xlarge",
        max_length=64,
        description="SageMaker instance type (the catalog's; at most 64 characters).",
    )
    instance_count: Annotated[PosInt, Le(MAX_INSTANCES)] | Literal["auto"] = Field(
        1,
        description=f"Instances, 1..{MAX_INSTANCES} (toolkit bound; the account's SageMaker "
        "quota is usually lower), or 'auto': the fewest that fit (or meet deadline_hours).",
    )
    deadline_hours: PosFloat | None = Field(
        None, le=1e6, description="Finish within this many hours, in (0, 1000000]."
    )
    training_plan: str | None = Field(
        None, description="Flexible Training Plan: an ARN, a plan name, or 'auto' to search."
    )
    price_per_hour: PosFloat | None = Field(
        None,
        le=1e6,
        description="USD per instance-hour, in (0, 1000000]; overrides the catalog's price table.",
    )

    confirm_cost_usd: PosFloat = Field(
        100_000.0,
        le=1e9,
        description="A run whose pessimistic cost is above this many USD is flagged in the plan, "
        "and `bsm submit` asks for confirmation (or --yes); in (0, 1e9].",
    )

    @field_validator("training_plan")
    @classmethod
    def _plan_shape(cls, v: str | None) -> str | None:
        if v is None or v == "auto":
            return v
        if v.startswith("arn:"):
            if not TRAINING_PLAN_ARN_RE.match(v):
                raise ValueError(
                    "training plan ARN must look like "
                    "arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME"
                )
        elif not TRAINING_PLAN_NAME_RE.match(v):
            raise ValueError(
                "training plan must be 'auto', an ARN, or a name of 1-64 letters, digits and "
                "single hyphens"
            )
        return v
