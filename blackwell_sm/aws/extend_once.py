"""Buying an extension of a training plan at most once per intent (`bsm plans extend`).

* declarative (`until` a time, and/or until a run `fits`): the plan's end, counting the
  extensions in its history (`DescribeTrainingPlanExtensionHistory`), is read just before
  buying; a plan that already ends late enough gets nothing, so a retry buys nothing;
* imperative (`days`, `offering_id`): refused (exit 5) when the history shows an extension
  bought in the last `RECENT_EXTENSION_WINDOW` (24 h), unless `again_after` names the latest
  one (the person saying "I know about that one: buy one more"); an offering already in the
  history is never bought again.

The reads and the purchase happen under this machine's lock on the plan (`aws/purchases.py`);
two machines are not serialised (docs/spending.md). Every purchase is recorded with its key.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.aws.extensions import (
    Extension,
    ExtensionOffering,
    choose_extension,
    extend_plan,
    extension_history,
    search_extensions,
)
from blackwell_sm.aws.purchases import Purchase, intent_key, intent_lock, record_purchase
from blackwell_sm.aws.training_plans import Consent, TrainingPlanInfo, describe_plan, fmt_time
from blackwell_sm.errors import ConsentRequiredError, InfeasiblePlanError, SpecError

RECENT_EXTENSION_WINDOW = timedelta(hours=24)
FAILED = frozenset({"Failed"})
Notify = Callable[[str], None]


class ExtendIntent(BaseModel):
    """What `bsm plans extend` was asked: a target (`until`, `fits`) or a purchase (`days`,
    `offering_id`, with `again_after` naming the latest extension to buy one more)."""

    model_config = ConfigDict(extra="forbid")

    until: datetime | None = None
    to_fit: dict[str, Any] | None = None  # the run's identity (type, count, hours) for the key
    days: int | None = None
    offering_id: str | None = None
    again_after: str | None = None

    @property
    def declarative(self) -> bool:
        return self.until is not None or self.to_fit is not None

    def key(self, plan_arn: str) -> str:
        until = self.until.astimezone(UTC).isoformat() if self.until else None
        return intent_key(
            "extension",
            plan=plan_arn,
            until=until,
            to_fit=self.to_fit,
            days=self.days,
            offering=self.offering_id,
            after=self.again_after,
        )

    def target(self) -> str:
        """The declarative target in words ('' for an imperative intent)."""
        parts = [f"end at or after {fmt_time(self.until)}" if self.until else ""]
        parts.append("fit the run" if self.to_fit else "")
        return " and ".join(p for p in parts if p)

    def describe(self, name: str) -> str:
        if self.declarative:
            return f"extend {name} to {self.target()}"
        what = f"by {self.days} days" if self.days else f"with offering {self.offering_id}"
        return f"extend {name} {what}" + (f" after {self.again_after}" if self.again_after else "")


class ExtendOutcome(BaseModel):
    """What `extend_once` did: bought one extension (`bought`), or nothing and why."""

    model_config = ConfigDict(extra="forbid")

    plan: str
    key: str
    intent: str
    bought: Purchase | None
    reason: str
    ends_before: datetime | None
    ends_after: datetime | None
    extensions: list[Extension] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)


def effective_end(info: TrainingPlanInfo, history: list[Extension]) -> datetime | None:
    """When the plan ends counting every extension not Failed (a Pending one counts: the
    plan's own EndTime may move only once it is paid)."""
    ends = [e.end for e in history if e.end and e.status not in FAILED]
    ends += [info.end_time] if info.end_time else []
    return max(ends) if ends else None


def _recent(history: list[Extension], now: datetime) -> list[Extension]:
    return [
        e
        for e in history
        if e.status not in FAILED
        and (e.extended_at is None or now - e.extended_at <= RECENT_EXTENSION_WINDOW)
    ]


def _latest(history: list[Extension]) -> Extension | None:
    far = datetime.min.replace(tzinfo=UTC)
    live = [e for e in history if e.status not in FAILED]
    return max(live, key=lambda e: e.extended_at or far) if live else None


def _new_end(info: TrainingPlanInfo, end: datetime | None, offer: ExtensionOffering) -> Any:
    if offer.end is not None:
        return offer.end
    base = end or info.end_time
    return base + timedelta(hours=offer.duration_hours) if base else None


Fits = Callable[[datetime | None, datetime], bool]  # (plan end, as of when) -> the run fits


def choose_for_target(
    info: TrainingPlanInfo,
    end: datetime | None,
    offers: list[ExtensionOffering],
    intent: ExtendIntent,
    fits: Fits | None,
    at: datetime,
) -> ExtensionOffering | None:
    """None when the plan already reaches the target; else the shortest (then cheapest)
    offering that does; InfeasiblePlanError when none does. The run's fit is judged as of
    `at` (when the plan was last extended, within the window, else now), so that a retry later
    in the day does not find the run "no longer fitting" only because time has passed."""

    def reaches(when: datetime | None) -> bool:
        late = intent.until is None or (when is not None and when >= intent.until)
        return late and (fits is None or fits(when, at))

    if reaches(end):
        return None
    for offer in offers:
        if reaches(_new_end(info, end, offer)):
            return offer
    longest = max(offers, key=lambda o: o.duration_hours, default=None)
    raise InfeasiblePlanError(
        f"no extension offering of {info.name} makes it {intent.target()} (it ends "
        f"{fmt_time(end)}"
        + (f"; the longest offered, {longest.describe()}" if longest else "; none offered now")
        + ")",
        hint="extensions: 1-day steps up to 14 days, 7-day steps up to 182 days, bought 1 hour "
        "to 56 days before the plan ends; `bsm plans search` finds a new plan",
    )


def _check_imperative(
    info: TrainingPlanInfo,
    history: list[Extension],
    offer: ExtensionOffering,
    intent: ExtendIntent,
    now: datetime,
) -> str | None:
    """Why this imperative purchase must not happen (None: it may). Raises for refusals."""
    if any(e.offering_id == offer.offering_id for e in history):
        return f"extension offering {offer.offering_id} of {info.name} was bought already"
    latest = _latest(history)
    if intent.again_after is not None:
        if not any(e.offering_id == intent.again_after for e in history):
            known = ", ".join(e.offering_id or "?" for e in history) or "none"
            raise SpecError(
                f"--again-after {intent.again_after}: no such extension of {info.name} "
                f"(its extensions: {known})",
                field="--again-after",
                hint="`bsm plans describe PLAN` lists them",
            )
        if latest is not None and latest.offering_id != intent.again_after:
            raise _already_extended(info, latest, f"since {intent.again_after}, ")
        return None
    recent = _recent(history, now)
    if recent:
        raise _already_extended(info, _latest(recent) or recent[-1], "")
    return None


def _already_extended(info: TrainingPlanInfo, e: Extension, since: str) -> ConsentRequiredError:
    window = RECENT_EXTENSION_WINDOW.total_seconds() / 3600
    return ConsentRequiredError(
        f"{since}training plan {info.name} was extended at {fmt_time(e.extended_at)} "
        f"(extension {e.offering_id}: {e.describe()}); a retried or repeated --days would buy "
        f"again, so nothing was bought (window: {window:g} h)",
        code="already_extended",
        hint=f"to buy one more anyway, add --again-after {e.offering_id}; to make the plan end "
        "at a time, use --until TIME (or --to-fit SPEC), which a retry turns into no purchase",
    )


def extend_once(
    sm: Any,
    first: TrainingPlanInfo,
    intent: ExtendIntent,
    *,
    consent: Consent,
    say: Notify,
    fits: Fits | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> ExtendOutcome:
    """Buy at most one extension of plan `first` (as described before) for `intent`, after
    reading again, under this machine's lock, what AWS has (see the module docstring)."""
    key = intent.key(first.arn)
    words = intent.describe(first.name)
    with intent_lock(f"training-plan-{first.name}", say=say):
        info = describe_plan(sm, first.arn)  # fresh, now that no process here can buy
        history = extension_history(sm, info)
        end = effective_end(info, history)
        offers = search_extensions(sm, info)

        def nothing(reason: str) -> ExtendOutcome:
            return ExtendOutcome(
                plan=info.name,
                key=key,
                intent=words,
                bought=None,
                reason=reason,
                ends_before=end,
                ends_after=end,
            )

        if intent.declarative:
            latest = _latest(_recent(history, now()))
            at = min(now(), latest.extended_at) if latest and latest.extended_at else now()
            offer = choose_for_target(info, end, offers, intent, fits, at)
            if offer is None:
                return nothing(
                    f"training plan {info.name} already ends {fmt_time(end)}, which "
                    "meets the target: nothing bought"
                )
        else:
            offer = choose_extension(offers, days=intent.days, offering_id=intent.offering_id)
            why = _check_imperative(info, history, offer, intent, now())
            if why is not None:
                return nothing(why + ": nothing bought")
        bought = extend_plan(sm, info, offer, consent=consent)
        at = next((e.extended_at for e in bought if e.extended_at), None) or now()
        purchase = record_purchase(
            Purchase(
                key=key,
                kind="extension",
                intent=words,
                bought_at=at,
                region=sm.meta.region_name,
                plan_name=info.name,
                plan_arn=info.arn,
                offering_id=offer.offering_id,
                duration_hours=offer.duration_hours,
                upfront_fee=offer.upfront_fee,
                currency=offer.currency,
                start=offer.start,
                end=_new_end(info, end, offer),
            ),
            say=say,
        )
        after = extension_history(sm, info)
    known = {e.offering_id for e in history} | {offer.offering_id}
    others = [e for e in after if e.offering_id not in known and e.status not in FAILED]
    warnings = [
        f"another extension of {info.name} appeared meanwhile (another machine?): {e.describe()}"
        for e in others
    ]
    return ExtendOutcome(
        plan=info.name,
        key=key,
        intent=words,
        bought=purchase,
        reason=f"bought {offer.describe()}",
        ends_before=end,
        ends_after=effective_end(info, after) or purchase.end,
        extensions=bought,
        warnings=warnings,
    )
