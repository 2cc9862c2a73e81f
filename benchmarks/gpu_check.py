"""GPU check: plan each run of issue 17 for this machine's one GPU, run it through the real
launcher and torch.distributed, and print what was measured beside what the planner predicted.

    bash benchmarks/gpu_check.sh [--runs a,b] [--steps 30] [--gpu H100|H200|B200] [--out DIR]
    bash benchmarks/gpu_check.sh --cpu-dry [--runs ...]   # same path on CPU: tiny model
    bash benchmarks/gpu_check.sh --plan-only --gpu H200    # the predictions only, no GPU needed
    bash benchmarks/gpu_check.sh --list                    # the runs, in order

Runs (GPU; --cpu-dry swaps in the tiny model, seq 64, no compile, and skips fp8):
  bf16-ac-<mode>   llama-3.2-1b, bf16, seq 4096, compile, one run per activation-checkpointing
                   mode the spec knows (none, selective, full, and any the planner adds later);
  fp8              the same with torchao float8 (tensorwise), AC none;
  near-limit       llama-3.2-3b at the micro-batch the planner picks for this GPU (AC auto);
  ckpt-resume-export  1B bf16: checkpoint (async on CUDA), SIGTERM after the first save, resume
                   in the same /opt/ml, finish, export, load the export in transformers.

One JSON line per run (benchmarks/_common.py): tokens/s/GPU, MFU, step time, peak allocated and
reserved memory, the peak nvidia-smi memory.used, each beside the plan's prediction and the goal's
band (tokens/s within 15 %, memory within 10 %; MFU >= 40 % on the 1B bf16 runs). Exit 0 when
all goals are met (always in --cpu-dry, where the CPU peak is nominal and goals are not applied),
1 when one is missed, 2 when a run fails. The run logs go to stderr.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import emit, note

GOAL_MFU = 0.40
GOAL_MEMORY_REL = 0.10
GOAL_TOKENS_REL = 0.15
GPU_MODEL, GPU_SEQ, GPU_GLOBAL_SEQS = "llama-3.2-1b", 4096, 8
DRY_MODEL, DRY_SEQ, DRY_GLOBAL_SEQS = "tiny", 64, 4


@dataclass(frozen=True)
class RunDef:
    """One configuration of the check; `gpu` values, swapped for tiny ones under --cpu-dry."""

    name: str
    model: str = GPU_MODEL
    precision: str = "bf16"
    ac: str = "none"
    global_seqs: int = GPU_GLOBAL_SEQS
    ckpt: bool = False  # checkpoint, SIGTERM after the first save, resume, export
    fill_memory: bool = False  # the feasible micro-batch that uses the most memory
    mfu_goal: bool = True
    pins: dict[str, Any] = field(default_factory=dict)


def runs() -> list[RunDef]:
    """The runs in order: every AC mode the spec knows, then fp8, near-limit, checkpointing."""
    from typing import get_args

    from blackwell_sm.spec.training import Checkpointing

    out = [RunDef(f"bf16-ac-{mode}", ac=mode) for mode in get_args(Checkpointing)]
    out.append(RunDef("fp8", precision="fp8"))
    out.append(RunDef("near-limit", model="llama-3.2-3b", ac="none", global_seqs=32,
                      mfu_goal=False, fill_memory=True))  # fmt: skip
    out.append(RunDef("ckpt-resume-export", ckpt=True, mfu_goal=False))
    return out


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


def make_spec(rd: RunDef, *, dry: bool, steps: int):
    """The RunSpec for one run: precision and AC as the run says, synthetic data."""
    from blackwell_sm.spec import parse_spec

    model, seq, seqs = (DRY_MODEL, DRY_SEQ, DRY_GLOBAL_SEQS) if dry else (
        rd.model, GPU_SEQ, rd.global_seqs)  # fmt: skip
    total = 2 * steps if rd.ckpt else steps
    ckpt = {"interval_steps": steps, "interval_minutes": None, "async_save": True,
            "keep_last": 2} if rd.ckpt else {"interval_steps": None, "interval_minutes": None,
                                             "async_save": False}  # fmt: skip
    return parse_spec({
        "model": model,
        "training": {
            "seq_len": seq, "global_batch_seqs": seqs, "total_steps": total,
            "precision": rd.precision, "activation_checkpointing": rd.ac,
            "schedule": {"warmup_steps": min(10, steps - 1)}, "checkpoint": ckpt,
            "data": {"source": "synthetic"}, "export_model": rd.ckpt, "log_interval_steps": 1,
            "pins": {"compile": not dry, **rd.pins},
        },
    })  # fmt: skip


def plan_run(rd: RunDef, instance, *, dry: bool, steps: int):
    """The run's plan. A `fill_memory` run tests the memory prediction where it matters: the
    planner's own choice leaves headroom on purpose, so this takes the feasible micro-batch (a
    power of two, the planner's prediction for it) that comes closest to the usable limit."""
    from blackwell_sm.errors import BsmError
    from blackwell_sm.planner.api import make_plan

    spec = make_spec(rd, dry=dry, steps=steps)
    plan = make_plan(spec, instance=instance)
    if not rd.fill_memory:
        return plan
    best = plan
    mb = 1
    while mb <= spec.training.global_batch_seqs:
        pinned = make_spec(replace(rd, pins={**rd.pins, "micro_batch_size": mb}), dry=dry,
                           steps=steps)  # fmt: skip
        try:
            p = make_plan(pinned, instance=instance)
        except (BsmError, ValueError):  # a pin the batch cannot take: try the next
            p = None
        if p is not None and p.feasible and p.memory_gib.total > best.memory_gib.total:
            best = p
        mb *= 2
    return best


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


