"""`bsm plans search|reserve|extend|list|describe`: SageMaker Flexible Training Plans.

`reserve` and `extend` are the only commands that spend money. They show the upfront fee and
window and ask; with no terminal they refuse unless --yes is given (exit 5).
"""

from __future__ import annotations

import math
from typing import Any

import click

from blackwell_sm.cli import params as p
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.cli.capacity_args import capacity_for
from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json
from blackwell_sm.cli.params import (
    EXTENSION_ID,
    INSTANCE_TYPE,
    ISO_TIME,
    OFFERING_ID,
    PLAN_NAME,
    PLAN_REF,
    REGION,
    SPEC_FILE,
    parse_iso,
)
from blackwell_sm.cli.submit import consent_prompt, say

REGION_OPTION = click.option(
    "--region", type=REGION, metavar="REGION", help="Default: the spec's, AWS_REGION."
)


_when = parse_iso  # ISO_TIME has converted a flag's value already; this takes either


@click.group("plans")
def plans() -> None:
    """Search, reserve and inspect SageMaker Flexible Training Plans (reserved capacity)."""


def _capacity_options(f: Any) -> Any:
    for opt in reversed(
        [
            click.argument("spec_path", metavar="[SPEC.yaml]", required=False, type=SPEC_FILE),
            click.option(
                "--instance-type", type=INSTANCE_TYPE, metavar="TYPE", help="Default: the spec's."
            ),
            click.option("--count", type=p.INSTANCE_COUNT, help="Instances."),
            click.option("--hours", type=p.PLAN_HOURS, help="Duration; default: predicted run."),
            REGION_OPTION,
        ]
    ):
        f = opt(f)
    return f


@plans.command("search")
@_capacity_options
@click.option("--start-after", type=ISO_TIME, metavar="ISO", help="Earliest start (default: now).")
@click.option("--end-before", type=p.FUTURE_TIME, metavar="ISO", help="Latest end.")
@OUTPUT_OPTION
def search(
    spec_path: str | None,
    instance_type: str | None,
    count: int | None,
    hours: float | None,
    region: str | None,
    start_after: str | None,
    end_before: str | None,
    output: str,
) -> None:
    """Offerings for a spec's run (or --instance-type/--count/--hours), earliest first."""
    from blackwell_sm.aws.training_plans import search_offerings, utcnow

    cap = capacity_for(spec_path, instance_type, count, hours, region)
    itype, n, h, region = cap.instance_type, cap.instance_count, cap.hours, cap.region
    p.check_window(_when(start_after, "--start-after"), _when(end_before, "--end-before"), hours=h)
    aws = submit_cli.aws_context(region)
    offers = search_offerings(
        aws.plans,
        instance_type=itype,
        instance_count=n,
        duration_hours=h,
        start_after=_when(start_after, "--start-after") or utcnow(),
        end_before=_when(end_before, "--end-before"),
    )
    if output == "json":
        emit_json(
            {
                "instance_type": itype,
                "instance_count": n,
                "duration_hours": h,
                "region": aws.region,
                "need": cap.need.model_dump(mode="json") if cap.need else None,
                "offerings": [o.model_dump(mode="json") for o in offers],
            }
        )
        return
    if not offers:
        say(f"no offerings for {n} x {itype} for {math.ceil(h)} h in {aws.region}")
        return
    for i, o in enumerate(offers, 1):
        click.echo(f"{i}. {o.describe()}")
    say(
        "reserve one (spends the fee shown; plans cannot be cancelled): bsm plans reserve "
        "OFFERING_ID --name NAME with the same SPEC/--instance-type/--count/--hours"
    )


