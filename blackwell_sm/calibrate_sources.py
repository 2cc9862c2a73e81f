"""Where `bsm calibrate` gets its measured rows: local run directories, measurements CSVs in the
`shared/reference` format and SageMaker jobs (their bundled plan, output summary or log lines).
Client side: never imports torch (boto3 only inside the job readers)."""

from __future__ import annotations

import csv
import io
import json
import statistics
import tarfile
from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import CATALOG, GpuSpec, InstanceType, get_instance, local_instance
from blackwell_sm.metrics import WARMUP_STEPS
from blackwell_sm.opt_ml import METRICS_FILE, PLAN_FILE, SUMMARY_FILE, OptMl, is_local_run
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.fit import Row
from blackwell_sm.planner.memory import shape
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.profile import (
    ProfileSource,
)
from blackwell_sm.planner.search import Candidate, Context
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
    "bf16": "bf16", "fp8-tensorwise": "fp8", "fp8-current-scaling": "fp8", "mxfp8": "mxfp8",
}  # fmt: skip
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
    notes = row.get("notes", "")
    return "upper bound" in notes or "not FSDP" in notes


def csv_row(row: dict[str, str], *, source: str = "") -> Row:
    """One CSV row as a fit Row: its configuration pinned, its measured figures."""
    where = f"{source}: row {row.get('id', '?')}"
    try:
        model = PRESETS[CSV_MODEL.get(row["model"], row["model"])]
        inst = CSV_INSTANCES[row["gpu"]]
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
            precision=CSV_PRECISION[row["precision"]],
            activation_checkpointing=CSV_MODE[row["activation_checkpointing"]],
            compile=row["compile"] != "false",
            reshard_after_forward=True,
        )
        tps = float(row["tokens_per_s_per_gpu"]) if row.get("tokens_per_s_per_gpu") else None
        mem = float(row["peak_memory_gib"]) if row.get("peak_memory_gib") else None
    except (KeyError, ValueError) as e:
        raise SpecError(f"{where}: cannot read it ({e!s})", field="SOURCE") from None
    # torchtitan 2025 compiles the loss with the model (compile.components: model, loss).
    compiled_loss = cand.compile and "2025" in row.get("stack", "")
    ctx = Context(shape(model), inst, seq, cand.global_batch_seqs, None, 1, None, compiled_loss)
    kind = "max_reserved" if row.get("memory_kind") == "max_reserved" else "total"
    return Row(row.get("id", "?"), ctx, cand, tps, mem, kind, source)


def csv_rows(path: str | Path, *, fitted_only: bool = True) -> list[Row]:
    """The rows of a measurements CSV (upper-bound rows of other stacks left out by default)."""
    from blackwell_sm.safe_load import read_text

    text = read_text(path, field="SOURCE", max_bytes=16 * 1024 * 1024, label="measurements CSV")
    rows = list(csv.DictReader(io.StringIO(text)))
    return [csv_row(r, source=str(path)) for r in rows if not (fitted_only and is_upper_bound(r))]


# ---------------------------------------------------------------------------------------------
# Runs: plan.json + summary.json / metrics.jsonl
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


def plan_row(
    plan: Plan, summary: dict[str, Any] | None, records: list[dict[str, Any]], ref: str
) -> Row:
    """A fit Row from a plan and what its run measured (the summary's medians, else the steady
    train records')."""
    inst = instance_of(plan)
    cfg, tr = plan.config, plan.spec.training
    cand = Candidate(
        plan.instance.count, cfg.shard_degree, cfg.replicate_degree, cfg.micro_batch_size,
        cfg.grad_accum_steps, cfg.precision, cfg.activation_checkpointing, cfg.compile,
        cfg.reshard_after_forward,
    )  # fmt: skip
    ctx = Context(
        shape(plan.spec.model), inst, cfg.seq_len, cand.global_batch_seqs, None, 1, None,
        packed=tr.task == "finetune",
    )  # fmt: skip
    measured = measured_figures(summary, records)
    tps = measured.get("tokens_per_s_per_gpu")
    mem = measured.get("peak_memory_reserved_gib")
    kind = measured.get("memory_kind")
    if not tps:
        raise SpecError(
            f"{ref}: no measured step (no summary.json, no timed steps)", field="SOURCE"
        )
    # Only the CUDA allocator's peak compares with the model; a CPU worker's max RSS holds the
    # whole Python process.
    cuda_mem = kind == "cuda_max_allocated_reserved" and mem
    return Row(ref, ctx, cand, float(tps), float(mem) if cuda_mem else None, "max_reserved", ref)


