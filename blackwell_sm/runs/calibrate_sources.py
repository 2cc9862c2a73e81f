"""Where `bsm calibrate` gets its measured rows: local run directories, measurements CSVs in the
`shared/reference` format and SageMaker jobs (their bundled plan, output summary or log lines).
Client side: never imports torch (boto3 only inside the job readers)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import CATALOG, GpuSpec, InstanceType, get_instance, local_instance
from blackwell_sm.opt_ml import is_local_run
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.fit import Row
from blackwell_sm.planner.lora import with_peft
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.profile import ProfileSource
from blackwell_sm.planner.search import Candidate, Context
from blackwell_sm.planner.shape import shape
from blackwell_sm.runs.read import RunFiles, read_job, read_run_dir
from blackwell_sm.spec import PRESETS

# ---------------------------------------------------------------------------------------------
# Measurements CSV (shared/reference/measurements.csv): hardware of rows the catalog lacks
# ---------------------------------------------------------------------------------------------

#: The torchtitan H100 rows ran on 96 GB HBM2e parts capped at 500 W (calibration.py's derate).
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
#: The torchao B200 rows ran on B200s power-limited to 750 W (calibration.py's derate).
B200_750W = CATALOG["ml.p6-b200.48xlarge"].gpu.model_copy(
    update={
        "name": "B200 180GB 750W",
        "peak_tflops": {
            p: v * C.B200_750W_DERATE
            for p, v in CATALOG["ml.p6-b200.48xlarge"].gpu.peak_tflops.items()
        },
    }
)
CSV_INSTANCES: dict[str, InstanceType] = {
    "H100": CATALOG["ml.p5.48xlarge"].model_copy(
        update={"gpu": H100_96GB_500W, "name": "h100-96gb-500w"}
    ),
    "H100-SXM": CATALOG["ml.p5.48xlarge"],  # the 700 W part of ml.p5 (Megatron-FSDP row)
    "H200": CATALOG["ml.p5en.48xlarge"],
    "B200": CATALOG["ml.p6-b200.48xlarge"],
    "B200-750W": CATALOG["ml.p6-b200.48xlarge"].model_copy(
        update={"gpu": B200_750W, "name": "b200-750w"}
    ),
}
CSV_PRECISION = {
    "bf16": "bf16",
    "fp8-tensorwise": "fp8",
    "fp8-current-scaling": "fp8",
    "mxfp8": "mxfp8",
}
# torchtitan's modes are ours by the same names ("selective-op": every other matmul kept).
CSV_MODE = {
    "selective-op": "selective-op",
    "full": "full",
    "none": "none",
    "selective": "selective",
}
CSV_MODEL = {"llama-3-8b": "llama-3.1-8b"}  # same shape; 3.1 only changes RoPE scaling


def is_upper_bound(row: dict[str, str]) -> bool:
    """Rows of other stacks (Megatron): upper bounds, never fitted."""
    notes = row.get("notes") or ""
    return "upper bound" in notes or "not FSDP" in notes


def _count(row: dict[str, str], col: str, where: str) -> int:
    """A whole number >= 1 from column `col`."""
    text = (row.get(col) or "").strip()
    if not text.isdigit() or int(text) < 1:
        raise SpecError(f"{where}: {col} must be a whole number >= 1, not {text!r}", field=col)
    return int(text)


def _figure(row: dict[str, str], col: str, where: str) -> float | None:
    """A measured figure from column `col`: a finite number > 0, or None when the cell is empty."""
    text = (row.get(col) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise SpecError(
            f"{where}: {col} must be a finite number > 0 (or empty: not measured), not {text!r}",
            field=col,
        )
    return value


def _choice(row: dict[str, str], col: str, table: dict[str, Any], where: str) -> Any:
    value = row.get(col) or ""
    if value not in table:
        raise SpecError(f"{where}: {col} {value!r} is not one of {', '.join(table)}", field=col)
    return table[value]


def csv_row(row: dict[str, str], *, source: str = "") -> Row:
    """One CSV row as a fit Row: its configuration pinned, its measured figures (each finite and
    positive, or empty); a bad cell is SpecError naming the file, the row and the column."""
    where = f"{source}: row {row.get('id') or '?'}"
    model = PRESETS[
        _choice(row, "model", {m: CSV_MODEL.get(m, m) for m in (*PRESETS, *CSV_MODEL)}, where)
    ]
    inst = _choice(row, "gpu", CSV_INSTANCES, where)
    n_gpus, seq, mb = (_count(row, c, where) for c in ("num_gpus", "seq_len", "micro_batch"))
    shard, rep = _count(row, "shard_degree", where), _count(row, "replicate_degree", where)
    ga = _count(row, "global_batch", where) // (mb * n_gpus) if row.get("global_batch") else 1
    if ga < 1:
        raise SpecError(
            f"{where}: global_batch is below micro_batch x num_gpus", field="global_batch"
        )
    cand = Candidate(
        instance_count=max(1, n_gpus // inst.gpus_per_instance),
        shard_degree=shard,
        replicate_degree=rep,
        micro_batch_size=mb,
        grad_accum_steps=ga,
        precision=_choice(row, "precision", CSV_PRECISION, where),
        activation_checkpointing=_choice(row, "activation_checkpointing", CSV_MODE, where),
        compile=row.get("compile") != "false",
        reshard_after_forward=True,
    )
    tps = _figure(row, "tokens_per_s_per_gpu", where)
    mem = _figure(row, "peak_memory_gib", where)
    # torchtitan 2025 compiles the loss with the model (compile.components: model, loss).
    compiled_loss = cand.compile and "2025" in (row.get("stack") or "")
    ctx = Context(shape(model), inst, seq, cand.global_batch_seqs, None, 1, None, compiled_loss)
    kind = "max_reserved" if row.get("memory_kind") == "max_reserved" else "total"
    return Row(row.get("id") or "?", ctx, cand, tps, mem, kind, source)


def csv_rows(path: str | Path, *, fitted_only: bool = True) -> list[Row]:
    """The rows of a measurements CSV (upper-bound rows of other stacks left out by default)."""
    from blackwell_sm.safe_load import read_text

    text = read_text(path, field="SOURCE", max_bytes=16 * 1024 * 1024, label="measurements CSV")
    rows = list(csv.DictReader(io.StringIO(text)))
    return [csv_row(r, source=str(path)) for r in rows if not (fitted_only and is_upper_bound(r))]


# ---------------------------------------------------------------------------------------------
# Runs and jobs (runs/read.py): the plan and what the run measured
# ---------------------------------------------------------------------------------------------


def instance_of(plan: Plan) -> InstanceType:
    """The instance a plan ran on, rebuilt from what the plan records (a local CPU instance with
    its measured peak, or the catalog's type with the plan's peak and memory)."""
    ref = plan.instance
    if is_local_run(ref.type) and ref.device == "cpu":
        n = ref.gpus_per_instance
        return local_instance(
            nproc=n, memory_gib=ref.gpu_memory_gib * n, peak_tflops=ref.peak_flops_bf16 / 1e12
        )
    if ref.type in CATALOG:
        inst = get_instance(ref.type)
    else:
        inst = next((i for i in CATALOG.values() if i.gpu.name == ref.gpu), None)  # type: ignore[assignment]
        if inst is None:
            raise SpecError(
                f"the plan ran on {ref.type} ({ref.gpu}), which the catalog does not know",
                field="SOURCE",
                hint="describe the GPU in a calibration profile (docs/calibration.md)",
            )
        inst = inst.model_copy(update={"gpus_per_instance": ref.gpus_per_instance})
    gpu = inst.gpu
    ratio = ref.peak_flops_bf16 / gpu.peak_flops("bf16") if gpu.peak_flops("bf16") else 1.0
    upd: dict[str, Any] = {"memory_gib": ref.gpu_memory_gib}
    if abs(ratio - 1.0) > 1e-9:  # a plan made with a profile's peak_scale
        upd["peak_tflops"] = {p: v * ratio for p, v in gpu.peak_tflops.items()}
    return inst.model_copy(update={"gpu": gpu.model_copy(update=upd)})


def plan_row(run: RunFiles) -> Row:
    """A fit Row from a run's plan and what it measured (the summary's medians, else the steady
    train records')."""
    plan = run.plan
    inst = instance_of(plan)
    cfg, tr = plan.config, plan.spec.training
    # PlanConfig holds Candidate's knobs by the same names, and seq_len
    cand = Candidate(plan.instance.count, **cfg.model_dump(exclude={"seq_len"}))
    ctx = Context(
        with_peft(shape(plan.spec.model), plan.spec.training.peft),
        inst,
        cfg.seq_len,
        cand.global_batch_seqs,
        None,
        1,
        None,
        packed=tr.task == "finetune",
        loss_impl=tr.loss_impl,
    )
    m = run.measured()
    if m.tokens_per_s_per_gpu is None:
        raise SpecError(
            f"{run.source}: nothing was measured (no summary.json figures, no timed step)",
            field="SOURCE",
            hint="calibrate on runs that logged at least one step",
        )
    # Only the CUDA allocator's peak compares with the model; a CPU worker's max RSS holds the
    # whole Python process.
    cuda = m.memory_kind == "cuda_max_allocated_reserved"
    mem = m.peak_memory_reserved_gib if cuda and m.peak_memory_reserved_gib else None
    return Row(run.source, ctx, cand, m.tokens_per_s_per_gpu, mem, "max_reserved", run.source)


