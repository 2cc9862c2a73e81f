"""The run's records (blackwell_sm/records): the stdout lines SageMaker parses, metrics.jsonl,
and the end-of-run summary.json."""

from __future__ import annotations

import os
import resource
import sys
import time
from pathlib import Path

import torch

from blackwell_sm.atomic_write import write_text
from blackwell_sm.opt_ml import METRICS_FILE, SUMMARY_FILE, OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import (
    BadStepRecord,
    Measured,
    Predicted,
    Ratios,
    Record,
    SaveRecord,
    StartRecord,
    StopRecord,
    Summary,
    TrainRecord,
    ValRecord,
    measured_from,
    record_line,
    to_json,
)
from blackwell_sm.train.check import RunCheck
from blackwell_sm.train.tracker_process import Trackers

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


#: What a CPU worker's RSS grows by once the loop runs, beyond the tensors the planner counts:
#: autograd's threads, the profiler's library at the check, DCP, the data reader. Measured
#: 0.052-0.060 GiB on the tiny demo (2 workers, torch 2.13.0+cpu, 2026-12-03); rounded up.
CPU_LOOP_RUNTIME_GIB = 0.10


def runtime_gib(device: torch.device) -> float | None:
    """On CPU, the runtime (interpreter, torch, gloo, then the loop's own libraries) that the
    plan's comparison uses: this process's peak RSS so far, called before the model is built,
    plus CPU_LOOP_RUNTIME_GIB. None on CUDA, whose allocator counters leave the runtime out."""
    if device.type == "cuda":
        return None
    return _own_peak_rss_bytes() / GIB + CPU_LOOP_RUNTIME_GIB


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
    """The one writer of a run's records (blackwell_sm/records): rank 0 prints each record's
    `[bsm-*]` line and appends it to metrics.jsonl; every rank keeps its own for the summary."""

    def __init__(
        self,
        out_dir: Path,
        plan: Plan,
        device: torch.device,
        *,
        is_main: bool,
        runtime_gib: float | None = None,
    ) -> None:
        self.plan, self.device, self.is_main = plan, device, is_main
        self.runtime_gib = runtime_gib  # see runtime_gib(): measured before the model is built
        self.path = out_dir / METRICS_FILE
        self.summary_path = out_dir / SUMMARY_FILE
        self.flops_per_token = plan.throughput.flops_per_token  # the plan's MFU basis (LoRA: no dW)
        self.peak_flops = plan.instance.peak_flops_bf16  # the MFU basis the planner used
        self.records: list[Record] = []
        self.check: RunCheck | None = None
        self.trackers: Trackers | None = None
        if is_main:
            out_dir.mkdir(parents=True, exist_ok=True)
            _end_torn_line(self.path)
            if plan.spec.training.report_to:  # train/trackers.py; out_dir is <root>/output/data
                tb = OptMl(out_dir.parents[1]).tensorboard
                self.trackers = Trackers(plan, tensorboard_dir=tb, out_dir=out_dir)

    def start_check(
        self,
        *,
        start_step: int,
        deadline: tuple[float, str] | None,
        tokens_per_step: int,
        n_gpus: int,
    ) -> RunCheck:
        """The measured-against-predicted check of this process's steps (train/check.py)."""
        self.check = RunCheck(
            self.plan,
            self.device,
            start_step=start_step,
            deadline=deadline,
            tokens_per_step=tokens_per_step,
            n_gpus=n_gpus,
            emit=self.write,
            memory=lambda: peak_memory(self.device)[1],
            runtime_gib=self.runtime_gib,
        )
        return self.check

    def write(self, rec: Record) -> Record:
        """Keep `rec`; on rank 0 print its log line (if it has one) and append it to metrics.jsonl."""
        self.records.append(rec)
        if self.is_main:
            line = record_line(rec)
            if line is not None:
                print(line, flush=True)
            with open(self.path, "a") as f:
                f.write(to_json(rec) + "\n")
            if self.trackers is not None:
                self.trackers.write(rec)  # queued: a tracker never blocks the step
        return rec

    def start(
        self, step: int, *, resumed_from: int | None, checkpoint: str | None, world_size: int
    ) -> None:
        """This launch's first record: the format version and where it resumed from."""
        self.write(
            StartRecord(
                step=step,
                resumed_from_step=resumed_from,
                checkpoint=checkpoint,
                world_size=world_size,
                time=time.time(),
            )
        )

    def saved(self, step: int, checkpoint: Path) -> None:
        self.write(SaveRecord(step=step, checkpoint=checkpoint.name, time=time.time()))

    def stopped(self, step: int, reason: str) -> None:
        self.write(StopRecord(step=step, reason=reason, time=time.time()))

    def step(
        self,
        step: int,
        *,
        loss: float,
        lr: float,
        grad_norm: float,
        tokens: int,
        step_time_s: float,
        n_gpus: int,
    ) -> TrainRecord:
        tok_s_gpu = tokens / step_time_s / n_gpus
        alloc, reserved, kind = peak_memory(self.device)
        eta = self.check.eta(step) if self.check is not None else None
        rec = TrainRecord(
            step=step,
            loss=loss,
            lr=lr,
            grad_norm=grad_norm,
            tok_s_gpu=tok_s_gpu,
            mfu=tok_s_gpu * self.flops_per_token / self.peak_flops,
            step_time_s=step_time_s,
            mem_alloc_gib=alloc,
            mem_reserved_gib=reserved,
            memory_kind=kind,
            time=time.time(),
            eta_s=eta,
        )
        self.write(rec)
        if self.is_main and eta is not None and self.check is not None:
            self.check.observe(step, reserved, eta)
        return rec

    def validation(self, step: int, loss: float) -> None:
        self.write(ValRecord(step=step, loss=loss, time=time.time()))

    def bad_step(self, step: int, *, loss: float, grad_norm: float, in_row: int) -> None:
        """A step the NaN guard skipped (train/guard.py): a `bad_step` record (non-finite
        figures as null, named under `non_finite`: records.to_json)."""
        self.write(
            BadStepRecord(
                step=step, loss=loss, grad_norm=grad_norm, in_row=in_row, time=time.time()
            )
        )

    def summary(self, *, status: str, final_step: int, resumed_from: int | None) -> Summary:
        """Measured figures beside the plan's predictions. Step-time statistics skip the first
        WARMUP_STEPS logged steps of this process (allocator warm-up, compile)."""
        alloc, reserved, kind = peak_memory(self.device)
        peak = Measured(
            steps_timed=0,
            peak_memory_allocated_gib=alloc,
            peak_memory_reserved_gib=reserved,
            memory_kind=kind,
        )
        measured = measured_from(self.records, peak=peak)
        train = [r for r in self.records if isinstance(r, TrainRecord)]
        vals = [r for r in self.records if isinstance(r, ValRecord)]
        pred, pred_mem = self.plan.throughput, self.plan.predicted_memory_gib(self.runtime_gib)
        tok = measured.tokens_per_s_per_gpu
        check, eta, alerts = self.check.summary() if self.check is not None else (None, None, [])
        return Summary(
            status=status,
            final_step=final_step,
            planned_steps=self.plan.run.steps,
            resumed_from_step=resumed_from,
            final_loss=train[-1].loss if train else None,
            final_val_loss=vals[-1].loss if vals else None,
            measured=measured,
            predicted=Predicted(
                step_time_s=pred.step_time_s,
                tokens_per_s_per_gpu=pred.tokens_per_s_per_gpu,
                mfu=pred.mfu,
                memory_gib=pred_mem,
            ),
            ratio_measured_over_predicted=Ratios(
                tokens_per_s_per_gpu=None
                if tok is None or not pred.tokens_per_s_per_gpu
                else tok / pred.tokens_per_s_per_gpu,
                peak_memory=reserved / pred_mem if pred_mem else None,
            ),
            check=check,
            eta=eta,
            alerts=alerts,
        )

    def write_summary(self, summary: Summary) -> None:
        """summary.json, whole or not at all (`atomic_write`: the one atomic writer)."""
        write_text(self.summary_path, to_json(summary, indent=2) + "\n", flag=None)
        if self.trackers is not None:
            self.trackers.close(summary.status)
            self.trackers = None


def _end_torn_line(path: Path) -> None:
    """End a last line a killed run left unfinished, so the next record starts its own line (the
    reader then leaves only that torn line out)."""
    try:
        with open(path, "rb+") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return
            f.seek(-1, os.SEEK_END)
            if f.read(1) != b"\n":
                f.write(b"\n")
    except FileNotFoundError:
        return


def log(msg: str, *, is_main: bool = True) -> None:
    """A human-readable line on stdout (rank 0 only unless told otherwise)."""
    if is_main:
        print(f"[bsm] {msg}", file=sys.stdout, flush=True)
