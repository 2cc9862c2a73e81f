"""`bsm report RUN_DIR|JOB [--out report.html]`: one self-contained HTML file of a run
(blackwell_sm/runs/report.py)."""

from __future__ import annotations

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json


@click.command("report")
@click.argument("run", metavar="RUN_DIR|JOB")
@click.option(
    "--out",
    "out",
    metavar="FILE",
    help="Where to write the HTML (default: RUN_DIR/report.html, or JOB-report.html).",
)
@click.option("--region", metavar="REGION", help="For a job: default AWS_REGION / the profile's.")
@OUTPUT_OPTION
def report(run: str, out: str | None, region: str | None, output: str) -> None:
    """Write an HTML report of a run: loss, speed and MFU against the plan, peak memory against
    the plan and the limit, checkpoint saves, stops and resumes, and measured vs predicted."""
    from pathlib import Path

    from blackwell_sm.atomic_write import check_out_path
    from blackwell_sm.runs.report import write_report

    if out is not None:
        check_out_path(out, flag="--out")  # before drawing: a bad --out is refused at once
    aws = None
    if not Path(run).is_dir() and "/" not in run:
        from blackwell_sm.aws.session import AwsContext

        aws = AwsContext(region)
    result = write_report(run, out, aws=aws)
    if output == "json":
        emit_json({"report": str(result.path), "summary": result.summary})
        return
    click.echo(f"report: {result.path}")
    click.echo(f"  {result.summary}")