def run_rows(run_dir: str | Path) -> list[Row]:
    """The measured row of a local run directory."""
    return [plan_row(read_run_dir(Path(run_dir)))]


def job_rows(name: str, aws: Any) -> list[Row]:
    return [plan_row(read_job(aws, name))]


def classify(source: str) -> str:
    """'run', 'csv' or 'job'."""
    p = Path(source)
    if p.is_dir():
        return "run"
    if p.suffix.lower() == ".csv":
        if not p.is_file():
            raise SpecError(f"no such measurements CSV: {source}", field="SOURCE")
        return "csv"
    if "/" in source or p.exists():
        raise SpecError(
            f"{source} is neither a run directory, a .csv file nor a job name", field="SOURCE"
        )
    return "job"


def load_rows(sources: list[str], aws: Any = None) -> tuple[list[Row], list[ProfileSource]]:
    """The measured rows of every source, and the profile's record of them."""
    rows: list[Row] = []
    recorded: list[ProfileSource] = []
    for src in sources:
        kind = classify(src)
        if kind == "run":
            got = run_rows(src)
        elif kind == "csv":
            got = csv_rows(src)
        else:
            if aws is None:
                from blackwell_sm.aws.session import AwsContext

                aws = AwsContext()
            got = job_rows(src, aws)
        ref = str(Path(src).resolve()) if kind != "job" else src
        rows.extend(got)
        recorded.append(ProfileSource(kind=kind, ref=ref, rows=len(got)))
    if not rows:
        raise SpecError("no measured rows in the sources", field="SOURCE")
    return rows, recorded