def read_records(text: str) -> list[dict[str, Any]]:
    """metrics.jsonl records; a torn last line (a killed run) is skipped."""
    out = []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict):
            out.append(rec)
    return out


def measured_figures(
    summary: dict[str, Any] | None, records: list[dict[str, Any]]
) -> dict[str, Any]:
    """A run's measured figures: summary.json's `measured`, else the medians of its timed step
    records (the first WARMUP_STEPS left out) and their peak memory. Shared by `bsm calibrate`
    and `bsm report`."""
    measured = dict((summary or {}).get("measured") or {})
    if measured.get("tokens_per_s_per_gpu") is not None:
        return measured
    train = [r for r in records if r.get("kind", "train") == "train" and r.get("tok_s_gpu")]
    steady = train[WARMUP_STEPS:] or train
    if not steady:
        return measured

    def median(key: str) -> float | None:
        vals = [r[key] for r in steady if r.get(key) is not None]
        return statistics.median(vals) if vals else None

    mems = [r["mem_reserved_gib"] for r in steady if r.get("mem_reserved_gib") is not None]
    measured.update(
        step_time_s=median("step_time_s"), tokens_per_s_per_gpu=median("tok_s_gpu"),
        mfu=median("mfu"), peak_memory_reserved_gib=max(mems) if mems else None,
        memory_kind=steady[-1].get("memory_kind"),
    )  # fmt: skip
    return measured


def run_files(run_dir: Path) -> tuple[Plan, dict[str, Any] | None, list[dict[str, Any]]]:
    """(plan, summary or None, metrics records) of a run directory."""
    from blackwell_sm.safe_load import load_mapping, read_text

    tree = OptMl(run_dir)
    plan_path = run_dir / PLAN_FILE
    if not plan_path.is_file():
        raise SpecError(f"{run_dir} has no {PLAN_FILE}: not a run directory", field="SOURCE")
    plan = Plan.read(plan_path)
    summary = None
    if tree.summary.is_file():
        summary = load_mapping(tree.summary, field="SOURCE", fmt="json", label="summary")
    records: list[dict[str, Any]] = []
    if tree.metrics.is_file():
        big = 256 * 1024 * 1024
        records = read_records(read_text(tree.metrics, field="SOURCE", max_bytes=big))
    return plan, summary, records


def run_rows(run_dir: str | Path) -> list[Row]:
    """The measured row of a local run directory."""
    d = Path(run_dir)
    plan, summary, records = run_files(d)
    return [plan_row(plan, summary, records, str(d))]


# ---------------------------------------------------------------------------------------------
# SageMaker jobs: the plan from the code bundle, the figures from output.tar.gz or the logs
# ---------------------------------------------------------------------------------------------


def _tar_member(data: bytes, names: tuple[str, ...]) -> bytes | None:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:*") as tar:
        for m in tar.getmembers():
            if m.isfile() and m.name.removeprefix("./") in names:
                f = tar.extractfile(m)
                return f.read() if f else None
    return None


