"""SageMaker Flexible Training Plans: search, reserve (with consent), list, describe, check.

A plan is reserved capacity bought up front; it cannot be cancelled. So `reserve` shows the
offering's fee and window and needs an explicit yes (a prompt on a terminal, or `yes=True` /
`--yes`); nothing else in this toolkit ever reserves on its own. Before a job is put on a plan,
`check_plan` verifies status, instance type, free instances and whether the predicted run fits
before the plan's end (instances are reclaimed ~30 minutes before it).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.errors import translate
from blackwell_sm.errors import AwsError, ConsentRequiredError, SpecError

USABLE_STATUSES = frozenset({"Scheduled", "Active"})
TARGET = "training-job"

Confirm = Callable[[str], bool]


class Offering(BaseModel):
    """One SearchTrainingPlanOfferings result."""

    model_config = ConfigDict(extra="forbid")

    offering_id: str
    instance_type: str | None
    instance_count: int
    start_time: datetime | None
    end_time: datetime | None
    duration_hours: float
    upfront_fee: str | None
    currency: str | None
    availability_zone: str | None = None

    @classmethod
    def from_api(cls, o: dict[str, Any]) -> Offering:
        caps = o.get("ReservedCapacityOfferings", [])
        starts = [c["StartTime"] for c in caps if c.get("StartTime")]
        ends = [c["EndTime"] for c in caps if c.get("EndTime")]
        return cls(
            offering_id=o["TrainingPlanOfferingId"],
            instance_type=caps[0].get("InstanceType") if caps else None,
            instance_count=sum(c.get("InstanceCount", 0) for c in caps),
            start_time=min(starts) if starts else None,
            end_time=max(ends) if ends else None,
            duration_hours=o.get("DurationHours", 0) + o.get("DurationMinutes", 0) / 60,
            upfront_fee=o.get("UpfrontFee"),
            currency=o.get("CurrencyCode"),
            availability_zone=caps[0].get("AvailabilityZone") if caps else None,
        )

    def describe(self) -> str:
        fee = f"{self.upfront_fee} {self.currency or ''}".strip() if self.upfront_fee else "?"
        return (
            f"{self.instance_count} x {self.instance_type} for {self.duration_hours:g} h, "
            f"{fmt_time(self.start_time)} → {fmt_time(self.end_time)}"
            f"{f' in {self.availability_zone}' if self.availability_zone else ''}; "
            f"upfront fee {fee} (offering {self.offering_id})"
        )


class TrainingPlanInfo(BaseModel):
    """DescribeTrainingPlan / a ListTrainingPlans summary."""

    model_config = ConfigDict(extra="forbid")

    arn: str
    name: str
    status: str
    status_message: str | None = None
    start_time: datetime | None = None
    end_time: datetime | None = None
    duration_hours: float | None = None
    upfront_fee: str | None = None
    currency: str | None = None
    instance_types: list[str] = Field(default_factory=list)
    total_instance_count: int | None = None
    available_instance_count: int | None = None
    in_use_instance_count: int | None = None
    target_resources: list[str] = Field(default_factory=list)

    @classmethod
    def from_api(cls, d: dict[str, Any]) -> TrainingPlanInfo:
        caps = d.get("ReservedCapacitySummaries", [])
        return cls(
            arn=d["TrainingPlanArn"],
            name=d["TrainingPlanName"],
            status=d["Status"],
            status_message=d.get("StatusMessage"),
            start_time=d.get("StartTime"),
            end_time=d.get("EndTime"),
            duration_hours=(
                d["DurationHours"] + d.get("DurationMinutes", 0) / 60
                if "DurationHours" in d
                else None
            ),
            upfront_fee=d.get("UpfrontFee"),
            currency=d.get("CurrencyCode"),
            instance_types=sorted({c["InstanceType"] for c in caps if c.get("InstanceType")}),
            total_instance_count=d.get("TotalInstanceCount"),
            available_instance_count=d.get("AvailableInstanceCount"),
            in_use_instance_count=d.get("InUseInstanceCount"),
            target_resources=list(d.get("TargetResources", [])),
        )


def fmt_time(ts: datetime | None) -> str:
    return ts.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if ts else "?"


def utcnow() -> datetime:
    return datetime.now(UTC)


def plan_name_of(ref: str) -> str:
    """A plan ARN's name part, or the name itself."""
    return ref.rsplit("/", 1)[-1] if ref.startswith("arn:") else ref


def search_offerings(
    sm: Any,
    *,
    instance_type: str,
    instance_count: int,
    duration_hours: float,
    start_after: datetime | None = None,
    end_before: datetime | None = None,
) -> list[Offering]:
    """SearchTrainingPlanOfferings for training jobs, earliest start then lowest fee first."""
    kw: dict[str, Any] = {
        "InstanceType": instance_type,
        "InstanceCount": instance_count,
        "DurationHours": max(1, math.ceil(duration_hours)),
        "TargetResources": [TARGET],
    }
    if start_after:
        kw["StartTimeAfter"] = start_after
    if end_before:
        kw["EndTimeBefore"] = end_before
    with translate("searching training plan offerings", instance_type=instance_type):
        resp = sm.search_training_plan_offerings(**kw)
    offers = [Offering.from_api(o) for o in resp.get("TrainingPlanOfferings", [])]
    far = datetime.max.replace(tzinfo=UTC)
    return sorted(offers, key=lambda o: (o.start_time or far, _fee(o.upfront_fee), o.offering_id))


