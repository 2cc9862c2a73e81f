"""GPU check: plan each run for this machine's one GPU, run it through the real launcher and
torch.distributed, and print what was measured beside what the planner predicted.

    bash benchmarks/gpu_check.sh [--runs a,b] [--steps 12] [--gpu H100|H200|B200] [--out DIR]
        [--budget-s 480] [--results FILE]
    bash benchmarks/gpu_check.sh --cpu-dry [--runs ...]   # same path on CPU: tiny model
    bash benchmarks/gpu_check.sh --plan-only --gpu H200    # the predictions only, no GPU needed
    bash benchmarks/gpu_check.sh --list                    # the runs, in order

Runs, in priority order (benchmarks/gpu_check_runs.py; --cpu-dry swaps in the tiny model, short
sequences, no compile, and skips fp8):
  bf16-ac-<mode>   llama-3.2-1b, bf16, seq 4096, compile, one run per activation-checkpointing
                   mode the spec knows (none, selective, selective-op, full, and any added later);
  fp8              the same with torchao float8 (tensorwise), AC none;
  loss-full-logits the plain loss (fp32 logits) on the same data as bf16-ac-none (the chunked
                   loss): memory beside memory, and the losses step by step;
  long-seq         1B at the longest of 128k/64k/32k/16k the chunked loss fits on this GPU (AC
                   full, one sequence a step); the row says what full logits would have needed;
  near-limit       llama-3.2-3b at the feasible micro-batch closest to the usable memory;
  cp-numerics      context parallelism's sharded-sequence bookkeeping on one device
                   (benchmarks/gpu_check_cp.py): each CP rank's attention against the whole
                   sequence's, forward and backward, dense and block masks, packed or not;
  ckpt-resume-export  1B bf16: checkpoint (async on CUDA), SIGTERM after the first save, resume
                   in the same /opt/ml, finish, export, load the export in transformers.

One JSON line per run (benchmarks/_common.py): tokens/s/GPU, MFU, step time, peak allocated and
reserved memory, the peak nvidia-smi memory.used, each beside the plan's prediction and the goal's
band (tokens/s within 15 %, memory within 10 %; MFU >= 40 % on the 1B bf16 runs), and, for the
eager bf16 runs, the fake-tensor trace's peak (traced on the cuda device after the run) beside
the allocated peak (within 5 %; benchmarks/gpu_check_trace.py). `--budget-s`
starts no run after that many seconds (the device gives 10 minutes a call), `--results` appends
each row to a file as it is made. Exit 0 when all goals are met (always in --cpu-dry, where the
CPU peak is nominal and goals are not applied), 1 when one is missed, 2 when a run fails. The run
logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, note
from gpu_check_launch import SmiPeak, launch, load_export
from gpu_check_runs import RunDef, plan_run, runs
from gpu_check_trace import traced_for

GOAL_MFU = 0.40
GOAL_MEMORY_REL = 0.10
GOAL_TOKENS_REL = 0.15
GOAL_TRACE_REL = 0.05  # measured allocated peak against the fake-tensor trace


def pick_gpu(name: str, override: str | None):
    """The catalog GpuSpec for a CUDA device name ('NVIDIA H100 80GB HBM3', ...)."""
    from blackwell_sm.hardware import B200, H100, H200

    known = {"H100": H100, "H200": H200, "B200": B200}
    key = override or next((k for k in known if k in name.upper()), None)
    if key not in known:
        raise SystemExit(
            f"gpu_check: no catalog GPU matches {name!r}; pass --gpu with one of {', '.join(known)}"
        )
    if key == "H100" and ("PCIE" in name.upper() or "NVL" in name.upper()):
        note(f"{name} is not the SXM part the catalog describes: MFU and speed goals are for SXM")
    return known[key]


def within(measured: float | None, predicted: float | None, rel: float) -> bool | None:
    if measured is None or not predicted:
        return None
    return abs(measured / predicted - 1.0) <= rel


def band(predicted: float | None, rel: float) -> list[float] | None:
    return (
        None
        if not predicted
        else [round(predicted * (1 - rel), 3), round(predicted * (1 + rel), 3)]
    )


def cp_row(rd: RunDef, *, dry: bool, common: dict[str, Any]) -> dict:
    """The in-process CP numerics (benchmarks/gpu_check_cp.py): no launcher, no plan."""
    from gpu_check_cp import cp_numerics, within_tolerance
    from gpu_check_runs import CP_SEQ, DRY_CP_SEQ

    device = "cpu" if dry else "cuda"
    t0 = time.perf_counter()
    rows = cp_numerics(device, seq=DRY_CP_SEQ if dry else CP_SEQ)
    ok = within_tolerance(rows, device)
    worst = max(v for r in rows.values() for k, v in r.items() if k.endswith("_rel_err"))
    return emit(
        "gpu_check.run",
        worst,
        "max relative error",
        ok=None if dry else ok,
        numerics=rows,
        within_tolerance=ok,
        wall_s=round(time.perf_counter() - t0, 1),
        needs_two_gpus="the all-gather and reduce-scatter over NCCL, FSDP over the CP ranks, "
        "and CP inside the compiled model (tests/test_context_parallel*.py run them on gloo)",
        **common,
    )


def losses(rundir: Path) -> dict[int, float]:
    """Step -> loss of a finished run's train records."""
    from blackwell_sm.records import TrainRecord
    from blackwell_sm.runs.read import read_run_dir

    return {r.step: r.loss for r in read_run_dir(rundir).records if isinstance(r, TrainRecord)}


