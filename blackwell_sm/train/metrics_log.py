"""Step metrics: the stdout line SageMaker parses, a JSONL copy, and the end-of-run summary."""

from __future__ import annotations

import json
import resource
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import torch

from blackwell_sm.metrics import WARMUP_STEPS, format_step_line, format_val_line
from blackwell_sm.opt_ml import METRICS_FILE
from blackwell_sm.planner.plan import Plan
from blackwell_sm.train.check import RunCheck

GIB = 1024**3


def peak_memory(device: torch.device) -> tuple[float, float, str]:
    """(allocated GiB, reserved GiB, kind). CUDA: allocator peaks. CPU: the process's max RSS
    for both (the CPU has no caching allocator to tell them apart)."""
    if device.type == "cuda":
        return (
            torch.cuda.max_memory_allocated(device) / GIB,
            torch.cuda.max_memory_reserved(device) / GIB,
            "cuda_max_allocated_reserved",
        )
    rss = _own_peak_rss_bytes() / GIB
    return rss, rss, "cpu_max_rss"


def _own_peak_rss_bytes() -> int:
    """This process image's peak RSS. getrusage's ru_maxrss also counts the peak before exec
    and the parent's pages at fork (a worker spawned by a large process reports the parent's
    size); /proc's VmHWM is the high-water mark of this image's own memory."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # kB
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux


class MetricsLog:
    """Rank 0 prints one `[bsm-step]` line per logged step and appends it to metrics.jsonl."""

    def __init__(self, out_dir: Path, plan: Plan, device: torch.device, *, is_main: bool) -> None:
        self.plan, self.device, self.is_main = plan, device, is_main
        self.path = out_dir / METRICS_FILE
        self.flops_per_token = plan.spec.model.flops_per_token(plan.config.seq_len)
        self.peak_flops = plan.instance.peak_flops_bf16  # the MFU basis the planner used
        self.records: list[dict[str, Any]] = []
        self.check: RunCheck | None = None
        if is_main:
            out_dir.mkdir(parents=True, exist_ok=True)

    def start_check(self, *, start_step: int, deadline: tuple[float, str] | None,
                    tokens_per_step: int, n_gpus: int) -> RunCheck:  # fmt: skip
        """The measured-against-predicted check of this process's steps (train/check.py)."""
        self.check = RunCheck(
            self.plan, self.device, start_step=start_step, deadline=deadline,
            tokens_per_step=tokens_per_step, n_gpus=n_gpus, emit=self._emit,
            memory=lambda: peak_memory(self.device)[1],
        )  # fmt: skip
        return self.check

    def _emit(self, rec: dict[str, Any], line: str) -> None:
        self.records.append(rec)
        if self.is_main:
            print(line, flush=True)
            self._append(rec)

    def step(self, step: int, *, loss: float, lr: float, grad_norm: float, tokens: int,
             step_time_s: float, n_gpus: int) -> dict[str, Any]:  # fmt: skip
        tok_s_gpu = tokens / step_time_s / n_gpus
        alloc, reserved, kind = peak_memory(self.device)
        values = {
            "loss": loss,
            "lr": lr,
            "grad_norm": grad_norm,
            "tok_s_gpu": tok_s_gpu,
            "mfu": tok_s_gpu * self.flops_per_token / self.peak_flops,
            "step_time_s": step_time_s,
            "mem_alloc_gib": alloc,
            "mem_reserved_gib": reserved,
        }
        eta = self.check.eta(step) if self.check is not None else None
        rec = {"kind": "train", "step": step, **values, "memory_kind": kind, "time": time.time()}
        if eta is not None:
            rec["eta_s"] = eta
        self.records.append(rec)
        if self.is_main:
            print(format_step_line(step, eta_s=eta, **values), flush=True)
            self._append(rec)
            if eta is not None and self.check is not None:
                self.check.observe(step, reserved, eta)
        return rec

    def validation(self, step: int, loss: float) -> None:
        rec = {"kind": "val", "step": step, "loss": loss, "time": time.time()}
        self.records.append(rec)
        if self.is_main:
            print(format_val_line(step, loss), flush=True)
            self._append(rec)

    def _append(self, rec: dict[str, Any]) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def summary(self, *, status: str, final_step: int, resumed_from: int | None) -> dict[str, Any]:
        """Measured figures beside the plan's predictions. Step-time statistics skip the first
        WARMUP_STEPS steps of this process (allocator warm-up, compile)."""
        train = [r for r in self.records if r["kind"] == "train"]
        steady = train[WARMUP_STEPS:] or train
        alloc, reserved, kind = peak_memory(self.device)
        med = statistics.median([r["step_time_s"] for r in steady]) if steady else None
        tok = statistics.median([r["tok_s_gpu"] for r in steady]) if steady else None
        vals = [r for r in self.records if r["kind"] == "val"]
        pred = self.plan.throughput
        check = self.check.summary() if self.check is not None else {}
        return {
            "status": status,
            "final_step": final_step,
            "planned_steps": self.plan.run.steps,
            "resumed_from_step": resumed_from,
            "final_loss": train[-1]["loss"] if train else None,
            "final_val_loss": vals[-1]["loss"] if vals else None,
            "measured": {
                "steps_timed": len(steady),
                "step_time_s": med,
                "tokens_per_s_per_gpu": tok,
                "mfu": None if tok is None else tok * self.flops_per_token / self.peak_flops,
                "peak_memory_allocated_gib": alloc,
                "peak_memory_reserved_gib": reserved,
                "memory_kind": kind,
            },
            "predicted": {
                "step_time_s": pred.step_time_s,
                "tokens_per_s_per_gpu": pred.tokens_per_s_per_gpu,
                "mfu": pred.mfu,
                "memory_gib": self.plan.predicted_memory_gib(),
            },
            "ratio_measured_over_predicted": {
                "tokens_per_s_per_gpu": None
                if tok is None or not pred.tokens_per_s_per_gpu
                else tok / pred.tokens_per_s_per_gpu,
                "peak_memory": reserved / self.plan.predicted_memory_gib()
                if self.plan.predicted_memory_gib()
                else None,
            },
            # train/check.py: the [bsm-check] figures, the latest ETA against the deadline, and
            # the alerts (docs/training-loop.md). None/[] when the run was too short to check.
            "check": check.get("check"),
            "eta": check.get("eta"),
            "alerts": check.get("alerts", []),
        }

    def bad_step(self, step: int, *, loss: float, grad_norm: float, in_row: int) -> None:
        """A step the NaN guard skipped (train/guard.py): a `bad_step` record in metrics.jsonl
        (non-finite values as strings, so the file stays JSON)."""
        rec = {"kind": "bad_step", "step": step, "loss": str(loss), "grad_norm": str(grad_norm),
               "in_row": in_row, "time": time.time()}  # fmt: skip
        self.records.append(rec)
        if self.is_main:
            self._append(rec)


def log(msg: str, *, is_main: bool = True) -> None:
    """A human-readable line on stdout (rank 0 only unless told otherwise)."""
    if is_main:
        print(f"[bsm] {msg}", file=sys.stdout, flush=True)
