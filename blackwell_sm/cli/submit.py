"""`bsm submit SPEC.yaml`: plan, book capacity if asked, upload, create (or reattach), follow."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, say
from blackwell_sm.cli.params import PLAN_OR_AUTO, REGION, SPEC_FILE
from blackwell_sm.cli.progress import ProgressDisplay, wait_poller
from blackwell_sm.errors import BsmError


class Interrupted(BsmError):
    """Ctrl-C while waiting or following: the job keeps running (exit 130)."""

    exit_code = 130
    kind = "interrupted"


def reattach_hint(name: str) -> str:
    return (
        f"the job keeps running on SageMaker. Reattach with `bsm status {name}` or "
        f"`bsm logs {name} --follow` (`bsm stop {name}` stops it)"
    )


def aws_context(region: str | None) -> Any:
    """The AWS context the commands use (one seam, so tests can attach Stubbers)."""
    from blackwell_sm.aws.session import AwsContext

    return AwsContext(region)


def consent_prompt() -> Any:
    """A y/N prompt on the terminal for spending money, or None when there is no one to ask
    (CI, pipes): the AWS layer then refuses with exit 5 unless --yes was given."""
    if not (sys.stdin.isatty() and sys.stderr.isatty()):
        return None
    return lambda text: click.confirm(text, default=False, err=True)


def print_log_event(event: Any, *, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(event.model_dump(mode="json")) + "\n")
    else:
        sys.stdout.write(f"{event.host} | {event.message.rstrip()}\n")
    sys.stdout.flush()


@click.command("submit")
@click.argument("spec_path", metavar="SPEC.yaml", type=SPEC_FILE)
@click.option(
    "--training-plan",
    type=PLAN_OR_AUTO,
    metavar="ARN|NAME|auto",
    help="Run on this Flexible Training Plan (overrides compute.training_plan); auto searches "
    "offerings and asks before reserving one.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan and the exact request; no AWS call.")
@click.option("--wait", is_flag=True, help="Wait for the job to end (Ctrl-C stops waiting only).")
@click.option("--logs", "follow_logs", is_flag=True, help="Follow the job's logs until it ends.")
@click.option("--new", is_flag=True, help="A fresh job name instead of reattaching to this spec's.")
@click.option(
    "--yes",
    "-y",
    is_flag=True,
    help="Agree to spending money: reserving a plan (training_plan auto), a run over "
    "compute.confirm_cost_usd.",
)
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Accept a training plan that ends before the predicted run (resume on the next one).",
)
@click.option(
    "--until-done",
    is_flag=True,
    help="Follow the run: when a job ends on MaxRuntime or the end of its capacity block with a "
    "newer checkpoint, submit the next (<name>-r2, -r3, ...) until the run is done.",
)
@click.option(
    "--resume",
    is_flag=True,
    help="One step of --until-done by hand (e.g. from CI): submit the run's next job if the "
    "last one ended resumably, else say why not.",
)
@click.option(
    "--region", type=REGION, metavar="REGION", help="Default: job.region, AWS_REGION, the profile."
)
@OUTPUT_OPTION
def submit(
    spec_path: str,
    training_plan: str | None,
    dry_run: bool,
    wait: bool,
    follow_logs: bool,
    new: bool,
    yes: bool,
    allow_partial: bool,
    until_done: bool,
    resume: bool,
    region: str | None,
    output: str,
) -> None:
    """Submit SPEC.yaml as a SageMaker training job, or reattach to the one it already made.

    The job name is bsm-<model>-<hash>, the hash over the spec, the plan's configuration and
    the capacity (instance type and count, the training plan as written): running the same
    spec on the same capacity again (e.g. a CI rerun) returns the existing job instead of
    creating a second one; --new forces a fresh job, which resumes from the spec's checkpoints.
    """
    from blackwell_sm.aws.session import check_settings
    from blackwell_sm.aws.submit import region_choice
    from blackwell_sm.aws.submit import submit as do_submit
    from blackwell_sm.errors import SpecError
    from blackwell_sm.spec import load_spec, with_overrides

    check_settings()  # bad AWS_* settings are exit 2 before anything else happens
    _run_flags(until_done, resume, dry_run=dry_run, new=new, wait=wait, logs=follow_logs)
    for flag, on, what in (("--wait", wait, "wait for"), ("--logs", follow_logs, "follow")):
        if dry_run and on:
            raise SpecError(
                f"--dry-run and {flag} conflict: a dry run creates no job to {what}",
                field=flag,
                hint=f"drop {flag} for a dry run, or --dry-run to submit",
            )
    spec = load_spec(spec_path)
    choice = region_choice(spec, region)
    say(choice.describe())
    if region:
        spec = with_overrides(spec, {"job.region": region})
    if until_done or resume:
        _run(
            spec,
            until_done=until_done,
            training_plan=training_plan,
            yes=yes,
            allow_partial=allow_partial,
            aws=aws_context(region or (spec.job.region if spec.job else None)),
            output=output,
        )
        return
    with ProgressDisplay(output) as progress:
        job = do_submit(
            spec,
            training_plan=training_plan,
            new=new,
            yes=yes,
            dry_run=dry_run,
            allow_partial=allow_partial,
            aws=None if dry_run else aws_context(region or (spec.job.region if spec.job else None)),
            confirm=consent_prompt(),
            notify=say,
            progress=progress,
        )
    job.region_source = choice.source  # as printed above: --region counts as the flag
    if dry_run:
        _show_dry_run(job, output)
        return
    for w in job.warnings:
        say(f"warning: {w}")
    result: dict[str, Any] = job.to_dict()
    result.pop("request", None)
    if wait or follow_logs:
        try:
            if follow_logs:
                for event in job.logs(follow=True, notify=say):
                    if output == "json":  # stdout carries only the final JSON document
                        say(f"{event.host} | {event.message.rstrip()}")
                    else:
                        print_log_event(event, output="table")
            with ProgressDisplay(output) as display:
                final = job.wait(
                    on_status=lambda i: say(f"{i.name}: {i.status} / {i.secondary_status}"),
                    on_poll=wait_poller(job, display),
                )
        except KeyboardInterrupt:
            raise Interrupted("stopped waiting", hint=reattach_hint(job.name)) from None
        result["status"] = final.model_dump(mode="json")
        say(f"{job.name} ended {final.status}")
    if output == "json":
        emit_json(result)
    else:
        verb = "reattached to" if job.reattached else "submitted"
        click.echo(f"{verb} {job.name} ({job.region})")
        if not (wait or follow_logs):
            click.echo(f"follow it: bsm logs {job.name} --follow    status: bsm status {job.name}")


def _run_flags(until_done: bool, resume: bool, **others: bool) -> None:
    from blackwell_sm.errors import SpecError

    if until_done and resume:
        raise SpecError("--until-done and --resume conflict: give one", field="--resume")
    flag = "--until-done" if until_done else "--resume" if resume else None
    if flag is None:
        return
    for name, on in others.items():
        if on:
            other = "--" + name.replace("_", "-")
            raise SpecError(
                f"{flag} and {other} conflict: a run names its jobs <name>, <name>-r2, ... and "
                + ("follows them itself" if name in ("wait", "logs") else "submits them itself"),
                field=other,
            )


def _run(spec: Any, *, until_done: bool, output: str, **kw: Any) -> None:
    from blackwell_sm.aws.run import submit_run

    try:
        jobs = submit_run(
            spec,
            until_done=until_done,
            confirm=consent_prompt(),
            notify=say,
            on_status=lambda i: say(f"{i.name}: {i.status} / {i.secondary_status}"),
            **kw,
        )
    except KeyboardInterrupt:
        raise Interrupted(
            "stopped following the run",
            hint="the current job keeps running; "
            "`bsm submit SPEC --resume` continues the run later",
        ) from None
    names = [j.name for j in jobs]
    if output == "json":
        emit_json({"submitted": names, "until_done": until_done})
    elif names:
        click.echo("submitted " + ", ".join(names))
    else:
        click.echo("no job submitted")


def _show_dry_run(job: Any, output: str) -> None:
    jr = job.job_request
    placeholders = jr.placeholders
    if output == "json":
        emit_json(
            {
                "dry_run": True,
                "job_name": jr.job_name,
                "region": jr.region,
                "region_source": job.region_source,
                "spec_hash": jr.spec_hash,
                "bundle_s3_uri": jr.bundle_s3_uri,
                "bundle": jr.bundle.model_dump(mode="json"),
                "placeholders": placeholders,
                "unresolved_training_plan": jr.unresolved_training_plan,
                "unresolved_preference_plans": jr.unresolved_preference_plans,
                "warnings": jr.warnings,
                "request": jr.request,
                "plan": job.plan.model_dump(mode="json"),
                **(
                    {"preferences": job.preference_plans.model_dump(mode="json")["preferences"]}
                    if job.preference_plans
                    else {}
                ),
            }
        )
    else:
        from blackwell_sm.cli.plan_render import render, render_preferences

        if job.preference_plans:
            render_preferences(job.preference_plans)
        else:
            render(job.plan)
        click.echo(f"\n# CreateTrainingJob request ({jr.region}); nothing was sent or uploaded")
        click.echo(json.dumps(jr.request, indent=2, default=str))
        _show_bundle(jr.bundle, jr.bundle_s3_uri)
        _show_carried(jr.bundle)
    for w in jr.warnings:
        say(f"warning: {w}")
    if placeholders:
        say(
            "dry run OK, but `bsm submit` will refuse until these REPLACE-ME placeholders are "
            "set: " + ", ".join(placeholders)
        )


def _mib(n: int) -> str:
    return f"{n / 2**20:.2f} MiB" if n >= 2**20 else f"{n / 1024:.1f} KiB"


def _show_bundle(bundle: Any, uri: str) -> None:
    """The bundle in short: its size, its members by folder, the largest ones."""
    groups: dict[str, list[int]] = {}
    for name, size in zip(bundle.files, bundle.sizes, strict=True):
        top = name.split("/", 1)[0] + "/" if "/" in name else name
        groups.setdefault(top, []).append(size)
    click.echo(
        f"# code bundle: {bundle.size_bytes} bytes ({_mib(bundle.size_bytes)} compressed, "
        f"{_mib(sum(bundle.sizes))} of members), {len(bundle.files)} files → {uri}"
    )
    for top, sizes in groups.items():
        count = f"{len(sizes)} files, " if top.endswith("/") else ""
        why = f" ({bundle.package_source})" if top == "blackwell_sm/" else ""
        click.echo(f"#   {top}: {count}{_mib(sum(sizes))}{why}")
    largest = sorted(zip(bundle.sizes, bundle.files, strict=True), reverse=True)[:3]
    click.echo("#   largest: " + ", ".join(f"{name} ({_mib(size)})" for size, name in largest))


def _show_carried(bundle: Any) -> None:
    """What the container's bootstrap checks and what the bundle carries for it, and why."""
    click.echo(f"# container requirements (wheels for {bundle.target}):")
    for r in bundle.requirements:
        where = "carried" if r.carried else "the image's"
        click.echo(f"#   {r.name}{r.spec or ' (any)'}: {where}; {r.why}")
    for w in bundle.carried:
        click.echo(
            f"#   wheel {w.file} ({w.size_bytes / 2**20:.2f} MiB) for {', '.join(w.needed_by)}"
        )
    click.echo(f"# carried wheels: {len(bundle.carried)}, {bundle.wheels_bytes / 2**20:.2f} MiB")