def loss_match(rundir: Path, other: Path) -> dict[str, Any]:
    """The largest relative loss difference over the steps two runs share (same seed and
    synthetic data: only the loss path differs)."""
    a, b = losses(rundir), losses(other)
    shared = sorted(set(a) & set(b))
    rel = [abs(a[s] - b[s]) / abs(b[s]) for s in shared if b[s]]
    return {"steps": len(shared), "max_rel_diff": max(rel) if rel else None}


def launched_row(rd, plan, rundir: Path, rc: int, wall: float, smi, extra, common) -> dict:
    """The row of a launched run: measured beside predicted and the goal bands."""
    summary_path = rundir / "output" / "data" / "summary.json"
    if rc != 0 or not summary_path.is_file():
        failure = rundir / "output" / "failure"
        reason = failure.read_text().strip() if failure.is_file() else f"exit {rc}, no failure file"
        return emit(
            "gpu_check.run",
            None,
            "tokens/s",
            ok=False,
            error=reason,
            exit_code=rc,
            wall_s=round(wall, 1),
            out_dir=str(rundir),
            **common,
        )
    s = json.loads(summary_path.read_text())
    m = s["measured"]
    if rd.ckpt:
        extra.update(
            resumed_from_step=s["resumed_from_step"],
            final_step=s["final_step"],
            export=load_export(rundir / "model"),
        )
    if rd.compare_loss_with:
        extra["loss_vs_" + rd.compare_loss_with] = loss_match(
            rundir, rundir.parent / rd.compare_loss_with
        )
    dry = common["mode"] == "cpu-dry"
    traced = traced_for(plan, dry=dry)
    tok, mfu, reserved = m["tokens_per_s_per_gpu"], m["mfu"], m["peak_memory_reserved_gib"]
    mem_pred = plan.memory_gib.allocator_reserved or plan.memory_gib.total
    pred = plan.throughput
    goals = {
        "tokens_per_s_per_gpu": within(tok, pred.tokens_per_s_per_gpu, GOAL_TOKENS_REL),
        "peak_reserved_gib": within(reserved, mem_pred, GOAL_MEMORY_REL),
        "mfu": (mfu is not None and mfu >= GOAL_MFU) if rd.mfu_goal else None,
    }
    goals["peak_allocated_vs_trace"] = within(
        m["peak_memory_allocated_gib"], traced["peak_gib"], GOAL_TRACE_REL
    )
    if rd.ckpt:
        goals["resumed_and_exported"] = bool(
            extra["resumed_from_step"] and extra["export"].get("loaded") is not False
        )
    ok = None if dry else all(v is not False for v in goals.values())
    smi_gib = None if smi.peak_mib is None else round(smi.peak_mib / 1024, 3)
    return emit(
        "gpu_check.run",
        tok and round(tok, 1),
        "tokens/s/GPU",
        ok=ok,
        measured={
            "tokens_per_s_per_gpu": tok,
            "mfu": mfu,
            "step_time_s": m["step_time_s"],
            "peak_allocated_gib": m["peak_memory_allocated_gib"],
            "peak_reserved_gib": reserved,
            "nvidia_smi_peak_used_gib": smi_gib,
            "memory_kind": m["memory_kind"],
            "steps_timed": m["steps_timed"],
        },
        predicted={
            "tokens_per_s_per_gpu": round(pred.tokens_per_s_per_gpu, 1),
            "mfu": round(pred.mfu, 4),
            "step_time_s": round(pred.step_time_s, 4),
            "allocator_reserved_gib": round(mem_pred, 3),
            "total_incl_context_gib": round(plan.memory_gib.total, 3),
        },
        traced=traced,
        goal_band={
            "tokens_per_s_per_gpu": band(pred.tokens_per_s_per_gpu, GOAL_TOKENS_REL),
            "peak_reserved_gib": band(mem_pred, GOAL_MEMORY_REL),
            "mfu": f">= {GOAL_MFU}" if rd.mfu_goal else None,
            "peak_allocated_vs_trace": band(traced["peak_gib"], GOAL_TRACE_REL),
        },
        goals=goals if not dry else {k: None for k in goals},
        status=s["status"],
        final_loss=s["final_loss"],
        wall_s=round(wall, 1),
        **extra,
        **common,
    )


