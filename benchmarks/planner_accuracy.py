"""Planner accuracy: re-predict every row of the reference measurements with its configuration
pinned, and print predicted vs measured peak memory and tokens/s per GPU (one JSON line per figure).

CSVs: argv[1:], else $BSM_MEASUREMENTS_CSV, else the shared reference
(/work/shared/reference/measurements.csv: ../shared relative to the repo's parent, or to a
worktree's) plus this project's own rows in benchmarks/data/measurements.csv (each with its
source). Targets (fitted FSDP rows): memory median |error| <= 10%, tokens/s median |error| <= 15%.
Megatron rows (not FSDP) are upper bounds: reported with the ratio predicted / their figure, not
fitted. Rows of benchmarks/data are held out (FSDP2 measurements the constants were not fitted
on): reported, not in the fitted medians.

Hardware the catalog lacks: the torchtitan H100 rows ran on H100 96 GB HBM2e parts capped at
500 W. We model them as an ml.p5.48xlarge whose GPU has 93.58 GiB usable and dense peaks scaled by
calibration.H100_500W_CLOCK_DERATE (0.72); network as the row notes (400 Gb/s per GPU = 3200 Gb/s
per node, as on p5). H200 rows map to ml.p5en.48xlarge, B200 to ml.p6-b200.48xlarge. The mapping
lives in blackwell_sm/runs/calibrate_sources.py (`csv_row`), shared with `bsm calibrate`.

Leave-one-out calibration (`planner_accuracy.loo.*` lines): for every FSDP row (fitted and held
out), `bsm calibrate`'s fit on all the other rows of its GPU kind, then that row predicted with the
profile; the median |error| before (calibration.py's constants) and after. `$BSM_LOCAL_RUNS`
(run directories separated by ':') adds this machine's `bsm run-local` runs to the same test.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
from pathlib import Path

from blackwell_sm.planner.fit import Row, predict
from blackwell_sm.planner.search import Evaluation, evaluate
from blackwell_sm.runs.calibrate import calibrate_rows, predict_with
from blackwell_sm.runs.calibrate_sources import csv_row, is_upper_bound, run_rows

REPO = Path(__file__).resolve().parents[1]
OWN_CSV = REPO / "benchmarks" / "data" / "measurements.csv"


#: The shared reference (`shared/reference/measurements.csv`, read-only, outside the repository),
#: copied here so the benchmark and its test need no file outside the repository;
#: tests/test_benchmarks.py checks the copy against the shared file wherever that one exists.
REFERENCE_CSV = REPO / "benchmarks" / "data" / "reference-measurements.csv"


def shared_csv() -> Path:
    """The shared reference CSV: the repository's copy of it."""
    return REFERENCE_CSV


def shared_original() -> Path | None:
    """The shared reference itself, above the repository (a worktree sits one level deeper)."""
    for up in REPO.parents:
        candidate = up / "shared" / "reference" / "measurements.csv"
        if candidate.is_file():
            return candidate
    return None


def csv_paths() -> list[Path]:
    if len(sys.argv) > 1:
        return [Path(a) for a in sys.argv[1:]]
    if os.environ.get("BSM_MEASUREMENTS_CSV"):
        return [Path(os.environ["BSM_MEASUREMENTS_CSV"])]
    return [shared_csv(), OWN_CSV]


def predict_row(row: dict[str, str]) -> Evaluation:
    """The planner's prediction for one CSV row, its configuration pinned."""
    r = csv_row(row)
    return evaluate(r.ctx, r.cand)


def leave_one_out(rows: list[Row], label: str) -> list[dict]:
    """For each row: the speed error with calibration.py's constants, and with a profile fitted on
    every other row of its GPU kind (no other row: the defaults, unchanged)."""
    out = []
    for i, row in enumerate(rows):
        rest = [r for j, r in enumerate(rows) if j != i and r.gpu == row.gpu]
        profile = calibrate_rows(rest).profile if rest else None
        before = predict_with(None, row) / row.tokens_per_s_per_gpu - 1
        after = predict_with(profile, row) / row.tokens_per_s_per_gpu - 1
        entry = profile.gpus.get(row.gpu) if profile else None
        out.append(
            {
                "name": f"planner_accuracy.loo.{label}.{row.id}",
                "unit": "fraction",
                "value": round(after, 4),
                "reference": round(before, 4),
                "error_before": round(before, 4),
                "error_after": round(after, 4),
                "fitted_on": len(rest),
                "constants": entry.fitted if entry else [],
            }
        )
    return out


