"""`bsm report RUN [RUN...] [--out report.html]`: one self-contained HTML file of a run, or of
several overlaid (blackwell_sm/runs/report.py)."""

from __future__ import annotations

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json
from blackwell_sm.cli.params import REGION, RUN_OR_JOB


@click.command("report")
@click.argument("runs", metavar="RUN_DIR|JOB", type=RUN_OR_JOB, nargs=-1, required=True)
@click.option(
    "--out",
    "out",
    metavar="FILE",
    help="Where to write the HTML (default: RUN_DIR/report.html, or JOB-report.html; "
    "compare-report.html for several runs). Never a run's own file, nor an existing file "
    "bsm report did not write.",
)
@click.option(
    "--region", type=REGION, metavar="REGION", help="For a job: default AWS_REGION / the profile's."
)
@OUTPUT_OPTION
def report(runs: tuple[str, ...], out: str | None, region: str | None, output: str) -> None:
    """Write an HTML report of a run, or of several overlaid (e.g. before and after
    calibration): loss; speed and MFU against the plan; peak memory against the plan and the
    limit; learning rate and gradient norm; checkpoint saves, stops and resumes; and measured
    against predicted."""
    from pathlib import Path

    from blackwell_sm.runs.report import check_report_out, write_report

    check_report_out(runs, out)  # before any AWS or drawing: a bad --out is refused at once
    aws = None
    if any(not Path(r).is_dir() and "/" not in r for r in runs):
        from blackwell_sm.cli.submit import aws_context

        aws = aws_context(region)
    result = write_report(list(runs), out, aws=aws)
    if output == "json":
        emit_json({"report": str(result.path), "runs": list(runs), "summary": result.summary})
        return
    click.echo(f"report: {result.path}")
    click.echo(f"  {result.summary}")