def run_one(
    rd: RunDef, instance, *, dry: bool, steps: int, out: Path, timeout: float, device_name: str
) -> dict:
    """Plan, launch and measure one run; returns its JSON row."""
    from blackwell_sm.local import layout_opt_ml

    common = {"run": rd.name, "device": device_name, "mode": "cpu-dry" if dry else "gpu"}
    if rd.kind == "cp":
        return cp_row(rd, dry=dry, common=common)
    if rd.kind == "trace":
        from gpu_check_forms import forms_row

        return forms_row(rd, dry=dry, common=common, emit=emit)
    if dry and rd.precision != "bf16":
        return emit(
            "gpu_check.run",
            None,
            "tokens/s",
            ok=None,
            skipped=f"{rd.precision} needs a CUDA GPU with fp8 (sm_89+); not run on CPU",
            **common,
        )
    steps = rd.steps or steps
    plan, extra = plan_run(rd, instance, dry=dry, steps=steps)
    c = plan.config
    common.update(
        model=plan.model.name, config=c.model_dump(), loss_impl=plan.spec.training.loss_impl
    )
    note(
        f"[{rd.name}] {plan.model.name}: micro-batch {c.micro_batch_size} x accum "
        f"{c.grad_accum_steps}, seq {c.seq_len}, {c.precision}, AC {c.activation_checkpointing}, "
        f"compile {c.compile}; predicted {plan.throughput.tokens_per_s_per_gpu:,.0f} tok/s, "
        f"MFU {plan.throughput.mfu:.1%}, {plan.memory_gib.total:.1f} GiB"
    )
    if not plan.feasible:
        return emit(
            "gpu_check.run",
            None,
            "tokens/s",
            ok=False,
            error="infeasible plan: " + "; ".join(plan.advice),
            **extra,
            **common,
        )
    rundir = out / rd.name
    shutil.rmtree(rundir, ignore_errors=True)
    plan_path = layout_opt_ml(rundir, plan)
    t0 = time.perf_counter()
    with SmiPeak(enabled=not dry and shutil.which("nvidia-smi") is not None) as smi:
        rc = launch(plan_path, rundir, dry=dry, timeout=timeout, stop_after_save=rd.ckpt)
        if rd.ckpt and rc == 0:
            summary_a = json.loads((rundir / "output/data/summary.json").read_text())
            extra["stopped_at_step"] = summary_a["final_step"]
            rc = launch(plan_path, rundir, dry=dry, timeout=timeout, stop_after_save=False)
    return launched_row(rd, plan, rundir, rc, time.perf_counter() - t0, smi, extra, common)


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--cpu-dry",
        action="store_true",
        default=os.environ.get("BSM_GPU_CHECK_CPU_DRY", "") not in ("", "0"),
        help="run the same path on CPU (tiny model); also BSM_GPU_CHECK_CPU_DRY=1",
    )
    ap.add_argument("--runs", help="comma list of run names (default: all; see --list)")
    ap.add_argument("--list", action="store_true", help="print the run names and stop")
    ap.add_argument("--steps", type=int, default=None, help="default 12 (GPU), 3 (--cpu-dry)")
    ap.add_argument("--gpu", choices=["H100", "H200", "B200"], help="override the detected GPU")
    ap.add_argument("--out", type=Path, help="run directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per launch")
    ap.add_argument(
        "--budget-s",
        type=float,
        default=None,
        help="start no run after this many seconds (the rest are listed as not run)",
    )
    ap.add_argument("--results", type=Path, help="also append each JSON row to this file")
    ap.add_argument(
        "--plan-only",
        action="store_true",
        help="print each run's predictions (needs --gpu off a GPU box) and stop",
    )
    return ap


