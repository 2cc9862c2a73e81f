"""Buying an extension of a training plan at most once per intent (`bsm plans extend`).

* declarative (`until` a time, and/or until a run `fits`): the plan's end, counting the
  extensions in its history (`DescribeTrainingPlanExtensionHistory`), is read just before
  buying; a plan that already ends late enough gets nothing, so a retry buys nothing;
* imperative (`days`, `offering_id`): refused (exit 5) when the history shows an extension
  bought in the last `RECENT_EXTENSION_WINDOW` (24 h), unless `again_after` names the latest
  one (the person saying "I know about that one: buy one more"); an offering already in the
  history is never bought again.

The reads and the purchase happen under this machine's lock on the plan (`aws/purchases.py`)
and, given the spec's S3 prefix, after a claim in S3 that every machine shares
(`aws/purchase_intents.py`). Every purchase is recorded with its key.
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
from blackwell_sm.aws.purchase_intents import (
    SharedIntents,
    claim,
    release,
    settle,
    state_token,
    wait_settled,
)
from blackwell_sm.aws.purchases import Purchase, intent_key, intent_lock, record_purchase
from blackwell_sm.aws.training_plans import Consent, TrainingPlanInfo, describe_plan, fmt_time
from blackwell_sm.errors import ConsentRequiredError, InfeasiblePlanError, SpecError

RECENT_EXTENSION_WINDOW = timedelta(hours=24)
MAX_CLAIM_ROUNDS = 3  # claims another machine released without buying, then give up
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
    intent_record: str | None = Field(
        None, description="The S3 claim shared by every machine (aws/purchase_intents.py)."
    )


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


def _decide(
    info: TrainingPlanInfo,
    history: list[Extension],
    offers: list[ExtensionOffering],
    intent: ExtendIntent,
    fits: Fits | None,
    now: datetime,
) -> tuple[ExtensionOffering | None, str]:
    """(the offering to buy, '') or (None, why nothing is bought); raises for refusals."""
    end = effective_end(info, history)
    if intent.declarative:
        latest = _latest(_recent(history, now))
        at = min(now, latest.extended_at) if latest and latest.extended_at else now
        offer = choose_for_target(info, end, offers, intent, fits, at)
        if offer is None:
            return None, (
                f"training plan {info.name} already ends {fmt_time(end)}, which meets the "
                "target: nothing bought"
            )
        return offer, ""
    offer = choose_extension(offers, days=intent.days, offering_id=intent.offering_id)
    why = _check_imperative(info, history, offer, intent, now)
    return (None, why + ": nothing bought") if why is not None else (offer, "")


def extend_once(
    sm: Any,
    first: TrainingPlanInfo,
    intent: ExtendIntent,
    *,
    consent: Consent,
    say: Notify,
    fits: Fits | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
    shared: SharedIntents | None = None,
) -> ExtendOutcome:
    """Buy at most one extension of plan `first` (as described before) for `intent`, after
    reading again, under this machine's lock, what AWS has, and (with `shared`) after claiming
    the purchase in S3 for every machine (see the module docstring)."""
    key = intent.key(first.arn)
    words = intent.describe(first.name)
    claimed = None
    with intent_lock(f"training-plan-{first.name}", say=say):
        for _ in range(MAX_CLAIM_ROUNDS):
            info = describe_plan(sm, first.arn)  # fresh, now that no process here can buy
            history = extension_history(sm, info)
            end = effective_end(info, history)
            outcome = ExtendOutcome(
                plan=info.name,
                key=key,
                intent=words,
                bought=None,
                reason="",
                ends_before=end,
                ends_after=end,
            )
            offer, why = _decide(info, history, search_extensions(sm, info), intent, fits, now())
            if offer is None:
                return outcome.model_copy(update={"reason": why})
            if shared is None:
                break
            state = state_token([e.offering_id for e in history])
            claimed = claim(shared.s3, shared.folder, key, state, words)
            if claimed.won:
                break
            held = claimed.claim
            if held is None or held.status != "bought":
                held = wait_settled(shared.s3, claimed.uri, say=say)
            if held is not None and held.purchase is not None:  # bought for this very state
                return outcome.model_copy(
                    update={
                        "reason": f"another machine bought it for this intent: "
                        f"{held.purchase.describe()} (intent record {claimed.uri}): nothing bought",
                        "intent_record": claimed.uri,
                    }
                )
            claimed = None  # released without buying: read AWS again and decide again
        else:
            raise ConsentRequiredError(
                f"the purchase intent for {words} was claimed and released "
                f"{MAX_CLAIM_ROUNDS} times by other machines; nothing was bought",
                code="intent_claimed",
                hint="run the command again once the other machines are done",
            )
        try:
            bought = extend_plan(sm, info, offer, consent=consent)
        except BaseException:
            if claimed is not None and shared is not None:
                release(shared.s3, claimed.uri, say=say)
            raise
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
        if claimed is not None and claimed.claim is not None and shared is not None:
            settle(shared.s3, claimed.uri, claimed.claim, purchase, say=say)
        after = extension_history(sm, info)
    warnings = [
        f"another extension of {info.name} appeared meanwhile (another machine?): {e.describe()}"
        for e in others_since(history, after, offer.offering_id)
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
        intent_record=claimed.uri if claimed else None,
    )


def others_since(before: list[Extension], after: list[Extension], mine: str) -> list[Extension]:
    """The extensions in `after` that are neither in `before` nor the one just bought (`mine`):
    counted one for one, so a second purchase of the same offering is one of them."""
    left = list(after)
    for e in [*before, None]:
        wanted = e.offering_id if e is not None else mine
        hit = next((x for x in left if x.offering_id == wanted), None)
        if hit is not None:
            left.remove(hit)
    return [e for e in left if e.status not in FAILED]
