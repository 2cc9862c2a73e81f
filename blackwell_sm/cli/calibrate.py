"""`bsm calibrate SOURCE... [--out FILE]`: fit the planner's constants to measured runs and write
a calibration profile (blackwell_sm/runs/calibrate.py; docs/calibration.md)."""

from __future__ import annotations

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json
from blackwell_sm.cli.params import REGION, SOURCE

EXACT = "exact by construction, not validated"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:+.1%}"


def _after(x: float | None, figure: str, exact: list[str]) -> str:
    """An error after the fit; for a figure the fit matches by construction, not a 0 %."""
    return "exact*" if figure in exact else _pct(x)


def _median(before: float | None, after: float | None, figure: str, exact: list[str]) -> str:
    if before is None:
        return f"{figure}: not measured"
    was = _pct(before).lstrip("+")
    now = EXACT if figure in exact else f"{_pct(after).lstrip('+')} after"
    return f"{figure} median |error| {was} before, {now}"


@click.command("calibrate")
@click.argument("sources", metavar="SOURCE...", nargs=-1, required=True, type=SOURCE)
@click.option(
    "--out",
    "out",
    metavar="FILE",
    default="calibration.yaml",
    show_default=True,
    help="Where to write the profile (YAML): never a source, nor an existing file that is "
    "not a profile bsm calibrate wrote.",
)
@click.option("--name", default="calibration", show_default=True, help="The profile's name.")
@click.option(
    "--region",
    type=REGION,
    metavar="REGION",
    help="For job sources: default AWS_REGION / the profile's.",
)
@OUTPUT_OPTION
def calibrate(
    sources: tuple[str, ...], out: str, name: str, region: str | None, output: str
) -> None:
    """Fit the planner's efficiency constants per GPU kind to SOURCEs (run directories,
    measurements CSVs, job names), print each row's error before and after, and write the
    profile to --out. Apply it with `bsm plan --calibration FILE`."""
    from blackwell_sm.planner.fit import require_scipy
    from blackwell_sm.runs.calibrate import calibrate as run_calibration
    from blackwell_sm.runs.calibrate import check_profile_out, write_profile
    from blackwell_sm.runs.calibrate_sources import classify

    require_scipy()  # before any source is read or AWS is set up
    check_profile_out(out, sources)  # before the fit: a bad --out is refused at once
    aws = None
    if any(classify(s) == "job" for s in sources):
        from blackwell_sm.cli.submit import aws_context

        aws = aws_context(region)
    result = run_calibration(list(sources), name=name, aws=aws)
    path = write_profile(result.profile, out, sources)
    result = result.model_copy(update={"out": str(path)})
    if output == "json":
        emit_json(result)
        return
    render(result)


def render(result: object) -> None:
    """The rows (error before and after) and the constants (fitted or kept, and why)."""
    from rich.table import Table

    from blackwell_sm.cli.output import out_console, text

    con = out_console()
    rows = Table(title="measured rows: predicted / measured - 1", title_justify="left")
    for col in ("row", "gpu", "tok/s/GPU", "speed before", "after", "memory before", "after"):
        rows.add_column(col)
    for r in result.rows:  # type: ignore[attr-defined]
        tps = r.measured_tokens_per_s_per_gpu
        ex = r.exact_by_construction
        rows.add_row(
            r.id,
            r.gpu,
            "-" if tps is None else f"{tps:,.1f}",
            _pct(r.speed_error_before),
            _after(r.speed_error_after, "speed", ex),
            _pct(r.memory_error_before),
            _after(r.memory_error_after, "memory", ex),
        )
    con.print(rows)
    consts = Table(title="constants", title_justify="left")
    for col in ("gpu", "constant", "default", "calibrated", ""):
        consts.add_column(col)
    for c in result.constants:  # type: ignore[attr-defined]
        consts.add_row(
            c.gpu,
            c.name,
            f"{c.default:.4g}",
            f"{c.value:.4g}" if c.fitted else "(kept)",
            "fitted" if c.fitted else (c.why_kept or ""),
        )
    con.print(consts)
    prof = result.profile  # type: ignore[attr-defined]
    for gpu, entry in prof.gpus.items():
        lo, hi = entry.speed_range or (None, None)
        rng = f", speed range -{lo:.0%}/+{hi:.0%}" if lo is not None else ""
        ex = entry.exact_by_construction
        speed = _median(entry.median_abs_error_before, entry.median_abs_error_after, "speed", ex)
        mem = _median(
            entry.memory_median_abs_error_before, entry.memory_median_abs_error_after, "memory", ex
        )
        con.print(text((gpu, "bold"), f": {speed}; {mem}; {entry.rows} rows{rng}"))
    if any(e.exact_by_construction for e in prof.gpus.values()):
        con.print(
            text(f"exact*: {EXACT}: no more measurements than fitted constants moving the figure")
        )
    if not prof.gpus:
        con.print(text(("no constant could be fitted: the profile changes nothing", "yellow")))
    con.print(
        text(
            ("profile", "bold"),
            f": {result.out}  (apply: bsm plan --calibration {result.out})",  # type: ignore[attr-defined]
        )
    )