def this_instance(args: argparse.Namespace) -> tuple[str, Any] | None:
    """(device name, the planner's InstanceType for this machine's one GPU or CPU)."""
    from blackwell_sm.hardware import local_instance

    if args.cpu_dry:
        return "cpu", local_instance(nproc=1)
    if args.plan_only and args.gpu:
        gpu = pick_gpu(args.gpu, args.gpu)
        return f"(planned for {args.gpu})", local_instance(nproc=1, device="cuda", gpu=gpu)
    import torch

    if not torch.cuda.is_available():
        note("no CUDA device visible to this torch; use --cpu-dry to check the path on CPU")
        return None
    device_name = torch.cuda.get_device_name(0)
    gpu = pick_gpu(device_name, args.gpu)
    actual_gib = torch.cuda.get_device_properties(0).total_memory / 1024**3
    if abs(actual_gib / gpu.memory_gib - 1) > 0.02:
        note(
            f"{device_name} has {actual_gib:.1f} GiB; the catalog's {gpu.name} has "
            f"{gpu.memory_gib:.1f} GiB: planning with the catalog's figure"
        )
    return device_name, local_instance(nproc=1, device="cuda", gpu=gpu)


def plan_rows(chosen: list[RunDef], instance, device_name: str, *, dry: bool, steps: int) -> None:
    """--plan-only: each run's predictions."""
    for rd in chosen:
        if rd.kind in ("cp", "trace"):
            emit("gpu_check.plan", None, "", run=rd.name, device=device_name, feasible=True)
            continue
        plan, facts = plan_run(rd, instance, dry=dry, steps=rd.steps or steps)
        mem = plan.memory_gib.allocator_reserved or plan.memory_gib.total
        th = plan.throughput
        emit(
            "gpu_check.plan",
            plan.model.name,
            "",
            run=rd.name,
            device=device_name,
            feasible=plan.feasible,
            config=plan.config.model_dump(),
            **facts,
            predicted={
                "tokens_per_s_per_gpu": round(th.tokens_per_s_per_gpu, 1),
                "mfu": round(th.mfu, 4),
                "reserved_gib": round(mem, 3),
                "total_gib": round(plan.memory_gib.total, 3),
            },
        )


def main(argv: list[str] | None = None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    all_runs = runs()
    if args.list:
        print("\n".join(r.name for r in all_runs))
        return 0
    chosen = all_runs
    if args.runs:
        names = {r.name: r for r in all_runs}
        unknown = [n for n in args.runs.split(",") if n not in names]
        if unknown:
            ap.error(f"unknown run(s) {', '.join(unknown)}; known: {', '.join(names)}")
        chosen = [names[n] for n in args.runs.split(",")]
    dry = args.cpu_dry
    steps = args.steps or (3 if dry else 12)
    if steps < 3:
        ap.error("--steps must be at least 3 (the loop's summary skips 2 warm-up steps)")
    found = this_instance(args)
    if found is None:
        return 2
    device_name, instance = found
    if args.plan_only:
        plan_rows(chosen, instance, device_name, dry=dry, steps=steps)
        return 0

    out = args.out or Path(tempfile.mkdtemp(prefix="bsm-gpu-check-"))
    rows, t0 = [], time.perf_counter()
    for rd in chosen:
        if args.budget_s is not None and time.perf_counter() - t0 > args.budget_s:
            row = emit(
                "gpu_check.run",
                None,
                "",
                ok=None,
                run=rd.name,
                device=device_name,
                skipped=f"not started: the {args.budget_s:.0f} s budget was spent",
            )
        else:
            row = run_one(
                rd,
                instance,
                dry=dry,
                steps=steps,
                out=out,
                timeout=args.timeout,
                device_name=device_name,
            )
        rows.append(row)
        if args.results:
            with args.results.open("a") as f:
                f.write(json.dumps(row) + "\n")
    if args.out is None and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    else:
        note(f"run directory kept: {out}")
    failed = [r["run"] for r in rows if r.get("error")]
    missed = [r["run"] for r in rows if r["ok"] is False and not r.get("error")]
    if failed:
        note("runs failed: " + ", ".join(failed))
    if missed:
        note("goals missed: " + ", ".join(missed))
    return 2 if failed else 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