class SmiPeak:
    """Polls nvidia-smi's memory.used (MiB) while a run goes; None where it cannot be read."""

    def __init__(self, enabled: bool) -> None:
        self.peak_mib: float | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True) if enabled else None

    def _poll(self) -> None:
        cmd = ["nvidia-smi", "--query-gpu=memory.used", "--format=csv,noheader,nounits", "-i", "0"]
        while not self._stop.wait(0.5):
            try:
                v = float(subprocess.run(cmd, capture_output=True, text=True, timeout=5).stdout)
            except (OSError, ValueError, subprocess.SubprocessError):
                return
            self.peak_mib = max(self.peak_mib or 0.0, v)

    def __enter__(self) -> SmiPeak:
        if self._thread:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()


def launch(plan_path: Path, out: Path, *, dry: bool, timeout: float, stop_after_save: bool) -> int:
    """Run the real launcher; with `stop_after_save`, SIGTERM it once a checkpoint is saved."""
    from blackwell_sm.local import free_port, launcher_command, launcher_env

    env = launcher_env(master_port=free_port(), extra={"BSM_DEVICE": "cpu" if dry else "cuda"})
    proc = subprocess.Popen(launcher_command(plan_path, out), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)  # fmt: skip
    timer = threading.Timer(timeout, proc.kill)
    timer.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:  # stdout is JSON lines only: the run's log goes to stderr
            sys.stderr.write(line)
            if stop_after_save and re.search(r"checkpoint step \d+ saved", line):
                proc.send_signal(signal.SIGTERM)
                stop_after_save = False
        return proc.wait()
    finally:
        timer.cancel()


def load_export(model_dir: Path) -> dict[str, Any]:
    """Load the exported model with transformers; its parameter count, or why it could not."""
    try:
        from transformers import AutoModelForCausalLM
    except ImportError as e:
        return {"loaded": None, "why": f"transformers not importable: {e}"}
    try:
        m = AutoModelForCausalLM.from_pretrained(model_dir)
    except Exception as e:  # any failure to load is the finding
        return {"loaded": False, "why": f"{type(e).__name__}: {e}"[:500]}
    return {"loaded": True, "params": sum(p.numel() for p in m.parameters())}


