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
from blackwell_sm.errors import AwsError, ConsentRequiredError, InfeasiblePlanError, SpecError

USABLE_STATUSES = frozenset({"Scheduled", "Active"})
RECLAIM_HOURS = 0.5  # instances start terminating about 30 minutes before a plan ends
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


class PlanFit(BaseModel):
    """Whether a run fits a plan, and if not, what it would take."""

    model_config = ConfigDict(extra="forbid")

    plan: str
    usable: bool  # status, instance type and count are right
    fits: bool  # ... and the predicted run ends before the plan does
    problems: list[str] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    needed_hours: float
    usable_hours: float
    resume_cycles: int = Field(description="Plans of this length the run needs (1 = fits).")
    extension_hours: int = Field(description="ExtendTrainingPlan hours that would make it fit.")


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


def check_plan(
    info: TrainingPlanInfo,
    *,
    instance_type: str,
    instance_count: int,
    run_hours: float,
    startup_hours: float,
    now: datetime | None = None,
) -> PlanFit:
    """Can a run of `run_hours` on `instance_count` x `instance_type` use this plan?"""
    now = now or utcnow()
    problems: list[str] = []
    warnings: list[str] = []
    if info.status not in USABLE_STATUSES:
        problems.append(
            f"training plan {info.name} is {info.status}"
            f"{f' ({info.status_message})' if info.status_message else ''}; a job can only "
            "use a Scheduled or Active plan"
        )
    if TARGET not in info.target_resources and info.target_resources:
        problems.append(
            f"training plan {info.name} is for {', '.join(info.target_resources)}, not training jobs"
        )
    if info.instance_types and instance_type not in info.instance_types:
        problems.append(
            f"training plan {info.name} reserves {', '.join(info.instance_types)}, but the job "
            f"asks for {instance_type} (the types must be equal)"
        )
    total = info.total_instance_count
    free = info.available_instance_count
    if total is not None and total < instance_count:
        problems.append(
            f"training plan {info.name} has {total} instances in all; the job needs "
            f"{instance_count}"
        )
    elif free is not None and info.status == "Active" and free < instance_count:
        warnings.append(
            f"training plan {info.name} has {free} of {total} instances free "
            f"({info.in_use_instance_count or 0} in use); the job waits until {instance_count} "
            "are free (up to 2 days, then InsufficientCapacityError)"
        )

    needed = run_hours + startup_hours
    start = max(now, info.start_time) if info.start_time else now
    left = (info.end_time - start).total_seconds() / 3600 if info.end_time else math.inf
    usable_hours = max(0.0, left - RECLAIM_HOURS)
    fits = needed <= usable_hours
    per_plan = (info.duration_hours or left) - RECLAIM_HOURS - startup_hours
    cycles = 1 if fits else (math.ceil(run_hours / per_plan) if per_plan > 0 else 0)
    extension = 0 if fits else math.ceil(needed - usable_hours)
    if not fits:
        warnings.append(
            f"the predicted run ({run_hours:.1f} h + {startup_hours:g} h start-up) does not fit the "
            f"{usable_hours:.1f} usable hours left on {info.name} (it ends {fmt_time(info.end_time)}, "
            f"instances are reclaimed {RECLAIM_HOURS:g} h before): it needs "
            + (f"{cycles} checkpoint-resume cycles on plans of this length" if cycles else "")
            + f" or ExtendTrainingPlan by {extension} h"
        )
    return PlanFit(
        plan=info.name,
        usable=not problems,
        fits=fits and not problems,
        problems=problems,
        warnings=warnings,
        needed_hours=round(needed, 3),
        usable_hours=round(usable_hours, 3) if math.isfinite(usable_hours) else 1e9,
        resume_cycles=cycles,
        extension_hours=extension,
    )


def require_fit(fit: PlanFit, *, allow_partial: bool = False) -> None:
    """Refuse a plan that cannot take the job (SpecError), or one too short (Infeasible)."""
    if fit.problems:
        raise SpecError(
            "cannot submit on this training plan: " + "; ".join(fit.problems),
            field="compute.training_plan",
            hint="`bsm plans list` shows your plans; `bsm plans search` finds capacity",
        )
    if not fit.fits and not allow_partial:
        raise InfeasiblePlanError(
            "the run does not fit the training plan: " + "; ".join(fit.warnings[-1:]),
            hint="submit with --allow-partial to run until the plan ends (a checkpoint is saved "
            "and `bsm submit --new` on the next plan resumes), or extend the plan",
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
