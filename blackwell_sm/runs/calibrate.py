"""`bsm calibrate`: measured rows from runs, CSVs and jobs, a least-squares fit of the planner's
constants per GPU kind (`planner/fit.py`), and the calibration profile it writes
(`planner/profile.py`). Client side: never imports torch.

A source is one of:
- a local run directory (`bsm run-local --out DIR`, or an /opt/ml-shaped tree): `plan.json` and
  `output/data/summary.json` (or `metrics.jsonl` when the run left no summary);
- a measurements CSV in the format of `shared/reference/measurements.csv` (also read by
  `benchmarks/planner_accuracy.py`, through `csv_rows` here);
- a SageMaker training job name: its plan from the code bundle in S3 and its measured figures from
  the output's `summary.json`, else from the `[bsm-step]` lines of its CloudWatch logs.
"""

from __future__ import annotations

import datetime as dt
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.planner.fit import GpuFit, Row, fit, require_scipy
from blackwell_sm.planner.profile import (
    CalibrationProfile,
    GpuProfile,
    ProfileConstants,
    ProfileSource,
)
from blackwell_sm.runs.calibrate_sources import load_rows

# ---------------------------------------------------------------------------------------------
# calibrate: sources -> rows -> fits -> profile
# ---------------------------------------------------------------------------------------------


def pin_cpu_peak(rows: list[Row]) -> tuple[list[Row], float | None]:
    """Local CPU rows with one matmul rate, the median of their runs' timed rates (TFLOP/s).

    `bsm run-local` times this machine's matmul rate at the start of each run; on a shared
    machine that figure moved by up to 2.6x between runs (benchmarks/README.md) while the step
    time did not follow it. The
    profile records the median as this machine's rate (`peak_tflops` of its `cpu` entry), so a
    calibrated local plan no longer carries one run's timing noise."""
    peaks = [r.ctx.instance.gpu.peak_tflops["bf16"] for r in rows if r.gpu == "cpu"]
    if not peaks:
        return rows, None
    peak = round(statistics.median(peaks), 9)
    out = []
    for r in rows:
        if r.gpu == "cpu":
            inst = r.ctx.instance
            gpu = inst.gpu.model_copy(update={"peak_tflops": {"bf16": peak}})
            r = r._replace(ctx=r.ctx._replace(instance=inst.model_copy(update={"gpu": gpu})))
        out.append(r)
    return out, peak


def predict_with(profile: CalibrationProfile | None, row: Row) -> float:
    """`row`'s predicted tokens/s/GPU with `profile` applied as `bsm plan` applies it."""
    from blackwell_sm.planner.fit import predict
    from blackwell_sm.planner.profile import for_instance

    inst, k, _ = for_instance(profile, row.ctx.instance)
    return predict(row._replace(ctx=row.ctx._replace(instance=inst)), k).tokens_per_s_per_gpu


def gpu_profile(f: GpuFit) -> GpuProfile:
    """The profile entry of one GPU's fit: only the fitted constants; errors after the fit left
    out (None) for a figure the fit matches by construction."""
    mm: dict[str, float] = {}
    other: dict[str, float] = {}
    for name, (_, value) in f.fitted.items():
        if name.startswith("matmul_efficiency."):
            mm[name.split(".", 1)[1]] = round(value, 5)
        else:
            other[name] = round(value, 5)
    return GpuProfile(
        constants=ProfileConstants(matmul_efficiency=mm or None, **other),
        speed_range=f.speed_range,
        rows=len(f.errors),
        fitted=list(f.fitted),
        kept=list(f.kept),
        median_abs_error_before=_round(f.median_abs("speed_before")),
        median_abs_error_after=_after(f, "speed", f.median_abs("speed_after")),
        memory_median_abs_error_before=_round(f.median_abs("memory_before")),
        memory_median_abs_error_after=_after(f, "memory", f.median_abs("memory_after")),
        exact_by_construction=list(f.exact),
    )


def _after(f: GpuFit, figure: str, error: float | None) -> float | None:
    """An error after the fit, or None when the fit matches `figure` by construction."""
    return None if figure in f.exact else _round(error)


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


class RowReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    gpu: str
    measured_tokens_per_s_per_gpu: float | None
    speed_error_before: float | None
    speed_error_after: float | None
    measured_memory_gib: float | None
    memory_error_before: float | None
    memory_error_after: float | None
    exact_by_construction: list[str] = Field(
        default_factory=list,
        description="Figures the fit matches by construction: their error after is None (not "
        "validated, not 0).",
    )


class ConstantReport(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gpu: str
    name: str
    default: float
    value: float
    fitted: bool
    why_kept: str | None = None


class CalibrationResult(BaseModel):
    """What `bsm calibrate` prints (and `--output json` emits)."""

    model_config = ConfigDict(extra="forbid")

    profile: CalibrationProfile
    out: str | None = Field(None, description="Where the profile was written.")
    rows: list[RowReport]
    constants: list[ConstantReport]


def calibrate(
    sources: list[str],
    *,
    name: str = "calibration",
    aws: Any = None,
    now: dt.datetime | None = None,
) -> CalibrationResult:
    """Fit every GPU kind of the sources' rows; the profile and the report (nothing written)."""
    require_scipy()  # before any source is read
    rows, recorded = load_rows(sources, aws)
    return calibrate_rows(rows, recorded, name=name, now=now)


def calibrate_rows(
    rows: list[Row],
    recorded: list[ProfileSource] | None = None,
    *,
    name: str = "calibration",
    now: dt.datetime | None = None,
) -> CalibrationResult:
    """`calibrate` on rows already read (benchmarks/planner_accuracy.py's leave-one-out)."""
    from blackwell_sm.planner.fit import get_param

    rows, cpu_peak = pin_cpu_peak(rows)
    fits = fit(rows)
    when = (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")
    gpus = {gpu: gpu_profile(f) for gpu, f in fits.items() if f.fitted}
    if cpu_peak is not None and "cpu" in gpus:
        gpus["cpu"] = gpus["cpu"].model_copy(update={"peak_tflops": {"bf16": cpu_peak}})
    profile = CalibrationProfile(name=name, created=when, sources=recorded or [], gpus=gpus)
    by_id = {r.id: r for r in rows}
    reports = [
        RowReport(
            id=e.id,
            gpu=f.gpu,
            measured_tokens_per_s_per_gpu=by_id[e.id].tokens_per_s_per_gpu,
            speed_error_before=_round(e.speed_before),
            speed_error_after=_after(f, "speed", e.speed_after),
            measured_memory_gib=by_id[e.id].memory_gib,
            memory_error_before=_round(e.memory_before),
            memory_error_after=_after(f, "memory", e.memory_after),
            exact_by_construction=list(f.exact),
        )
        for f in fits.values()
        for e in f.errors
    ]
    consts = []
    for f in fits.values():
        for n, (a, b) in f.fitted.items():
            consts.append(
                ConstantReport(gpu=f.gpu, name=n, default=a, value=round(b, 5), fitted=True)
            )
        for n, why in f.kept.items():
            v = get_param(f.base, n)
            consts.append(
                ConstantReport(gpu=f.gpu, name=n, default=v, value=v, fitted=False, why_kept=why)
            )
    return CalibrationResult(profile=profile, rows=reports, constants=consts)


#: The first line of every profile: an existing file without it is never overwritten.
PROFILE_MARK = "# blackwell_sm calibration profile"


def check_profile_out(out: str | Path, sources: Sequence[str] = ()) -> Path:
    """`out` checked: not one of `sources` nor holding one, and an existing file only when
    it is a profile bsm calibrate wrote (`output_place.check_file_output`)."""
    from blackwell_sm.output_place import check_file_output

    return check_file_output(out, sources, mark=PROFILE_MARK, command="bsm calibrate")


def write_profile(
    profile: CalibrationProfile, out: str | Path, sources: Sequence[str] = ()
) -> Path:
    """Write `profile` to `out` (checked first: `check_profile_out`)."""
    from blackwell_sm.atomic_write import write_text  # atomic: a reader never sees half a file

    check_profile_out(out, sources)
    return write_text(out, profile.to_yaml(), flag="--out")