@plans.command("reserve")
@click.argument("offering_id", metavar="OFFERING_ID", type=OFFERING_ID)
@_capacity_options
@click.option(
    "--name", "plan_name", required=True, type=PLAN_NAME, metavar="NAME", help="The plan's name."
)
@click.option("--yes", "-y", is_flag=True, help="Agree to the upfront fee without a prompt.")
@OUTPUT_OPTION
def reserve(
    offering_id: str,
    spec_path: str | None,
    instance_type: str | None,
    count: int | None,
    hours: float | None,
    region: str | None,
    plan_name: str,
    yes: bool,
    output: str,
) -> None:
    """Buy an offering (CreateTrainingPlan) after showing its fee and window and asking.

    Once per name: when a plan of that name exists (a retry, another terminal or machine), it
    is used if it matches (type, count, window) and nothing is bought; else exit 2."""
    from blackwell_sm.aws.reserve import mismatches, reserve_once
    from blackwell_sm.aws.training_plans import find_offering

    itype, n, h, region, _ = capacity_for(spec_path, instance_type, count, hours, region)
    aws = submit_cli.aws_context(region)
    done = reserve_once(
        aws.plans,
        plan_name,
        find_offer=lambda: find_offering(
            aws.plans, offering_id, instance_type=itype, instance_count=n, duration_hours=h
        ),
        differences=lambda info, offer: mismatches(
            info, instance_type=itype, instance_count=n, hours=h, window=offer
        ),
        consent=True if yes else consent_prompt(),
        say=say,
    )
    info = done.info
    if output == "json":
        emit_json(
            {
                **info.model_dump(mode="json"),
                "key": done.key,
                "bought": done.bought and done.bought.model_dump(mode="json"),
                "reason": done.reason,
            }
        )
        return
    click.echo(f"reserved {info.name}: {info.arn} ({info.status})")
    click.echo(
        done.reason if done.bought is None else f"{done.reason}; recorded: {done.bought.record}"
    )
    click.echo(f"use it: compute.training_plan: {info.name}  (or --training-plan {info.name})")


@plans.command("extend")
@click.argument("ref", metavar="PLAN", type=PLAN_REF)
@click.option("--until", type=p.FUTURE_TIME, metavar="ISO", help="Until the plan ends by then.")
@click.option(
    "--to-fit",
    "to_fit",
    metavar="SPEC.yaml",
    type=SPEC_FILE,
    help="Extend until SPEC's predicted run fits the plan.",
)
@click.option("--days", type=click.IntRange(1, 182), help="Buy the extension of this many days.")
@click.option(
    "--offering", "offering_id", type=EXTENSION_ID, metavar="ID", help="Buy this offering."
)
@click.option(
    "--again-after",
    "again_after",
    type=EXTENSION_ID,
    metavar="EXTENSION",
    help="With --days/--offering: buy although the plan was extended in the last 24 h, naming "
    "that latest extension (its offering id).",
)
@click.option(
    "--spec",
    "spec_path",
    type=SPEC_FILE,
    help="Say whether SPEC's run fits; when buying, claim the purchase under SPEC's "
    "job.s3_prefix so that no other machine buys it too (as --to-fit does).",
)
@click.option("--yes", "-y", is_flag=True, help="Agree to the upfront fee without a prompt.")
@REGION_OPTION
@OUTPUT_OPTION
def extend(
    ref: str,
    until: str | None,
    to_fit: str | None,
    days: int | None,
    offering_id: str | None,
    again_after: str | None,
    spec_path: str | None,
    yes: bool,
    region: str | None,
    output: str,
) -> None:
    """Extend a training plan (ExtendTrainingPlan), at most once per intent.

    Without a flag: list the extension offerings (fee, currency, new end). --until TIME and/or
    --to-fit SPEC say where the plan must end: the cheapest shortest offering that gets there
    is bought, and a retry buys nothing. --days N / --offering ID buy one extension, refused
    when the plan was extended in the last 24 hours unless --again-after names that extension.
    Each purchase is shown, asked for, and recorded with its key (docs/spending.md)."""
    from blackwell_sm.aws import extensions as ext
    from blackwell_sm.aws.training_plans import describe_plan
    from blackwell_sm.cli.extend_once import extend_intent, extend_once, load_flag_spec

    intent = extend_intent(until, to_fit, days, offering_id, again_after)
    to_fit_spec = load_flag_spec(to_fit, "--to-fit") if to_fit else None
    if region is None and ref.startswith("arn:"):
        region = ref.split(":")[3]
    aws = submit_cli.aws_context(region)
    if intent is not None:
        named = load_flag_spec(spec_path, "--spec") if spec_path and not to_fit_spec else None
        extend_once(aws, ref, intent, to_fit_spec, yes=yes, output=output, shared_spec=named)
        return
    info = describe_plan(aws.plans, ref)
    offers = ext.search_extensions(aws.plans, info)
    fits = {o.offering_id: _fits_after(info, o, spec_path) for o in offers} if spec_path else {}
    if output == "json":
        rows = [{**o.model_dump(mode="json"), "run_fits": fits.get(o.offering_id)} for o in offers]
        emit_json({"plan": info.model_dump(mode="json"), "offerings": rows})
        return
    if not offers:
        say(
            f"no extension offerings for {info.name} now (extensions are bought 1 hour to 56 "
            "days before a plan ends)"
        )
    for i, o in enumerate(offers, 1):
        verdict = (
            ""
            if o.offering_id not in fits
            else ("; the run then fits" if fits[o.offering_id] else "; the run still does not fit")
        )
        click.echo(f"{i}. {o.describe()}{verdict}")
    if offers:
        say(
            f"buy one (spends the fee shown; extensions cannot be cancelled): bsm plans extend "
            f"{info.name} --until TIME (or --to-fit SPEC, --offering ID, --days N)"
        )