def step_record(line: str) -> dict[str, Any] | None:
    """A `[bsm-step]` log line as a metrics.jsonl-like train record (through the metric regexes
    of `blackwell_sm.metrics`), or None when it carries no speed."""
    from blackwell_sm.metrics import METRIC_FIELDS, line_step, parse_line

    values = parse_line(line)
    rec: dict[str, Any] = {"kind": "train", "step": line_step(line)}
    rec.update({k: values[name] for k, name in METRIC_FIELDS.items() if name in values})
    return rec if rec.get("tok_s_gpu") and rec["step"] is not None else None


def _plan_from_bytes(raw: bytes, where: str) -> Plan:
    """A plan read out of an archive: invalid fields named by path, as `Plan.read` names them."""
    from pydantic import ValidationError

    from blackwell_sm.spec.run import spec_error

    try:
        return Plan.model_validate_json(raw)
    except ValidationError as e:
        raise spec_error(e, root=Plan, source=f"plan in {where}") from None


def _summary_from_bytes(raw: bytes, name: str) -> dict[str, Any]:
    try:
        summary = json.loads(raw)
    except ValueError as e:
        raise SpecError(f"job {name}: its summary.json is not JSON ({e})", field="SOURCE") from None
    if not isinstance(summary, dict):
        raise SpecError(f"job {name}: its summary.json is not a mapping", field="SOURCE")
    return summary


def job_files(aws: Any, name: str) -> tuple[Plan, dict[str, Any] | None, list[dict[str, Any]]]:
    """(plan, summary or None, step records) of a training job."""
    from blackwell_sm.aws.jobs import describe_raw
    from blackwell_sm.aws.s3 import get_object_or_none
    from blackwell_sm.job.bundle import BUNDLE_FILE
    from blackwell_sm.metrics import STEP_PREFIX
    from blackwell_sm.opt_ml import plan_file_for

    d = describe_raw(aws.sagemaker, name)
    code = next(
        (c["DataSource"]["S3DataSource"]["S3Uri"] for c in d.get("InputDataConfig", [])
         if c["DataSource"].get("S3DataSource", {}).get("S3Uri", "").endswith(BUNDLE_FILE)),
        None,
    )  # fmt: skip
    if code is None:
        raise SpecError(f"job {name} has no blackwell_sm code bundle", field="SOURCE")
    bundle = get_object_or_none(aws.s3, code)
    if bundle is None:
        raise SpecError(f"job {name}: its code bundle {code} is gone", field="SOURCE")
    itype = d.get("ResourceConfig", {}).get("InstanceType", "")
    raw = _tar_member(bundle, (plan_file_for(itype), PLAN_FILE))
    if raw is None:
        raise SpecError(f"job {name}: no plan in its code bundle", field="SOURCE")
    plan = _plan_from_bytes(raw, f"job {name}'s bundle")
    out_uri = d.get("OutputDataConfig", {}).get("S3OutputPath", "").rstrip("/")
    summary = None
    records: list[dict[str, Any]] = []
    if out_uri:
        tar = get_object_or_none(aws.s3, f"{out_uri}/{name}/output/output.tar.gz")
        if tar is not None:
            s = _tar_member(tar, (SUMMARY_FILE, f"data/{SUMMARY_FILE}"))
            summary = _summary_from_bytes(s, name) if s else None
            m = _tar_member(tar, (METRICS_FILE, f"data/{METRICS_FILE}"))
            records = read_records(m.decode()) if m else []
    if summary is None and not records:
        from blackwell_sm.aws.logs import iter_logs

        for ev in iter_logs(aws.sagemaker, aws.logs, name, follow=False):
            if ev.host == "algo-1" and STEP_PREFIX in ev.message:
                rec = step_record(ev.message)
                if rec is not None:
                    records.append(rec)
    return plan, summary, records


def job_rows(name: str, aws: Any) -> list[Row]:
    plan, summary, records = job_files(aws, name)
    return [plan_row(plan, summary, records, name)]


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
        recorded.append(ProfileSource(kind=kind, ref=ref, rows=len(got)))  # type: ignore[arg-type]
    if not rows:
        raise SpecError("no measured rows in the sources", field="SOURCE")
    return rows, recorded