def run_one(rd: RunDef, instance, *, dry: bool, steps: int, out: Path, timeout: float,
            device_name: str) -> dict:  # fmt: skip
    """Plan, launch and measure one run; returns its JSON row."""
    from blackwell_sm.local import layout_opt_ml

    common = {"run": rd.name, "device": device_name, "mode": "cpu-dry" if dry else "gpu"}
    if dry and rd.precision != "bf16":
        return emit("gpu_check.run", None, "tokens/s", ok=None, skipped=f"{rd.precision} needs a "
                    "CUDA GPU with fp8 (sm_89+); not run on CPU", **common)  # fmt: skip
    plan = plan_run(rd, instance, dry=dry, steps=steps)
    c = plan.config
    common.update(model=plan.model.name, config=c.model_dump())
    note(f"[{rd.name}] {plan.model.name}: micro-batch {c.micro_batch_size} x accum "
         f"{c.grad_accum_steps}, seq {c.seq_len}, {c.precision}, AC {c.activation_checkpointing}, "
         f"compile {c.compile}; predicted {plan.throughput.tokens_per_s_per_gpu:,.0f} tok/s, "
         f"MFU {plan.throughput.mfu:.1%}, {plan.memory_gib.total:.1f} GiB")  # fmt: skip
    if not plan.feasible:
        return emit("gpu_check.run", None, "tokens/s", ok=False, error="infeasible plan: "
                    + "; ".join(plan.advice), **common)  # fmt: skip
    rundir = out / rd.name
    shutil.rmtree(rundir, ignore_errors=True)
    plan_path = layout_opt_ml(rundir, plan)
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    with SmiPeak(enabled=not dry and shutil.which("nvidia-smi") is not None) as smi:
        rc = launch(plan_path, rundir, dry=dry, timeout=timeout, stop_after_save=rd.ckpt)
        if rd.ckpt and rc == 0:
            summary_a = json.loads((rundir / "output/data/summary.json").read_text())
            extra["stopped_at_step"] = summary_a["final_step"]
            rc = launch(plan_path, rundir, dry=dry, timeout=timeout, stop_after_save=False)
    wall = time.perf_counter() - t0
    summary_path = rundir / "output" / "data" / "summary.json"
    if rc != 0 or not summary_path.is_file():
        failure = rundir / "output" / "failure"
        reason = failure.read_text().strip() if failure.is_file() else f"exit {rc}, no failure file"
        return emit("gpu_check.run", None, "tokens/s", ok=False, error=reason, exit_code=rc,
                    wall_s=round(wall, 1), out_dir=str(rundir), **common)  # fmt: skip
    s = json.loads(summary_path.read_text())
    m = s["measured"]
    if rd.ckpt:
        extra.update(resumed_from_step=s["resumed_from_step"], final_step=s["final_step"],
                     export=load_export(rundir / "model"))  # fmt: skip
    tok, mfu, reserved = m["tokens_per_s_per_gpu"], m["mfu"], m["peak_memory_reserved_gib"]
    mem_pred = plan.memory_gib.allocator_reserved or plan.memory_gib.total
    pred = plan.throughput
    goals = {
        "tokens_per_s_per_gpu": within(tok, pred.tokens_per_s_per_gpu, GOAL_TOKENS_REL),
        "peak_reserved_gib": within(reserved, mem_pred, GOAL_MEMORY_REL),
        "mfu": (mfu is not None and mfu >= GOAL_MFU) if rd.mfu_goal else None,
    }
    if rd.ckpt:
        goals["resumed_and_exported"] = bool(
            extra["resumed_from_step"] and extra["export"].get("loaded") is not False
        )
    ok = None if dry else all(v is not False for v in goals.values())
    smi_gib = None if smi.peak_mib is None else round(smi.peak_mib / 1024, 3)
    return emit(
        "gpu_check.run", tok and round(tok, 1), "tokens/s/GPU", ok=ok,
        measured={"tokens_per_s_per_gpu": tok, "mfu": mfu, "step_time_s": m["step_time_s"],
                  "peak_allocated_gib": m["peak_memory_allocated_gib"],
                  "peak_reserved_gib": reserved, "nvidia_smi_peak_used_gib": smi_gib,
                  "memory_kind": m["memory_kind"], "steps_timed": m["steps_timed"]},
        predicted={"tokens_per_s_per_gpu": round(pred.tokens_per_s_per_gpu, 1),
                   "mfu": round(pred.mfu, 4), "step_time_s": round(pred.step_time_s, 4),
                   "allocator_reserved_gib": round(mem_pred, 3),
                   "total_incl_context_gib": round(plan.memory_gib.total, 3)},
        goal_band={"tokens_per_s_per_gpu": band(pred.tokens_per_s_per_gpu, GOAL_TOKENS_REL),
                   "peak_reserved_gib": band(mem_pred, GOAL_MEMORY_REL),
                   "mfu": f">= {GOAL_MFU}" if rd.mfu_goal else None},
        goals=goals if not dry else {k: None for k in goals}, status=s["status"],
        final_loss=s["final_loss"], wall_s=round(wall, 1), **extra, **common,
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpu-dry", action="store_true",
                    default=os.environ.get("BSM_GPU_CHECK_CPU_DRY", "") not in ("", "0"),
                    help="run the same path on CPU (tiny model); also BSM_GPU_CHECK_CPU_DRY=1")  # fmt: skip
    ap.add_argument("--runs", help="comma list of run names (default: all; see --list)")
    ap.add_argument("--list", action="store_true", help="print the run names and stop")
    ap.add_argument("--steps", type=int, default=None, help="default 30 (GPU), 3 (--cpu-dry)")
    ap.add_argument("--gpu", choices=["H100", "H200", "B200"], help="override the detected GPU")
    ap.add_argument("--out", type=Path, help="run directory (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep the temporary run directory")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per launch")
    ap.add_argument("--plan-only", action="store_true",
                    help="print each run's predictions (needs --gpu off a GPU box) and stop")  # fmt: skip
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
    steps = args.steps or (3 if dry else 30)
    if steps < 3:
        ap.error("--steps must be at least 3 (the loop's summary skips 2 warm-up steps)")

    from blackwell_sm.hardware import local_instance

    if dry:
        device_name, instance = "cpu", local_instance(nproc=1)
    elif args.plan_only and args.gpu:
        device_name = f"(planned for {args.gpu})"
        instance = local_instance(nproc=1, device="cuda", gpu=pick_gpu(args.gpu, args.gpu))
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

    if args.plan_only:
        for rd in chosen:
            plan = plan_run(rd, instance, dry=dry, steps=steps)
            mem = plan.memory_gib.allocator_reserved or plan.memory_gib.total
            emit("gpu_check.plan", plan.model.name, "", run=rd.name, device=device_name,
                 feasible=plan.feasible, config=plan.config.model_dump(),
                 predicted={"tokens_per_s_per_gpu": round(plan.throughput.tokens_per_s_per_gpu, 1),
                            "mfu": round(plan.throughput.mfu, 4), "reserved_gib": round(mem, 3),
                            "total_gib": round(plan.memory_gib.total, 3)})  # fmt: skip
        return 0

    out = args.out or Path(tempfile.mkdtemp(prefix="bsm-gpu-check-"))
    rows = [run_one(rd, instance, dry=dry, steps=steps, out=out, timeout=args.timeout,
                    device_name=device_name) for rd in chosen]  # fmt: skip
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
