"""`bsm plans extend` with a target or a purchase: the flags as an intent (checked before any
AWS call) and the outcome shown. The buying itself is `aws/extend_once.py`."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.cli.output import emit_json, say
from blackwell_sm.errors import SpecError


def extend_intent(
    until: str | None,
    to_fit: str | None,
    days: int | None,
    offering_id: str | None,
    again_after: str | None,
) -> Any:
    """The flags as an ExtendIntent (None: list only); conflicts are exit 2, before AWS."""
    from blackwell_sm.aws.extend_once import ExtendIntent
    from blackwell_sm.cli.training_plans import _when

    if days is not None and offering_id is not None:
        raise SpecError("give --days or --offering, not both", field="--days")
    imperative = "--days" if days is not None else "--offering" if offering_id else None
    for flag, value in (("--until", until), ("--to-fit", to_fit)):
        if value is not None and imperative:
            raise SpecError(
                f"{flag} and {imperative} conflict: say where the plan must end, or what to buy",
                field=flag,
                hint=f"{flag} buys what gets there (a retry buys nothing); {imperative} buys "
                "one extension",
            )
    if again_after is not None and not imperative:
        raise SpecError(
            "--again-after goes with --days or --offering (it names the latest extension, to "
            "buy one more)",
            field="--again-after",
        )
    if again_after is not None and not 0 < len(again_after) <= 256:
        raise SpecError(
            "--again-after: an extension's offering id (1-256 characters)", field="--again-after"
        )
    if until is None and to_fit is None and imperative is None:
        return None
    return ExtendIntent(
        until=_when(until, "--until"),
        to_fit={} if to_fit else None,
        days=days,
        offering_id=offering_id,
        again_after=again_after,
    )


def load_flag_spec(path: str, flag: str) -> Any:
    from blackwell_sm.spec import load_spec

    try:
        return load_spec(path)
    except SpecError as e:
        e.message = f"{flag} {path}: {e.message}"
        e.field = flag if e.field in (None, "SPEC") else f"{flag}: {e.field}"
        raise


def shared_intents(aws: Any, spec: Any) -> Any:
    """Where every machine's claim on a purchase meets: `<job.s3_prefix>/purchase-intents` of
    the spec this plan serves (`--to-fit` or `--spec`); None (said) without one."""
    from blackwell_sm.aws.purchase_intents import SharedIntents, intents_uri

    if spec is None or spec.job is None:
        say(
            "note: no spec (--to-fit or --spec SPEC) names an S3 prefix for the shared purchase "
            "intent: only this machine's lock guards this purchase, so another machine running "
            "the same command at the same time could buy too (docs/spending.md)"
        )
        return None
    if "job.s3_prefix" in spec.job.placeholders():
        raise SpecError(
            "job.s3_prefix is a REPLACE-ME placeholder: the shared purchase intent lives under "
            "it; nothing was bought",
            field="job.s3_prefix",
            hint="set job.s3_prefix to the spec's s3://bucket/prefix",
        )
    return SharedIntents(aws.s3, intents_uri(spec.job.s3_prefix))


def extend_once(
    aws: Any, ref: str, intent: Any, spec: Any, *, yes: bool, output: str, shared_spec: Any = None
) -> None:
    from blackwell_sm.api.capacity import capacity_need, fit, plan_on_training_plan
    from blackwell_sm.aws.extend_once import extend_once as buy_once
    from blackwell_sm.aws.training_plans import describe_plan
    from blackwell_sm.cli.submit import consent_prompt

    shared = shared_intents(aws, spec or shared_spec)  # before any call: a bad prefix is exit 2
    info = describe_plan(aws.plans, ref)
    fits = None
    if spec is not None:
        plan = plan_on_training_plan(spec, info)
        need = capacity_need(plan)
        say(f"the run needs {need.describe()}")
        intent = intent.model_copy(
            update={
                "to_fit": {
                    "instance_type": plan.instance.type,
                    "instance_count": plan.instance.count,
                    "run_hours": round(need.run_hours, 3),
                    "startup_hours": need.startup_hours,
                }
            }
        )

        def fits(end: Any, at: Any) -> bool:
            return fit(info, plan, end=end, now=at).fits

    done = buy_once(
        aws.plans,
        info,
        intent,
        consent=True if yes else consent_prompt(),
        say=say,
        fits=fits,
        shared=shared,
    )
    for w in done.warnings:
        say(f"warning: {w}")
    if output == "json":
        emit_json(done)
        return
    from blackwell_sm.aws.training_plans import fmt_time

    if done.bought is None:
        click.echo(f"nothing bought: {done.reason} (key {done.key})")
        return
    for e in done.extensions:
        click.echo(f"extended {done.plan}: {e.describe()}")
    click.echo(f"{done.bought.describe()}; the plan now ends {fmt_time(done.ends_after)}")
    if done.bought.record:
        click.echo(f"recorded: {done.bought.record}")
    if done.intent_record:
        click.echo(f"claimed for every machine: {done.intent_record}")
