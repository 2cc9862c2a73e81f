"""`bsm submit SPEC.yaml`: plan, book capacity if asked, upload, create (or reattach), follow."""

from __future__ import annotations

import json
import sys
from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, say


def reattach_hint(name: str) -> str:
    return (
        f"the job keeps running on SageMaker. Reattach with `bsm status {name}` or "
        f"`bsm logs {name} --follow` (`bsm stop {name}` stops it)"
    )


def aws_context(region: str | None) -> Any:
    """The AWS context the commands use (one seam, so tests can attach Stubbers)."""
    from blackwell_sm.aws.session import AwsContext

    return AwsContext(region)


def print_log_event(event: Any, *, output: str) -> None:
    if output == "json":
        sys.stdout.write(json.dumps(event.model_dump(mode="json")) + "\n")
    else:
        sys.stdout.write(f"{event.host} | {event.message.rstrip()}\n")
    sys.stdout.flush()


@click.command("submit")
@click.argument("spec_path", metavar="SPEC.yaml", type=click.Path(dir_okay=False))
@click.option(
    "--training-plan",
    metavar="ARN|NAME|auto",
    help="Run on this Flexible Training Plan (overrides compute.training_plan); auto searches "
    "offerings and asks before reserving one.",
)
@click.option("--dry-run", is_flag=True, help="Print the plan and the exact request; no AWS call.")
@click.option("--wait", is_flag=True, help="Wait for the job to end (Ctrl-C stops waiting only).")
@click.option("--logs", "follow_logs", is_flag=True, help="Follow the job's logs until it ends.")
@click.option("--new", is_flag=True, help="A fresh job name instead of reattaching to this spec's.")
@click.option("--yes", "-y", is_flag=True, help="Agree to reserving a plan (training_plan auto).")
@click.option(
    "--allow-partial",
    is_flag=True,
    help="Accept a training plan that ends before the predicted run (resume on the next one).",
)
@click.option("--region", metavar="REGION", help="Default: job.region, AWS_REGION, the profile.")
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
    region: str | None,
    output: str,
) -> None:
    """Submit SPEC.yaml as a SageMaker training job, or reattach to the one it already made.

    The job name is <model>-<spec hash>: running the same spec again (e.g. a CI rerun) returns
    the existing job instead of creating a second one; --new forces a fresh job, which resumes
    from the spec's checkpoints.
    """
    from blackwell_sm.aws.submit import submit as do_submit
    from blackwell_sm.errors import SpecError
    from blackwell_sm.spec import load_spec, with_overrides

    for flag, on, what in (("--wait", wait, "wait for"), ("--logs", follow_logs, "follow")):
        if dry_run and on:
            raise SpecError(
                f"--dry-run and {flag} conflict: a dry run creates no job to {what}",
                field=flag,
                hint=f"drop {flag} for a dry run, or --dry-run to submit",
            )
    spec = load_spec(spec_path)
    if region:
        spec = with_overrides(spec, {"job.region": region})
    job = do_submit(
        spec,
        training_plan=training_plan,
        new=new,
        yes=yes,
        dry_run=dry_run,
        allow_partial=allow_partial,
        aws=None if dry_run else aws_context(region or (spec.job.region if spec.job else None)),
        notify=say,
    )
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
            final = job.wait(
                on_status=lambda i: say(f"{i.name}: {i.status} / {i.secondary_status}"),
            )
        except KeyboardInterrupt:
            say(f"\nstopped waiting: {reattach_hint(job.name)}")
            raise SystemExit(130) from None
        result["status"] = final.model_dump(mode="json")
        say(f"{job.name} ended {final.status}")
    if output == "json":
        emit_json(result)
    else:
        verb = "reattached to" if job.reattached else "submitted"
        click.echo(f"{verb} {job.name} ({job.region})")
        if not (wait or follow_logs):
            click.echo(f"follow it: bsm logs {job.name} --follow    status: bsm status {job.name}")


def _show_dry_run(job: Any, output: str) -> None:
    jr = job.job_request
    placeholders = jr.placeholders
    if output == "json":
        emit_json(
            {
                "dry_run": True,
                "job_name": jr.job_name,
                "region": jr.region,
                "spec_hash": jr.spec_hash,
                "bundle_s3_uri": jr.bundle_s3_uri,
                "bundle": jr.bundle.model_dump(mode="json"),
                "placeholders": placeholders,
                "unresolved_training_plan": jr.unresolved_training_plan,
                "warnings": jr.warnings,
                "request": jr.request,
                "plan": job.plan.model_dump(mode="json"),
            }
        )
    else:
        from blackwell_sm.cli.plan import render

        render(job.plan)
        click.echo(f"\n# CreateTrainingJob request ({jr.region}); nothing was sent or uploaded")
        click.echo(json.dumps(jr.request, indent=2, default=str))
        click.echo(
            f"# code bundle: {jr.bundle.size_bytes} bytes, {len(jr.bundle.files)} files, "
            f"→ {jr.bundle_s3_uri}"
        )
    for w in jr.warnings:
        say(f"warning: {w}")
    if placeholders:
        say(
            "dry run OK, but `bsm submit` will refuse until these REPLACE-ME placeholders are "
            "set: " + ", ".join(placeholders)
        )
