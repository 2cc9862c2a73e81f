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
calibration.H100_500W_CLOCK_DERATE (0.85); network as the row notes (400 Gb/s per GPU = 3200 Gb/s
per node, as on p5). H200 rows map to ml.p5en.48xlarge, B200 to ml.p6-b200.48xlarge.
"""

from __future__ import annotations

import csv
import json
import os
import statistics
import sys
from pathlib import Path

from blackwell_sm.hardware import CATALOG, GpuSpec
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.search import Candidate, Context, evaluate
from blackwell_sm.spec import PRESETS

REPO = Path(__file__).resolve().parents[1]
OWN_CSV = REPO / "benchmarks" / "data" / "measurements.csv"

H100_96GB_500W = GpuSpec(
    name="H100 96GB HBM2e 500W",
    memory_gib=C.H100_96GB_USABLE_GIB,
    hbm_tb_s=3.35,
    compute_capability=(9, 0),
    peak_tflops={
        p: v * C.H100_500W_CLOCK_DERATE
        for p, v in CATALOG["ml.p5.48xlarge"].gpu.peak_tflops.items()
    },
)
INSTANCES = {
    "H100": CATALOG["ml.p5.48xlarge"].model_copy(
        update={"gpu": H100_96GB_500W, "name": "h100-96gb-500w"}
    ),
    "H100-SXM": CATALOG["ml.p5.48xlarge"],  # the 700 W part of ml.p5 (Megatron-FSDP row)
    "H200": CATALOG["ml.p5en.48xlarge"],
    "B200": CATALOG["ml.p6-b200.48xlarge"],
}
PRECISION = {
    "bf16": "bf16", "fp8-tensorwise": "fp8", "fp8-current-scaling": "fp8", "mxfp8": "mxfp8",
}  # fmt: skip
# torchtitan's modes are ours by the same names ("selective-op": every other matmul kept).
MODE = {"selective-op": "selective-op", "full": "full", "none": "none"}
MODEL = {"llama-3-8b": "llama-3.1-8b"}  # same shape; 3.1 only changes RoPE scaling


def shared_csv() -> Path:
    """The shared reference CSV, found above the repository (a worktree sits one level deeper)."""
    for up in REPO.parents:
        candidate = up / "shared" / "reference" / "measurements.csv"
        if candidate.is_file():
            return candidate
    return REPO.parent / "shared" / "reference" / "measurements.csv"


def csv_paths() -> list[Path]:
    if len(sys.argv) > 1:
        return [Path(a) for a in sys.argv[1:]]
    if os.environ.get("BSM_MEASUREMENTS_CSV"):
        return [Path(os.environ["BSM_MEASUREMENTS_CSV"])]
    return [shared_csv(), OWN_CSV]


def predict(row: dict[str, str]):
    """The planner's prediction for one row, its configuration pinned."""
    model = PRESETS[MODEL.get(row["model"], row["model"])]
    inst = INSTANCES[row["gpu"]]
    n_gpus = int(row["num_gpus"])
    seq, mb = int(row["seq_len"]), int(row["micro_batch"])
    shard, rep = int(row["shard_degree"]), int(row["replicate_degree"])
    ga = int(row["global_batch"]) // (mb * n_gpus) if row["global_batch"] else 1
    cand = Candidate(
        instance_count=max(1, n_gpus // inst.gpus_per_instance),
        shard_degree=shard,
        replicate_degree=rep,
        micro_batch_size=mb,
        grad_accum_steps=ga,
        precision=PRECISION[row["precision"]],
        activation_checkpointing=MODE[row["activation_checkpointing"]],
        compile=row["compile"] != "false",
        reshard_after_forward=True,
    )
    # torchtitan 2025 compiles the loss with the model (compile.components: model, loss).
    compiled_loss = cand.compile and "2025" in row["stack"]
    ctx = Context(model, inst, seq, cand.global_batch_seqs, None, 1, None, compiled_loss)
    return evaluate(ctx, cand)


def main() -> None:
    paths = csv_paths()
    rows = [(p, row) for p in paths for row in csv.DictReader(p.open())]
    mem_err, tps_err = [], []
    for path, row in rows:
        e = predict(row)
        upper = "upper bound" in row["notes"] or "not FSDP" in row["notes"]
        fsdp = not upper and path != OWN_CSV
        tps_ref = float(row["tokens_per_s_per_gpu"])
        err = e.tokens_per_s_per_gpu / tps_ref - 1
        if fsdp:
            tps_err.append(err)
        print(json.dumps({
            "name": f"planner_accuracy.{row['id']}.tokens_per_s_per_gpu",
            "value": round(e.tokens_per_s_per_gpu, 1), "unit": "tokens/s/GPU",
            "reference": tps_ref, "error": round(err, 4), "fitted": fsdp,
            "kind": "upper bound" if upper else ("fitted" if fsdp else "held out"),
            "mfu_predicted": round(e.mfu, 4),
        }))  # fmt: skip
        if row["peak_memory_gib"]:
            ref = float(row["peak_memory_gib"])
            pred = (e.mem.reserved if row["memory_kind"] == "max_reserved" else e.mem.total) / GIB
            err = pred / ref - 1
            if fsdp:
                mem_err.append(err)
            print(json.dumps({
                "name": f"planner_accuracy.{row['id']}.peak_memory_gib", "value": round(pred, 2),
                "unit": "GiB", "reference": ref, "error": round(err, 4), "fitted": fsdp,
                "memory_kind": row["memory_kind"],
            }))  # fmt: skip
    for name, errs, target in (("peak_memory", mem_err, 0.10), ("tokens_per_s", tps_err, 0.15)):
        med = statistics.median(abs(x) for x in errs)
        print(json.dumps({
            "name": f"planner_accuracy.{name}.median_abs_error", "value": round(med, 4),
            "unit": "fraction", "reference": target, "rows": len(errs),
            "csv": [str(p) for p in paths],
        }))  # fmt: skip


if __name__ == "__main__":
    main()
