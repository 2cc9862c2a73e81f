"""`bsm status|logs|stop|list`: a training job by name, or this toolkit's jobs."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.aws.views import hours_of
from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, snake_keys
from blackwell_sm.cli.params import JOB_NAME, JOB_STATUS, NAME_CONTAINS, REGION, SECONDS
from blackwell_sm.cli.progress import ProgressDisplay, wait_poller
from blackwell_sm.cli.submit import Interrupted, print_log_event, reattach_hint, say
from blackwell_sm.errors import AwsError

REGION_OPTION = click.option(
    "--region",
    type=REGION,
    metavar="REGION",
    help="Default: AWS_REGION / AWS_DEFAULT_REGION / the profile.",
)


def _job(name: str, region: str | None) -> Any:
    from blackwell_sm.aws.handle import TrainingJob
    from blackwell_sm.aws.session import check_settings, choose_region

    check_settings()
    say(choose_region(region).describe())
    return TrainingJob(name, aws=submit_cli.aws_context(region))


@click.command("status")
@click.argument("name", metavar="JOB", type=JOB_NAME)
@click.option("--wait", is_flag=True, help="Poll until the job ends.")
@REGION_OPTION
@OUTPUT_OPTION
def status(name: str, wait: bool, region: str | None, output: str) -> None:
    """Show a training job's status (and why it failed, if it did)."""
    from blackwell_sm.aws.jobs import JobInfo

    job = _job(name, region)
    described = None  # one DescribeTrainingJob serves the status and the progress
    if wait:
        try:
            with ProgressDisplay(output) as display:
                info = job.wait(
                    on_status=lambda i: say(f"{i.name}: {i.status} / {i.secondary_status}"),
                    raise_on_failure=False,
                    on_poll=wait_poller(job, display),
                )
        except KeyboardInterrupt:
            raise Interrupted("stopped waiting", hint=reattach_hint(name)) from None
    else:
        described = job.describe()
        info = JobInfo.from_describe(described)
    from blackwell_sm.aws.run import run_summary

    run = run_summary(job.aws, name)
    try:
        progress = job.progress(described)
    except AwsError as e:  # the status stands without it (a role without logs access, say)
        from blackwell_sm.aws.progress import Progress

        progress = Progress(
            job_name=name, status=info.status, notes=[f"progress unavailable: {e.message}"]
        )
    if output == "json":
        described_json = info.model_dump(mode="json")
        described_json["instance_preferences"] = snake_keys(info.instance_preferences)
        emit_json(
            {
                **described_json,
                "running_plan": info.running_plan,
                "region": job.region,
                "run": run and run.model_dump(mode="json"),
                "progress": progress.model_dump(mode="json"),
            }
        )
    else:
        show_info(info, job.region)
        show_progress(progress)
        if run is not None:
            show_run(run)


def show_info(info: Any, region: str | None = None) -> None:
    """The job rows of `bsm status` (aws/views.py: the notebook's repr shows the same)."""
    from blackwell_sm.aws.views import status_rows

    _echo_rows(status_rows(info, region))


def show_progress(p: Any) -> None:
    """The progress rows of `bsm status`, after a blank line."""
    from blackwell_sm.aws.views import progress_rows

    click.echo("")
    _echo_rows(progress_rows(p))


def _echo_rows(rows: list[tuple[str, str]]) -> None:
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


def show_run(run: Any) -> None:
    """The run this job belongs to: each job, and the steps, tokens and time so far."""
    click.echo(f"\nrun {run.base}: {len(run.jobs)} jobs")
    for j in run.jobs:
        why = f" ({j.failure_reason})" if j.failure_reason else ""
        click.echo(
            f"  {j.index}. {j.name}  {j.status} / {j.secondary_status or '-'}  "
            f"{j.instance}  {hours_of(j.billable_seconds)} billable{why}"
        )
    steps = "-" if run.steps_done is None else f"{run.steps_done:,}"
    tokens = "-" if run.tokens_done is None else f"{run.tokens_done:,}"
    click.echo(
        f"  so far: {steps} steps, {tokens} tokens, {hours_of(run.billable_seconds)} "
        f"billable job time; checkpoint {run.checkpoint or '-'}"
    )


@click.command("logs")
@click.argument("name", metavar="JOB", type=JOB_NAME)
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option(
    "--timeout",
    type=SECONDS,
    metavar="SECONDS",
    help="Stop following after this long (default: the job's max runtime + 1 h).",
)
@REGION_OPTION
@OUTPUT_OPTION
def logs(name: str, follow: bool, timeout: float | None, region: str | None, output: str) -> None:
    """Print a training job's CloudWatch logs, every instance (algo-N) interleaved by time.

    --output json prints one JSON object per line (stream, host, timestamp_ms, message).
    """
    job = _job(name, region)
    try:
        for event in job.logs(follow=follow, timeout_s=timeout, notify=say):
            print_log_event(event, output=output)
    except KeyboardInterrupt:
        raise Interrupted("stopped following", hint=reattach_hint(name)) from None


@click.command("stop")
@click.argument("name", metavar="JOB", type=JOB_NAME)
@REGION_OPTION
@OUTPUT_OPTION
def stop(name: str, region: str | None, output: str) -> None:
    """Stop a training job: SIGTERM, the loop saves a checkpoint, SageMaker kills after ~120 s."""
    info = _job(name, region).stop()
    if output == "json":
        emit_json(info)
    elif info.status in ("Completed", "Failed", "Stopped"):
        click.echo(f"{name} had already ended: {info.status}")
    else:
        click.echo(
            f"{name}: {info.status} (a --new submit of the same spec resumes from its checkpoints)"
        )


@click.command("list")
@click.option(
    "--status", "status_", type=JOB_STATUS, metavar="STATUS", help="InProgress, Completed, ..."
)
@click.option("--name-contains", type=NAME_CONTAINS, metavar="TEXT")
@click.option("--limit", type=click.IntRange(1, 1000), default=20, show_default=True)
@click.option("--all", "all_jobs", is_flag=True, help="Every training job, not only bsm's.")
@REGION_OPTION
@OUTPUT_OPTION
def list_jobs(
    status_: str | None,
    name_contains: str | None,
    limit: int,
    all_jobs: bool,
    region: str | None,
    output: str,
) -> None:
    """List this toolkit's training jobs (those with a bsm:spec-hash tag), newest first."""
    from blackwell_sm.aws.jobs import list_jobs as do_list

    aws = submit_cli.aws_context(region)
    rows = do_list(
        aws.sagemaker,
        name_contains=name_contains,
        status=status_,
        limit=limit,
        only_ours=not all_jobs,
    )
    if output == "json":
        emit_json(snake_keys(rows))
        return
    if not rows:
        say(f"no {'' if all_jobs else 'bsm '}training jobs in {aws.region}")
        return
    width = max(len(r["TrainingJobName"]) for r in rows)
    for r in rows:
        created = r["CreationTime"].strftime("%Y-%m-%d %H:%M")
        click.echo(f"{r['TrainingJobName']:<{width}}  {r['TrainingJobStatus']:<10}  {created}")
