"""Extending a Flexible Training Plan (ExtendTrainingPlan): offerings, the purchase, history.

Extension offerings come from `SearchTrainingPlanOfferings(TrainingPlanArn=...)`: 1-day steps up
to 14 days or 7-day steps up to 182 days, bought between 1 hour and 56 days before the plan
expires. An extension cannot be cancelled, so `extend_plan` shows the fee and the new end time
and needs an explicit yes (`consent`), as reserving does. `bsm plans extend` buys through
`aws/extend_once.py`, which buys at most once per intent.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from blackwell_sm.aws.errors import translate
from blackwell_sm.aws.training_plans import (
    Consent,
    TrainingPlanInfo,
    _fee,
    fmt_time,
    require_consent,
)
from blackwell_sm.errors import SpecError


class ExtensionOffering(BaseModel):
    """One extension a plan can be bought (SearchTrainingPlanOfferings with TrainingPlanArn)."""

    model_config = ConfigDict(extra="forbid")

    offering_id: str
    start: datetime | None
    end: datetime | None
    duration_hours: int
    upfront_fee: str | None
    currency: str | None
    availability_zone: str | None = None

    @classmethod
    def from_api(cls, o: dict[str, Any]) -> ExtensionOffering:
        return cls(
            offering_id=o["TrainingPlanExtensionOfferingId"],
            start=o.get("StartDate"),
            end=o.get("EndDate"),
            duration_hours=o.get("DurationHours", 0),
            upfront_fee=o.get("UpfrontFee"),
            currency=o.get("CurrencyCode"),
            availability_zone=o.get("AvailabilityZone"),
        )

    def describe(self) -> str:
        fee = f"{self.upfront_fee} {self.currency or ''}".strip() if self.upfront_fee else "?"
        return (
            f"+{self.duration_hours / 24:g} days ({self.duration_hours} h): the plan then ends "
            f"{fmt_time(self.end)}; upfront fee {fee} (offering {self.offering_id})"
        )


class Extension(BaseModel):
    """One bought extension (ExtendTrainingPlan / DescribeTrainingPlanExtensionHistory)."""

    model_config = ConfigDict(extra="forbid")

    offering_id: str | None
    extended_at: datetime | None
    start: datetime | None
    end: datetime | None
    status: str | None
    payment_status: str | None
    duration_hours: int | None
    upfront_fee: str | None
    currency: str | None

    @classmethod
    def from_api(cls, e: dict[str, Any]) -> Extension:
        return cls(
            offering_id=e.get("TrainingPlanExtensionOfferingId"),
            extended_at=e.get("ExtendedAt"),
            start=e.get("StartDate"),
            end=e.get("EndDate"),
            status=e.get("Status"),
            payment_status=e.get("PaymentStatus"),
            duration_hours=e.get("DurationHours"),
            upfront_fee=e.get("UpfrontFee"),
            currency=e.get("CurrencyCode"),
        )

    def describe(self) -> str:
        fee = f"{self.upfront_fee} {self.currency or ''}".strip() if self.upfront_fee else "?"
        return (
            f"{fmt_time(self.extended_at)}: +{(self.duration_hours or 0) / 24:g} days to "
            f"{fmt_time(self.end)}, {self.status or '?'} (payment {self.payment_status or '?'}), "
            f"fee {fee}"
        )


def search_extensions(sm: Any, info: TrainingPlanInfo) -> list[ExtensionOffering]:
    """The plan's extension offerings, shortest first, then cheapest."""
    with translate(f"searching extension offerings for training plan {info.name}"):
        resp = sm.search_training_plan_offerings(TrainingPlanArn=info.arn)
    offers = [ExtensionOffering.from_api(o) for o in resp.get("TrainingPlanExtensionOfferings", [])]
    return sorted(offers, key=lambda o: (o.duration_hours, _fee(o.upfront_fee), o.offering_id))


def best_extension(offers: list[ExtensionOffering], hours: float) -> ExtensionOffering | None:
    """The shortest (then cheapest) offering of at least `hours`, or None."""
    return next((o for o in offers if o.duration_hours >= hours), None)


def choose_extension(
    offers: list[ExtensionOffering], *, days: int | None = None, offering_id: str | None = None
) -> ExtensionOffering:
    """The offering named by --offering, or the cheapest of exactly --days days."""
    if offering_id is not None:
        hit = [o for o in offers if o.offering_id == offering_id]
        field, what = "--offering", f"offering {offering_id}"
    else:
        hit = [o for o in offers if o.duration_hours == (days or 0) * 24]
        field, what = "--days", f"an extension of {days} days"
    if not hit:
        durations = sorted({o.duration_hours // 24 for o in offers})
        raise SpecError(
            f"{what} is not among this plan's extension offerings"
            + (f" (days offered: {', '.join(map(str, durations))})" if offers else " (none now)"),
            field=field,
            hint="`bsm plans extend PLAN` lists the offerings (1-day steps up to 14 days, 7-day "
            "steps up to 182; bought 1 hour to 56 days before the plan ends)",
        )
    return hit[0]


def extend_plan(
    sm: Any, info: TrainingPlanInfo, offer: ExtensionOffering, *, consent: Consent = None
) -> list[Extension]:
    """ExtendTrainingPlan with `offer` after `consent` (exit 5 without it). No check of what
    was bought before: `extend_once` is the command's way in."""
    require_consent(
        f"Extend training plan {info.name!r} (ends {fmt_time(info.end_time)}) by "
        + offer.describe(),
        consent=consent,
        ask="Extend it",
    )
    with translate(f"extending training plan {info.name}"):
        resp = sm.extend_training_plan(TrainingPlanExtensionOfferingId=offer.offering_id)
    return [Extension.from_api(e) for e in resp.get("TrainingPlanExtensions", [])]


def extension_history(sm: Any, info: TrainingPlanInfo) -> list[Extension]:
    """DescribeTrainingPlanExtensionHistory, every page, oldest first."""
    out: list[Extension] = []
    token = None
    with translate(f"reading the extension history of training plan {info.name}"):
        while True:
            kw: dict[str, Any] = {"TrainingPlanArn": info.arn}
            if token:
                kw["NextToken"] = token
            resp = sm.describe_training_plan_extension_history(**kw)
            out += [Extension.from_api(e) for e in resp.get("TrainingPlanExtensions", [])]
            token = resp.get("NextToken")
            if not token:
                return out