def _fee(fee: str | None) -> float:
    try:
        return float(fee) if fee is not None else math.inf
    except ValueError:
        return math.inf


def describe_plan(sm: Any, ref: str) -> TrainingPlanInfo:
    """DescribeTrainingPlan by name or ARN (an ARN must match the plan found)."""
    name = plan_name_of(ref)
    with translate(f"describing training plan {name}"):
        info = TrainingPlanInfo.from_api(sm.describe_training_plan(TrainingPlanName=name))
    if ref.startswith("arn:") and info.arn != ref:
        raise SpecError(
            f"training plan {ref} was not found: the plan named {name} in "
            f"{sm.meta.region_name} is {info.arn}",
            field="compute.training_plan",
            hint="check the ARN's region and account",
        )
    return info


def list_plans(sm: Any, *, status: str | None = None) -> list[TrainingPlanInfo]:
    """ListTrainingPlans (every page), newest start first."""
    kw: dict[str, Any] = {"SortBy": "StartTime", "SortOrder": "Descending"}
    if status:
        kw["Filters"] = [{"Name": "Status", "Value": status}]
    out: list[TrainingPlanInfo] = []
    with translate("listing training plans"):
        token = None
        while True:
            resp = sm.list_training_plans(**kw, **({"NextToken": token} if token else {}))
            out.extend(TrainingPlanInfo.from_api(p) for p in resp.get("TrainingPlanSummaries", []))
            token = resp.get("NextToken")
            if not token:
                return out


Consent = bool | Confirm | None


def require_consent(what: str, *, consent: Consent, ask: str = "Reserve it") -> None:
    """Raise ConsentRequiredError unless `consent` is True or a callable that says yes (the AWS
    layer never prompts: the CLI passes its terminal prompt, or None when there is no one)."""
    if consent is True:
        return
    if not callable(consent):
        raise ConsentRequiredError(
            f"{what}\nRefusing without consent: this spends money and cannot be undone, and "
            "there is no terminal to ask on.",
            hint="run it again with --yes (Python: yes=True) to agree to the fee shown",
        )
    if not consent(f"{what}\n{ask}? This spends money and cannot be cancelled"):
        raise ConsentRequiredError(f"declined ({ask.lower()})", hint="nothing was bought")


def reserve(
    sm: Any,
    offering: Offering,
    name: str,
    *,
    consent: Consent = None,
    tags: dict[str, str] | None = None,
) -> TrainingPlanInfo:
    """CreateTrainingPlan for `offering` after `consent`; returns the plan described."""
    require_consent(f"Training plan {name!r}: {offering.describe()}", consent=consent)
    kw: dict[str, Any] = {"TrainingPlanName": name, "TrainingPlanOfferingId": offering.offering_id}
    if tags:
        kw["Tags"] = [{"Key": k, "Value": v} for k, v in tags.items()]
    with translate(f"reserving training plan {name}", instance_type=offering.instance_type):
        arn = sm.create_training_plan(**kw)["TrainingPlanArn"]
    info = describe_plan(sm, name)
    if info.arn != arn:
        raise AwsError(
            f"CreateTrainingPlan returned {arn} but {name} is {info.arn}", code="capacity_mismatch"
        )
    return info


def find_offering(
    sm: Any, offering_id: str, *, instance_type: str, instance_count: int, duration_hours: float
) -> Offering:
    """Find an offering id again (offerings are only returned by a search)."""
    for o in search_offerings(
        sm,
        instance_type=instance_type,
        instance_count=instance_count,
        duration_hours=duration_hours,
    ):
        if o.offering_id == offering_id:
            return o
    raise SpecError(
        f"offering {offering_id} is not among the current offerings for {instance_count} x "
        f"{instance_type} for {duration_hours:g} h",
        field="OFFERING_ID",
        hint="offerings expire quickly: run `bsm plans search` again with the same values",
    )


def auto_plan_name(base_job_name: str) -> str:
    """The plan name `training_plan: auto` books for a spec (so a rerun finds it)."""
    return base_job_name[:64].rstrip("-")  # already bsm-<model>-<hash>


def find_plan(sm: Any, name: str) -> TrainingPlanInfo | None:
    """DescribeTrainingPlan, or None when there is no plan of that name."""
    from botocore.exceptions import ClientError

    with translate(f"describing training plan {name}"):
        try:
            return TrainingPlanInfo.from_api(sm.describe_training_plan(TrainingPlanName=name))
        except ClientError as e:
            err = e.response.get("Error", {})
            if err.get("Code") in {"ResourceNotFound", "ResourceNotFoundException"} or (
                err.get("Code") == "ValidationException" and "not" in str(err.get("Message"))
            ):
                return None
            raise


def wait_until_booked(
    sm: Any,
    info: TrainingPlanInfo,
    *,
    timeout_s: float = 600.0,
    poll_s: float = 10.0,
    sleep: Callable[[float], None] = time.sleep,
) -> TrainingPlanInfo:
    """Poll a just-reserved plan until it leaves Pending (payment is processed)."""
    waited = 0.0
    while info.status == "Pending":
        if waited >= timeout_s:
            raise AwsError(
                f"training plan {info.name} is still Pending after {timeout_s:.0f} s",
                code="plan_pending",
                hint=f"`bsm plans describe {info.name}`; submit again once it is Scheduled",
            )
        sleep(poll_s)
        waited += poll_s
        info = describe_plan(sm, info.name)
    return info
