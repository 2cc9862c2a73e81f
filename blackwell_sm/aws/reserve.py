"""Reserving a training plan at most once per name (`bsm plans reserve`, `training_plan: auto`).

A plan's name is unique in its account and region, so the name is the intent (its key is
`training_plan-<hash of region and name>`). Under this machine's lock on the name, the plan of
that name is looked up right before buying:

* it exists and matches the request (instance type, count, window): it is used and nothing is
  bought; the command says so;
* it exists and does not match: a clear error naming the differences (exit 2), nothing bought;
* it does not exist: the offering is bought after consent, tagged with the intent key, and
  recorded. A process on another machine that loses the race gets `ResourceInUse` from AWS and
  then uses the winner's plan by the same rules.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from blackwell_sm.aws import training_plans as tp
from blackwell_sm.aws.plan_fit import PlanFit, check_plan, require_fit
from blackwell_sm.aws.purchases import Purchase, intent_key, intent_lock, record_purchase
from blackwell_sm.errors import AwsError, SpecError

if TYPE_CHECKING:
    from blackwell_sm.job.capacity_need import CapacityNeed
    from blackwell_sm.planner.plan import Plan

Notify = Callable[[str], None]
WINDOW_SLACK = timedelta(hours=1)  # an offering's window and the plan bought from it
DEAD = frozenset({"Failed", "Expired"})
AUTO_OFFERINGS_SHOWN = 3


class ReserveOutcome(BaseModel):
    """The plan in force for a reservation intent: bought now (`bought`), or found."""

    model_config = ConfigDict(extra="forbid")

    info: tp.TrainingPlanInfo
    key: str
    bought: Purchase | None
    reason: str


def reserve_key(region: str | None, name: str) -> str:
    return intent_key("training_plan", region=region, name=name)


def mismatches(
    info: tp.TrainingPlanInfo,
    *,
    instance_type: str,
    instance_count: int,
    hours: float | None = None,
    window: tp.Offering | None = None,
) -> list[str]:
    """How an existing plan differs from a reservation request (empty: it is the same)."""
    out = []
    if info.status in DEAD:
        out.append(f"it is {info.status}")
    if info.instance_types and info.instance_types != [instance_type]:
        out.append(f"it reserves {', '.join(info.instance_types)}, not {instance_type}")
    if info.total_instance_count is not None and info.total_instance_count != instance_count:
        out.append(f"it has {info.total_instance_count} instances, not {instance_count}")
    if hours is not None and info.duration_hours is not None and info.duration_hours + 1 < hours:
        out.append(f"it lasts {info.duration_hours:g} h, less than the {hours:g} h asked")
    if window is not None:
        for what, have, want in (
            ("starts", info.start_time, window.start_time),
            ("ends", info.end_time, window.end_time),
        ):
            if have and want and abs(have - want) > WINDOW_SLACK:
                out.append(f"it {what} {tp.fmt_time(have)}, the offering {tp.fmt_time(want)}")
    return out


def reserve_once(
    sm: Any,
    name: str,
    *,
    find_offer: Callable[[], tp.Offering],
    differences: Callable[[tp.TrainingPlanInfo, tp.Offering | None], list[str]],
    consent: tp.Consent,
    say: Notify,
    tags: dict[str, str] | None = None,
    field: str = "--name",
) -> ReserveOutcome:
    """Reserve the offering `find_offer()` returns as plan `name`, unless a plan of that name
    exists (used when `differences` finds none, else refused)."""
    key = reserve_key(sm.meta.region_name, name)
    with intent_lock(f"training-plan-{name}", say=say):
        existing = tp.find_plan(sm, name)
        if existing is not None:
            return _use(existing, key, differences(existing, None), field, "exists already")
        offer = find_offer()
        tp.require_consent(f"Training plan {name!r}: {offer.describe()}", consent=consent)
        try:
            info = tp.reserve(
                sm, offer, name, consent=True, tags={**(tags or {}), "bsm:intent-key": key}
            )
        except AwsError as e:
            if e.code != "resource_in_use":
                raise
            existing = tp.find_plan(sm, name)
            if existing is None:
                raise
            why = "was reserved by another process at the same time"
            return _use(existing, key, differences(existing, offer), field, why)
        purchase = record_purchase(
            Purchase(
                key=key,
                kind="training_plan",
                intent=f"reserve training plan {name}",
                bought_at=datetime.now(UTC),
                region=sm.meta.region_name,
                plan_name=name,
                plan_arn=info.arn,
                offering_id=offer.offering_id,
                duration_hours=offer.duration_hours,
                upfront_fee=offer.upfront_fee,
                currency=offer.currency,
                start=offer.start_time,
                end=offer.end_time,
            ),
            say=say,
        )
    return ReserveOutcome(info=info, key=key, bought=purchase, reason=purchase.describe())


def _use(
    info: tp.TrainingPlanInfo, key: str, problems: list[str], field: str, why: str
) -> ReserveOutcome:
    if problems:
        raise SpecError(
            f"a training plan named {info.name} {why} and does not match this request: "
            + "; ".join(problems)
            + ". Nothing was bought.",
            field=field,
            hint="choose another name, or use that plan as it is",
        )
    return ReserveOutcome(
        info=info,
        key=key,
        bought=None,
        reason=f"training plan {info.name} {why} ({info.status}, "
        f"{', '.join(info.instance_types) or '?'} x {info.total_instance_count or '?'}, "
        f"{tp.fmt_time(info.start_time)} → {tp.fmt_time(info.end_time)}) and matches this "
        "request: it is used, nothing was bought",
    )


def reserve_auto(
    aws: Any,
    plan: Plan,
    *,
    base_name: str,
    run_index: int = 1,
    consent: tp.Consent,
    allow_partial: bool,
    say: Notify,
    need: CapacityNeed,
) -> tuple[tp.TrainingPlanInfo, PlanFit]:
    """`training_plan: auto`: the plan named after the spec, reserved at most once.

    The spec's plan (`auto_plan_name(base)`) is used while it can take the run. The first job
    of a run buys it under that name; a later job of a run (`run_index` N > 1, `aws/run.py`)
    whose spec plan can no longer take it buys its own, `<base>-rN` (a new intent, recomputed
    identically by a retry of `--resume`). A plan of the name being bought that exists (an
    earlier run, a retry, a process that won the race) is used when it can take the run (type,
    count, and the run fits its window, after waiting out Pending); else a clear error."""
    from blackwell_sm.job.names import run_job_name

    sm = aws.plans
    name = tp.auto_plan_name(base_name)
    if run_index > 1:
        spec_plan = tp.find_plan(sm, name)
        if spec_plan is not None and not _cannot_take(spec_plan, plan, need, allow_partial):
            return _checked(sm, spec_plan, plan, need, allow_partial, say, f"using {name}")
        name = tp.auto_plan_name(run_job_name(base_name, run_index))
    hours = need.plan_hours  # the one sizing rule (job/capacity_need.py)

    def find_offer() -> tp.Offering:
        offers = tp.search_offerings(
            sm,
            instance_type=plan.instance.type,
            instance_count=plan.instance.count,
            duration_hours=hours,
            start_after=tp.utcnow(),
        )
        if not offers:
            raise AwsError(
                f"no training plan offerings for {plan.instance.count} x {plan.instance.type} "
                f"for {hours:.0f} h",
                code="capacity",
                hint="try fewer instances, a shorter run (training.total_tokens), another "
                "region, or `bsm plans search` with a later window",
            )
        say("best training plan offerings:")
        for i, o in enumerate(offers[:AUTO_OFFERINGS_SHOWN], 1):
            say(f"  {i}. {o.describe()}")
        return offers[0]

    outcome = reserve_once(
        sm,
        name,
        find_offer=find_offer,
        consent=consent,
        say=say,
        tags={"bsm:job": base_name},
        differences=lambda info, _offer: _cannot_take(info, plan, need, allow_partial),
        field="compute.training_plan",
    )
    said = (
        outcome.reason
        if outcome.bought is None
        else (
            f"reserved training plan {outcome.info.name} ({outcome.info.arn}): "
            + outcome.bought.describe()
        )
    )
    return _checked(sm, outcome.info, plan, need, allow_partial, say, said)


def _fit(info: tp.TrainingPlanInfo, plan: Plan, need: CapacityNeed) -> PlanFit:
    return check_plan(
        info, instance_type=plan.instance.type, instance_count=plan.instance.count, need=need
    )


def _cannot_take(
    info: tp.TrainingPlanInfo, plan: Plan, need: CapacityNeed, allow_partial: bool
) -> list[str]:
    """Why `info` cannot take the run (empty: it can, or it is Pending and is waited for)."""
    problems = mismatches(
        info, instance_type=plan.instance.type, instance_count=plan.instance.count
    )
    fit = _fit(info, plan, need)
    if info.status != "Pending" and not problems and not fit.fits and not allow_partial:
        problems += fit.warnings[-1:] or ["the run does not fit it"]
    return problems


def _checked(
    sm: Any,
    info: tp.TrainingPlanInfo,
    plan: Plan,
    need: CapacityNeed,
    allow_partial: bool,
    say: Notify,
    said: str,
) -> tuple[tp.TrainingPlanInfo, PlanFit]:
    info = tp.wait_until_booked(sm, info)
    fit = _fit(info, plan, need)
    require_fit(fit, allow_partial=allow_partial)
    say(said)
    return info, fit