def _loo_summary(label: str, lines: list[dict]) -> dict:
    return {
        "name": f"planner_accuracy.loo.{label}.median_abs_error_after",
        "unit": "fraction",
        "value": round(statistics.median(abs(x["error_after"]) for x in lines), 4),
        "reference": round(statistics.median(abs(x["error_before"]) for x in lines), 4),
        "rows": len(lines),
        "note": "reference: the same rows with calibration.py's constants (before)",
    }


def main() -> None:
    paths = csv_paths()
    rows = [(p, row) for p in paths for row in csv.DictReader(p.open())]
    mem_err, tps_err = [], []
    own_fit: dict[str, list[float]] = {}
    fsdp_rows: list[Row] = []
    for path, row in rows:
        e = predict_row(row)
        upper = is_upper_bound(row)
        fsdp = not upper and path != OWN_CSV
        fitted_for = row.get("fitted_for") or ""
        if not upper:
            fsdp_rows.append(csv_row(row, source=str(path)))
        tps_ref = float(row["tokens_per_s_per_gpu"])
        err = e.tokens_per_s_per_gpu / tps_ref - 1
        if fsdp:
            tps_err.append(err)
        elif fitted_for:
            own_fit.setdefault(fitted_for, []).append(err)
        kind = "upper bound" if upper else ("fitted" if fsdp else "held out")
        print(
            json.dumps(
                {
                    "name": f"planner_accuracy.{row['id']}.tokens_per_s_per_gpu",
                    "value": round(e.tokens_per_s_per_gpu, 1),
                    "unit": "tokens/s/GPU",
                    "reference": tps_ref,
                    "error": round(err, 4),
                    "fitted": fsdp,
                    "kind": f"fitted: {fitted_for}" if fitted_for else kind,
                    "mfu_predicted": round(e.mfu, 4),
                    "source": row.get("url") or row.get("source"),
                }
            )
        )
        if row["peak_memory_gib"]:
            ref = float(row["peak_memory_gib"])
            pred = predict(csv_row(row)).memory_gib
            err = pred / ref - 1
            if fsdp:
                mem_err.append(err)
            print(
                json.dumps(
                    {
                        "name": f"planner_accuracy.{row['id']}.peak_memory_gib",
                        "value": round(pred, 2),
                        "unit": "GiB",
                        "reference": ref,
                        "error": round(err, 4),
                        "fitted": fsdp,
                        "memory_kind": row["memory_kind"],
                    }
                )
            )
    for name, errs, target in (("peak_memory", mem_err, 0.10), ("tokens_per_s", tps_err, 0.15)):
        med = statistics.median(abs(x) for x in errs)
        print(
            json.dumps(
                {
                    "name": f"planner_accuracy.{name}.median_abs_error",
                    "value": round(med, 4),
                    "unit": "fraction",
                    "reference": target,
                    "rows": len(errs),
                    "csv": [str(p) for p in paths],
                }
            )
        )
    for constant, errs in own_fit.items():
        print(
            json.dumps(
                {
                    "name": f"planner_accuracy.tokens_per_s.{constant}.median_abs_error",
                    "value": round(statistics.median(abs(x) for x in errs), 4),
                    "unit": "fraction",
                    "reference": 0.15,
                    "rows": len(errs),
                    "note": "the rows of benchmarks/data this constant was fitted on",
                }
            )
        )
    groups = [("reference", fsdp_rows)]
    local = [d for d in os.environ.get("BSM_LOCAL_RUNS", "").split(":") if d]
    if local:
        groups.append(("local", [r for d in local for r in run_rows(d)]))
    for label, group in groups:
        lines = leave_one_out(group, label)
        for x in lines:
            print(json.dumps(x))
        print(json.dumps(_loo_summary(label, lines)))


if __name__ == "__main__":
    main()
