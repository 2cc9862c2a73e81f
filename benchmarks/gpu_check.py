"""GPU check: plan a 1B model for this machine's one GPU, run it through the real launcher, and
print what was measured beside what the planner predicted.

    bash benchmarks/gpu_check.sh [--steps 40] [--gpu H100|H200|B200] [--out DIR] [--keep]
    bash benchmarks/gpu_check.sh --cpu-dry        # same path on CPU: tiny model, few steps
    bash benchmarks/gpu_check.sh --plan-only --gpu H100   # just the predictions, no GPU needed

GPU mode: llama-3.2-1b, bf16, seq 4096, torch.compile, 40 steps of synthetic data, one process,
planned with `hardware.local_instance(nproc=1, device="cuda", gpu=<catalog GpuSpec chosen from
torch.cuda.get_device_name()>)`. The plan is laid out as an /opt/ml directory and
`python -m blackwell_sm.launch` (the container's launcher, then torchrun, then the worker)
runs it. Goals: MFU >= 40%, peak reserved memory within 10% of the predicted allocator peak
(`memory_gib.allocator_reserved`: the total less the CUDA context, which the allocator does not
see), tokens/s
within 15% of the prediction. Exit 0 when all goals are met (always in --cpu-dry, where the CPU
peak is nominal and goals are not applied), 1 when one is missed, 2 when the run fails.

Each figure is one JSON line on stdout (benchmarks/_common.py); the run's log goes to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, note

GOAL_MFU = 0.40
GOAL_MEMORY_REL = 0.10
GOAL_TOKENS_REL = 0.15
GPU_MODEL, GPU_SEQ, GPU_GLOBAL_SEQS = "llama-3.2-1b", 4096, 8
DRY_MODEL, DRY_SEQ, DRY_GLOBAL_SEQS = "tiny", 64, 4


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


def make_spec(*, dry: bool, steps: int):
    """The RunSpec the check plans: bf16 pinned, compile pinned on GPU, synthetic data."""
    from blackwell_sm.spec import parse_spec

    model, seq, seqs = (DRY_MODEL, DRY_SEQ, DRY_GLOBAL_SEQS) if dry else (
        GPU_MODEL, GPU_SEQ, GPU_GLOBAL_SEQS)  # fmt: skip
    return parse_spec({
        "model": model,
        "training": {
            "seq_len": seq, "global_batch_seqs": seqs, "total_steps": steps, "precision": "bf16",
            "schedule": {"warmup_steps": min(10, steps - 1)},
            "checkpoint": {"interval_steps": None, "interval_minutes": None, "async_save": False},
            "data": {"source": "synthetic"}, "export_model": False, "log_interval_steps": 1,
            "pins": {"compile": not dry},
        },
    })  # fmt: skip


def within(measured: float | None, predicted: float, rel: float) -> bool | None:
    if measured is None or not predicted:
        return None
    return abs(measured / predicted - 1.0) <= rel


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-dry", action="store_true",
                    default=os.environ.get("BSM_GPU_CHECK_CPU_DRY", "") not in ("", "0"),
                    help="run the same path on CPU (tiny model); also BSM_GPU_CHECK_CPU_DRY=1")  # fmt: skip
    ap.add_argument("--steps", type=int, default=None, help="default 40 (GPU), 3 (--cpu-dry)")
    ap.add_argument("--gpu", choices=["H100", "H200", "B200"], help="override the detected GPU")
    ap.add_argument("--out", type=Path, help="run directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds before the run is killed")
    ap.add_argument("--plan-only", action="store_true",
                    help="print the plan's predictions (needs --gpu off a GPU box) and stop")  # fmt: skip
    args = ap.parse_args(argv)
    dry = args.cpu_dry
    steps = args.steps or (3 if dry else 40)
    if steps < 3:
        ap.error("--steps must be at least 3 (the loop's summary skips 2 warm-up steps)")

    from blackwell_sm.hardware import local_instance
    from blackwell_sm.local import free_port, launcher_command, launcher_env, layout_opt_ml
    from blackwell_sm.planner.api import make_plan

    if dry:
        device_name, gpu = "cpu", None
        instance = local_instance(nproc=1)
    elif args.plan_only and args.gpu:
        device_name, gpu = f"(planned for {args.gpu})", pick_gpu(args.gpu, args.gpu)
        instance = local_instance(nproc=1, device="cuda", gpu=gpu)
    else:
        import torch

        if not torch.cuda.is_available():
            note("no CUDA device visible to this torch; use --cpu-dry to check the path on CPU")
            return 2
        device_name = torch.cuda.get_device_name(0)
        gpu = pick_gpu(device_name, args.gpu)
        actual_gib = torch.cuda.get_device_properties(0).total_memory / 1024**3
        if abs(actual_gib / gpu.memory_gib - 1) > 0.02:
            note(f"{device_name} has {actual_gib:.1f} GiB; the catalog's {gpu.name} has "
                 f"{gpu.memory_gib:.1f} GiB: planning with the catalog's figure")  # fmt: skip
        instance = local_instance(nproc=1, device="cuda", gpu=gpu)

    spec = make_spec(dry=dry, steps=steps)
    plan = make_plan(spec, instance=instance)
    c = plan.config
    note(f"{device_name}: {plan.model.name} planned as micro-batch {c.micro_batch_size} x accum "
         f"{c.grad_accum_steps}, seq {c.seq_len}, {c.precision}, AC {c.activation_checkpointing}, "
         f"compile {c.compile}; predicted {plan.throughput.tokens_per_s_per_gpu:,.0f} tok/s, "
         f"MFU {plan.throughput.mfu:.1%}, {plan.memory_gib.total:.1f} GiB")  # fmt: skip
    if not plan.feasible:
        note("the planner found no feasible configuration: " + "; ".join(plan.advice))
        return 2
    # torch.cuda.max_memory_reserved() sees the caching allocator only, not the CUDA context.
    mem_pred = plan.memory_gib.allocator_reserved or plan.memory_gib.total
    if args.plan_only:
        emit("gpu_check.plan", plan.model.name, "", device=device_name, config=c.model_dump(),
             predicted={"tokens_per_s_per_gpu": round(plan.throughput.tokens_per_s_per_gpu, 1),
                        "mfu": round(plan.throughput.mfu, 4), "reserved_gib": round(mem_pred, 3),
                        "total_gib": round(plan.memory_gib.total, 3)})  # fmt: skip
        return 0

    out = args.out or Path(tempfile.mkdtemp(prefix="bsm-gpu-check-"))
    for sub in ("checkpoints", "model", "output"):
        shutil.rmtree(out / sub, ignore_errors=True)
    plan_path = layout_opt_ml(out, plan)
    env = launcher_env(master_port=free_port(), extra={"BSM_DEVICE": "cpu" if dry else "cuda"})
    t0 = time.perf_counter()
    try:
        # The launcher's and workers' output go to our stderr: stdout is JSON lines only.
        rc = subprocess.run(launcher_command(plan_path, out), env=env, stdout=sys.stderr,
                            timeout=args.timeout).returncode  # fmt: skip
    except subprocess.TimeoutExpired:
        rc = 124
    wall = time.perf_counter() - t0
    summary_path = out / "output" / "data" / "summary.json"
    failure = out / "output" / "failure"
    if rc != 0 or not summary_path.is_file():
        reason = failure.read_text().strip() if failure.is_file() else "no failure file"
        emit("gpu_check.run", rc, "exit code", ok=False, error=reason, out_dir=str(out))
        return 2
    s = json.loads(summary_path.read_text())
    m = s["measured"]
    tok = m["tokens_per_s_per_gpu"]
    peak = instance.gpu.peak_flops("bf16")
    mfu = None if tok is None else tok * plan.throughput.flops_per_token / peak
    mem = m["peak_memory_reserved_gib"]
    goals = not dry  # the CPU "GPU" has a nominal peak and RSS for memory: nothing to hold it to
    common = {"device": device_name, "model": plan.model.name, "mode": "cpu-dry" if dry else "gpu"}

    def figure(name: str, value, unit: str, goal: str | None, ok: bool | None, **kw) -> dict:
        # --cpu-dry: the goals are shown but not applied (nominal CPU peak, RSS for memory).
        held = {"target": goal, "ok": ok} if goals else {"goal_on_gpu": goal, "ok": None}
        return emit(name, value, unit, **held, **kw, **common)

    pred = plan.throughput
    rows = [
        figure("gpu_check.tokens_per_s_per_gpu", tok and round(tok, 1), "tokens/s",
               f"within {GOAL_TOKENS_REL:.0%} of predicted",
               within(tok, pred.tokens_per_s_per_gpu, GOAL_TOKENS_REL),
               reference={"predicted": round(pred.tokens_per_s_per_gpu, 1)},
               steps_timed=m["steps_timed"]),
        figure("gpu_check.mfu", mfu and round(mfu, 4), "fraction of dense bf16 peak",
               f">= {GOAL_MFU}", mfu is not None and mfu >= GOAL_MFU,
               reference={"predicted": round(pred.mfu, 4), "peak_tflops": peak / 1e12}),
        figure("gpu_check.peak_reserved_gib", round(mem, 3), "GiB",
               f"within {GOAL_MEMORY_REL:.0%} of predicted",
               within(mem, mem_pred, GOAL_MEMORY_REL),
               reference={"predicted": round(mem_pred, 3),
                          "predicted_total_incl_context": round(plan.memory_gib.total, 3),
                          "memory_kind": m["memory_kind"]}),
        figure("gpu_check.wall_s", round(wall, 1), "s", "< 300", wall < 300,
               final_loss=s["final_loss"], status=s["status"], config=c.model_dump()),
    ]  # fmt: skip
    if args.out is None and not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    else:
        note(f"run directory kept: {out}")
    missed = [r["name"] for r in rows if r["ok"] is False]
    if missed:
        note("goals missed: " + ", ".join(missed))
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
