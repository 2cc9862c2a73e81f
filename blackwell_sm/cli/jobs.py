"""`bsm status|logs|stop|list`: a training job by name, or this toolkit's jobs."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, snake_keys
from blackwell_sm.cli.progress import ProgressDisplay, wait_poller
from blackwell_sm.cli.submit import Interrupted, print_log_event, reattach_hint, say
from blackwell_sm.errors import AwsError
from blackwell_sm.planner.units import hours_text

REGION_OPTION = click.option(
    "--region", metavar="REGION", help="Default: AWS_REGION / AWS_DEFAULT_REGION / the profile."
)


def _job(name: str, region: str | None) -> Any:
    from blackwell_sm.aws.handle import TrainingJob
    from blackwell_sm.aws.session import check_settings, choose_region

    check_settings()
    say(choose_region(region).describe())
    return TrainingJob(name, aws=submit_cli.aws_context(region))


def _fmt_time(ts: Any) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S %Z") if ts else "-"


def _capacity_rows(info: Any) -> list[tuple[str, str]]:
    """Instances and plan; with instance preferences, the list, SageMaker's choice and the
    bundle plan that runs on it."""
    if not info.instance_preferences:
        return [
            ("instances", f"{info.instance_count} x {info.instance_type}"),
            ("training plan", info.training_plan_arn or "- (on-demand capacity)"),
        ]
    prefs = ", ".join(
        f"{p.get('InstanceCount')} x {p.get('InstanceType')}"
        + (
            f" on {p['TrainingPlanArns'][0].rsplit('/', 1)[-1]}"
            if p.get("TrainingPlanArns")
            else ""
        )
        for p in info.instance_preferences
    )
    if info.selected_instance_type:
        selected = f"{info.selected_instance_count} x {info.selected_instance_type}"
        plan = info.selected_training_plan or "- (on-demand capacity)"
        runs = info.running_plan
    else:
        selected, plan, runs = "- (not chosen yet)", "-", "- (chosen when SageMaker picks a type)"
    return [
        ("preferences", prefs),
        ("selected", selected),
        ("training plan", plan),
        ("plan run", runs),
    ]


def show_info(info: Any, region: str | None = None) -> None:
    rows = [
        ("job", info.name),
        ("region", region or "-"),
        ("status", f"{info.status} / {info.secondary_status or '-'}"),
        ("message", info.status_message or "-"),
        *_capacity_rows(info),
        ("created", _fmt_time(info.creation_time)),
        ("started", _fmt_time(info.training_start_time)),
        ("ended", _fmt_time(info.training_end_time)),
        ("billable", _hours(info.billable_seconds)),
        ("max runtime", _hours(info.max_runtime_s)),
        ("model", info.model_artifacts or "-"),
    ]
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")
    if info.failure_reason:
        click.echo(f"{'failure':<{width}}  {info.failure_reason}")
        if info.failure_explanation:
            click.echo(f"{'what to do':<{width}}  {info.failure_explanation}")
    for metric, value in sorted(info.final_metrics.items()):
        click.echo(f"{metric:<{width}}  {value:g}")


@click.command("status")
@click.argument("name", metavar="JOB")
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

        progress = Progress(job_name=name, status=info.status,
                            notes=[f"progress unavailable: {e.message}"])  # fmt: skip
    if output == "json":
        described_json = info.model_dump(mode="json")
        described_json["instance_preferences"] = snake_keys(info.instance_preferences)
        emit_json({**described_json, "running_plan": info.running_plan,
                   "region": job.region, "run": run and run.model_dump(mode="json"),
                   "progress": progress.model_dump(mode="json")})  # fmt: skip
    else:
        show_info(info, job.region)
        show_progress(progress)
        if run is not None:
            show_run(run)


def _num(value: float | None, fmt: str = ",.1f") -> str:
    return "-" if value is None else format(value, fmt)


def _duration(seconds: float) -> str:
    """A countdown to the minute (an ETA); totals take `_hours`, as the plan shows them."""
    h, rest = divmod(round(seconds), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def _hours(seconds: float | None) -> str:
    """A duration as the plan shows one (planner/units.py): hours, days over 48 h, minutes."""
    return "-" if not seconds else hours_text(seconds / 3600)


def _in_time(ok: bool | None, end: Any) -> str:
    if end is None:
        return "-"
    verdict = "" if ok is None else ("  (ends before it)" if ok else "  (the run ends AFTER it)")
    return _fmt_time(end) + verdict


def show_progress(p: Any) -> None:
    """The progress rows of `bsm status`: the latest step, the check's measured against
    predicted, the ETA against the deadlines, the alerts."""
    if p.step is None and not p.check:
        for note in p.notes:  # nothing logged yet: only why
            click.echo(f"{'note':<15}  {note}")
        return
    of = f" of {p.total_steps:,}" if p.total_steps else ""
    rows = [("step", "-" if p.step is None else f"{p.step:,}{of}  at {_fmt_time(p.as_of)}"),
            ("tokens", _num(p.tokens, ",d"))]  # fmt: skip
    speed = f"{_num(p.tokens_per_s_per_gpu)} tokens/s/GPU"
    if p.predicted_tokens_per_s_per_gpu is not None:
        rng = (f", range {_num(p.predicted_range[0])}-{_num(p.predicted_range[1])}"
               if p.predicted_range else "")  # fmt: skip
        speed += f"  (predicted {_num(p.predicted_tokens_per_s_per_gpu)}{rng})"
    rows += [("speed", speed), ("mfu", _num(p.mfu, ".3f"))]
    mem = f"{_num(p.mem_reserved_gib, '.2f')} GiB peak reserved"
    if p.predicted_mem_high_gib is not None:
        mem += f"  (plan's range up to {p.predicted_mem_high_gib:.2f} GiB)"
    rows.append(("memory", mem))
    c = p.check
    if c:
        rows.append(("check", f"step time {_num(c.get('check:step_time_s'), '.3f')} s = compute "
                     f"{_num(c.get('check:compute_s'), '.3f')} s + exposed communication "
                     f"{_num(c.get('check:exposed_comm_s'), '.3f')} s + other"))  # fmt: skip
    eta = "-" if p.eta_s is None else f"{_duration(p.eta_s)} (ends {_fmt_time(p.projected_end)})"
    rows += [("eta", eta),
             ("max runtime end", _in_time(p.ends_before_max_runtime, p.max_runtime_end))]  # fmt: skip
    if p.training_plan:
        rows.append(("plan end", _in_time(p.ends_before_plan_end, p.training_plan_end)))
    rows += [("alert", a) for a in p.alerts] + [("note", n) for n in p.notes]
    click.echo("")
    width = max(len(k) for k, _ in rows)
    for key, value in rows:
        click.echo(f"{key:<{width}}  {value}")


def show_run(run: Any) -> None:
    """The run this job belongs to: each job, and the steps, tokens and time so far."""
    click.echo(f"\nrun {run.base}: {len(run.jobs)} jobs")
    for j in run.jobs:
        why = f" ({j.failure_reason})" if j.failure_reason else ""
        click.echo(f"  {j.index}. {j.name}  {j.status} / {j.secondary_status or '-'}  "
                   f"{j.instance}  {_hours(j.billable_seconds)} billable{why}")  # fmt: skip
    steps = "-" if run.steps_done is None else f"{run.steps_done:,}"
    tokens = "-" if run.tokens_done is None else f"{run.tokens_done:,}"
    click.echo(f"  so far: {steps} steps, {tokens} tokens, {_hours(run.billable_seconds)} "
               f"billable job time; checkpoint {run.checkpoint or '-'}")  # fmt: skip


@click.command("logs")
@click.argument("name", metavar="JOB")
@click.option("--follow", "-f", is_flag=True, help="Keep printing until the job ends.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=1),
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
@click.argument("name", metavar="JOB")
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
@click.option("--status", "status_", metavar="STATUS", help="InProgress, Completed, Failed, ...")
@click.option("--name-contains", metavar="TEXT")
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
