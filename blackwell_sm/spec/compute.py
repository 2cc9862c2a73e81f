"""ComputeSpec: which capacity the run goes on (instance type, count, training plan, price),
or an ordered list of instance preferences (`InstancePreference`), one planned per type."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from annotated_types import Le
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from blackwell_sm.spec.types import MAX_INSTANCES, KeyedValueError, PosFloat, PosInt

TRAINING_PLAN_ARN_RE = re.compile(
    r"^arn:aws[a-z\-]*:sagemaker:[a-z0-9\-]+:\d{12}:training-plan/[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$"
)
TRAINING_PLAN_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,63}$")


def _check_plan_ref(v: str | None) -> str | None:
    """A training plan reference: None, 'auto', an ARN or a plan name."""
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


class InstancePreference(BaseModel):
    """One entry of `compute.instance_preferences`: a type, a count and optionally its plan."""

    model_config = ConfigDict(extra="forbid")

    instance_type: str = Field(max_length=64, description="SageMaker instance type (catalog's).")
    instance_count: Annotated[PosInt, Le(MAX_INSTANCES)] | Literal["auto"] = Field(
        1,
        description=f"Instances of this type, 1..{MAX_INSTANCES}, or 'auto': the fewest that fit.",
    )
    training_plan: str | None = Field(
        None,
        description="Flexible Training Plan for this type: an ARN or a plan name ('auto' is "
        "only for compute.training_plan); none: on-demand.",
    )
    price_per_hour: PosFloat | None = Field(
        None, le=1e6, description="USD per instance-hour of this type; default: the catalog's."
    )

    @field_validator("training_plan")
    @classmethod
    def _plan_shape(cls, v: str | None) -> str | None:
        if v == "auto":
            raise ValueError(
                "'auto' is not allowed in an instance preference: reserve a plan with "
                "`bsm plans reserve` and name it here, or leave training_plan out (on-demand)"
            )
        return _check_plan_ref(v)


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
    optimize: Literal["time", "cost"] = Field(
        "time",
        description="What instance_count auto optimizes: 'time' (the fewest instances that "
        "finish within deadline_hours, else one SageMaker job's 28 days; the fastest "
        "configuration on them) or 'cost' (the cheapest count, within deadline_hours if set).",
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
        "and `bsm submit` asks for confirmation (or --yes); in (0, 1000000000].",
    )
    calibration: str | None = Field(
        None,
        min_length=1,
        max_length=1024,
        description="Path of a calibration profile (`bsm calibrate`, docs/calibration.md), 1-1024 "
        "characters, relative to the working directory; `bsm plan --calibration` overrides "
        "it, and it overrides $BSM_CALIBRATION.",
    )
    instance_preferences: list[InstancePreference] | None = Field(
        None,
        min_length=1,
        max_length=5,  # botocore's model: ResourceConfig.InstancePreferences holds 1..5 entries
        description="Ordered capacity preferences (ResourceConfig.InstancePreferences), 1..5 "
        "entries: "
        "SageMaker starts the job on the first type with capacity. Each type is planned on its "
        "own and the container runs the plan of the type it lands on. Replaces instance_type, "
        "instance_count, training_plan and price_per_hour; at most one entry per type.",
    )

    @field_validator("training_plan")
    @classmethod
    def _plan_shape(cls, v: str | None) -> str | None:
        return _check_plan_ref(v)

    @model_validator(mode="after")
    def _preferences_alone(self) -> ComputeSpec:
        if not self.instance_preferences:
            return self
        # Set to other than the default (a spec round trip through with_overrides sets all).
        fields = type(self).model_fields
        both = [
            k
            for k in ("instance_type", "instance_count", "training_plan", "price_per_hour")
            if getattr(self, k) != fields[k].default
        ]
        if both:
            raise KeyedValueError(
                f"compute.instance_preferences replaces compute.{', compute.'.join(both)}: "
                "give each preference its own instance_type, instance_count, training_plan and "
                "price_per_hour",
                key=both[0],
            )
        seen: set[str] = set()
        for i, pref in enumerate(self.instance_preferences):
            if pref.instance_type in seen:
                raise KeyedValueError(
                    f"{pref.instance_type} is listed twice; each type gets one plan "
                    "(plans/<instance-type>.json), so list it once",
                    key=f"instance_preferences.{i}.instance_type",
                )
            seen.add(pref.instance_type)
        return self