def _fits_after(info: Any, offer: Any, spec_path: str) -> bool:
    """Whether SPEC's run fits the plan once `offer` extends it to its end."""
    from blackwell_sm.api.capacity import fit, plan_on_training_plan

    plan = plan_on_training_plan(spec_path, info)
    return fit(info, plan, end=offer.end or info.end_time).fits


@plans.command("list")
@click.option(
    "--status",
    "status_",
    type=click.Choice(["Pending", "Active", "Scheduled", "Expired", "Failed"]),
)
@REGION_OPTION
@OUTPUT_OPTION
def list_plans(status_: str | None, region: str | None, output: str) -> None:
    """This account's training plans in the region, newest first."""
    from blackwell_sm.aws.training_plans import list_plans as do_list

    aws = submit_cli.aws_context(region)
    rows = do_list(aws.plans, status=status_)
    if output == "json":
        emit_json([r.model_dump(mode="json") for r in rows])
        return
    if not rows:
        say(f"no training plans in {aws.region}")
    for r in rows:
        click.echo(_plan_line(r))


def _plan_line(r: Any) -> str:
    from blackwell_sm.aws.training_plans import fmt_time

    free = (
        f"{r.available_instance_count}/{r.total_instance_count} free"
        if r.total_instance_count is not None
        else ""
    )
    return (
        f"{r.name}  {r.status:<9}  {', '.join(r.instance_types) or '?'}  {free}  "
        f"{fmt_time(r.start_time)} → {fmt_time(r.end_time)}"
    )


@plans.command("describe")
@click.argument("ref", metavar="NAME|ARN", type=PLAN_REF)
@click.option("--spec", "spec_path", type=SPEC_FILE, help="Also check a spec's run fits.")
@REGION_OPTION
@OUTPUT_OPTION
def describe(ref: str, spec_path: str | None, region: str | None, output: str) -> None:
    """A training plan's status, capacity and window (and, with --spec, whether a run fits)."""
    from blackwell_sm.aws.extensions import extension_history
    from blackwell_sm.aws.training_plans import describe_plan

    fit = None
    if spec_path:
        from blackwell_sm.spec import load_spec

        spec = load_spec(spec_path)
        region = region or (spec.job.region if spec.job else None)
    if region is None and ref.startswith("arn:"):
        region = ref.split(":")[3]
    aws = submit_cli.aws_context(region)
    info = describe_plan(aws.plans, ref)
    history = extension_history(aws.plans, info)
    if spec_path:
        from blackwell_sm.api.capacity import fit as fit_of
        from blackwell_sm.api.capacity import plan_on_training_plan

        fit = fit_of(info, plan_on_training_plan(spec, info))
    if output == "json":
        emit_json(
            {
                "plan": info.model_dump(mode="json"),
                "fit": fit and fit.model_dump(mode="json"),
                "extensions": [e.model_dump(mode="json") for e in history],
            }
        )
        return
    click.echo(_plan_line(info))
    click.echo(f"arn: {info.arn}")
    if info.upfront_fee:
        click.echo(f"upfront fee: {info.upfront_fee} {info.currency or ''}")
    if info.status_message:
        click.echo(f"message: {info.status_message}")
    click.echo(f"extensions: {len(history) or 'none'}")
    for e in history:
        click.echo(f"  - {e.describe()}")
    if fit is not None:
        verdict = "fits" if fit.fits else "usable, but too short" if fit.usable else "unusable"
        click.echo(
            f"this spec's run: {verdict} (needs {fit.needed_hours:.1f} h, {fit.usable_hours:.1f} h usable)"
        )
        click.echo(f"  sized: {fit.need.describe()}")
        for p in fit.problems + fit.warnings:
            click.echo(f"  - {p}")
