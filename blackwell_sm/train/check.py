"""Measured against predicted, inside the job: the `[bsm-check]` line, the ETA and the alerts.

After `WARMUP_STEPS` steps of this process (allocator warm-up, compile), the loop times
`PROFILE_STEPS` steps with a device sync around each (only those steps sync), and runs the last
of them under `torch.profiler` to split its time:
- compute: the union of compute intervals (CUDA: every kernel that is not NCCL's; CPU: the
  `aten::` ops on the training thread);
- exposed communication: the part of the collectives' intervals (CUDA: NCCL kernels; CPU: gloo's
  `gloo:` spans) that no compute interval covers;
- other: the rest of the step (host overhead, data loading, waits).
The profiled step's fractions are applied to the mean synced wall time of the steps before it
(the profiler itself slows the step it watches). Rank 0's timings; memory and step time are the
maximum over ranks.

From then on each logged step carries the ETA: remaining steps x the wall time per step since the
check (validation and checkpoint saves included: they delay the end too). When the ETA runs past
the job's deadline (MaxRuntime from `BSM_MAX_RUNTIME_S` + `BSM_JOB_START_UNIX`, or the capacity
block's end), or peak reserved memory passes the plan's range, one `[bsm-alert]` line says so
(a SageMaker metric, a metrics.jsonl record, summary.json) and names what to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

import torch
import torch.distributed as dist

from blackwell_sm.metrics import MEMORY_ADVICE, OVERRUN_ADVICE, WARMUP_STEPS
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import AlertRecord, CheckFigures, CheckRecord, Eta, Record

PROFILE_STEPS = 3  # steps timed with a device sync each; the last one is profiled, not timed
#: The plan's memory range above its point estimate: the planner's fragmentation term is fitted
#: within 6% on the torchtitan rows (planner/calibration.py); 10% leaves room for that spread.
MEMORY_RANGE_ABOVE = 0.10
Interval = tuple[float, float]


# -- arithmetic (pure) ------------------------------------------------------------------------
def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same points."""
    out: list[Interval] = []
    for a, b in sorted(i for i in intervals if i[1] > i[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def length(intervals: Iterable[Interval]) -> float:
    """Total length of the union of `intervals`."""
    return sum(b - a for a, b in union(intervals))


def uncovered(a: Iterable[Interval], b: Iterable[Interval]) -> float:
    """Length of the points of `a` that no interval of `b` covers."""
    ua, ub = union(a), union(b)
    return length(ua) - length(union((max(x0, y0), min(x1, y1)) for x0, x1 in ua for y0, y1 in ub))


def clip(intervals: Iterable[Interval], lo: float, hi: float) -> list[Interval]:
    return [(max(a, lo), min(b, hi)) for a, b in intervals if min(b, hi) > max(a, lo)]


def eta_s(remaining_steps: int, seconds_per_step: float) -> float:
    """Seconds to the end at `seconds_per_step`."""
    return max(0, remaining_steps) * seconds_per_step


def overrun_s(now: float, eta: float, deadline: float) -> float:
    """How far past `deadline` (unix s) the run ends at `eta` from `now`; <= 0: in time."""
    return now + eta - deadline


def memory_high_gib(plan: Plan, runtime_gib: float | None = None) -> float:
    """The high end of the plan's memory range (`runtime_gib`: Plan.predicted_memory_gib)."""
    return plan.predicted_memory_gib(runtime_gib) * (1.0 + MEMORY_RANGE_ABOVE)


def speed_verdict(measured: float, low: float, high: float) -> str:
    return "below_range" if measured < low else "above_range" if measured > high else "in_range"


class StepSplit(NamedTuple):
    """One profiled step, seconds of the profiler's clock."""

    span_s: float
    compute_s: float
    comm_s: float
    exposed_comm_s: float


def split_intervals(span: Interval, compute: list[Interval], comm: list[Interval]) -> StepSplit:
    compute, comm = clip(compute, *span), clip(comm, *span)
    return StepSplit(span[1] - span[0], length(compute), length(comm), uncovered(comm, compute))


# -- profiling ----------------------------------------------------------------------------------
STEP_MARK = "bsm::profiled_step"


def split_from_profile(events: Any, device_type: str) -> StepSplit | None:
    """The split of the step marked STEP_MARK in a torch.profiler event list."""
    from torch.autograd import DeviceType

    marks = [e for e in events if e.name == STEP_MARK and e.device_type == DeviceType.CPU]
    if not marks:
        return None
    mark = marks[0]
    span = (mark.time_range.start / 1e6, mark.time_range.end / 1e6)
    compute: list[Interval] = []
    comm: list[Interval] = []
    for e in events:
        iv = (e.time_range.start / 1e6, e.time_range.end / 1e6)
        name = e.name.lower()
        if device_type == "cuda":
            # Kernels and copies only: record_function ranges (ours, FSDP's) also appear on the
            # GPU timeline as user annotations spanning compute and communication alike.
            annotation = (
                getattr(e, "is_user_annotation", False)
                or "annotation" in str(getattr(e, "activity_type", "")).lower()
            )
            if e.device_type != DeviceType.CUDA or annotation:
                continue
            (comm if "nccl" in name else compute).append(iv)
        elif name.startswith("gloo:"):
            comm.append(iv)
        elif name.startswith("aten::") and e.thread == mark.thread:
            compute.append(iv)
    if device_type == "cuda" and (compute or comm):
        # GPU kernels run after the host marks: the span is the kernels' own extent.
        span = (min(a for a, _ in compute + comm), max(b for _, b in compute + comm))
    return split_intervals(span, compute, comm)


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class RunCheck:
    """The check of one run segment (this process's steps from `start_step`)."""

    def __init__(
        self,
        plan: Plan,
        device: torch.device,
        *,
        start_step: int,
        deadline: tuple[float, str] | None,
        tokens_per_step: int,
        n_gpus: int,
        emit: Callable[[Record], Any],
        memory: Callable[[], float],
        runtime_gib: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.plan, self.device, self.deadline = plan, device, deadline
        self.pred_mem = plan.predicted_memory_gib(runtime_gib)
        self.mem_high = memory_high_gib(plan, runtime_gib)
        self.total_steps = plan.run.steps
        self.first = start_step + WARMUP_STEPS  # 0-based index of the first timed step
        self.last = self.first + PROFILE_STEPS - 1
        self.tokens_per_step, self.n_gpus = tokens_per_step, n_gpus
        self.emit, self.memory, self.clock = emit, memory, clock
        self.times: list[float] = []  # synced wall times of the steps before the profiled one
        self.profiled = False
        self.profiled_s = 0.0
        self.split: StepSplit | None = None
        self.result: dict[str, Any] | None = None
        self.ready_at: tuple[int, float] | None = None  # (step, perf_counter) at the check
        self.alerted: set[str] = set()
        self.alerts: list[AlertRecord] = []
        self.last_eta: Eta | None = None

    @contextmanager
    def around(self, step: int) -> Iterator[None]:
        """Wrap the optimizer step `step` (0-based): a no-op outside the timed window."""
        if not self.first <= step <= self.last or step >= self.total_steps:
            yield
            return
        _sync(self.device)
        t0 = time.perf_counter()
        if step == self.last:
            from torch.profiler import ProfilerActivity, profile, record_function

            acts = [ProfilerActivity.CPU]
            if self.device.type == "cuda":
                acts.append(ProfilerActivity.CUDA)
            with profile(activities=acts) as prof, record_function(STEP_MARK):
                yield
                _sync(self.device)
            self.split = split_from_profile(prof.events(), self.device.type)
            self.profiled = True
            self.profiled_s = time.perf_counter() - t0
        else:
            yield
            _sync(self.device)
            self.times.append(time.perf_counter() - t0)

    def after(self, step_done: int) -> float:
        """Called by every rank after each step; runs the check once the window is timed.
        Returns the seconds the loop leaves out of its step-time window: the profiler's
        overhead (the profiled step's time above the timed steps' mean), else 0."""
        if step_done != self.last + 1 or not self.profiled or self.result is not None:
            return 0.0
        # Rank 0's timed steps (the profiled one only splits: the profiler slows it), the worst
        # memory and step time of all ranks.
        worst = torch.tensor([max(self.times), self.memory()], device=self.device)
        dist.all_reduce(worst, op=dist.ReduceOp.MAX)
        mean_step = sum(self.times) / len(self.times)
        self.result = self.compare(mean_step, float(worst[1]), step_done)
        self.result["slowest_rank_step_time_s"] = float(worst[0])
        self.ready_at = (step_done, time.perf_counter())
        self.emit(CheckRecord(step=step_done, **self.result))
        self.observe(step_done, self.result["mem_reserved_gib"], self.result["eta_s"])
        return max(0.0, self.profiled_s - mean_step)

    def compare(self, step_time: float, mem_gib: float, step_done: int) -> dict[str, Any]:
        """The check's figures: measured beside predicted (pure arithmetic on its inputs)."""
        th, plan = self.plan.throughput, self.plan
        tok = self.tokens_per_step / step_time / self.n_gpus
        low, high = th.tokens_per_s_per_gpu_range or (th.tokens_per_s_per_gpu,) * 2
        sp = self.split
        frac_compute = sp.compute_s / sp.span_s if sp and sp.span_s > 0 else None
        frac_exposed = sp.exposed_comm_s / sp.span_s if sp and sp.span_s > 0 else None
        compute = step_time * frac_compute if frac_compute is not None else step_time
        exposed = step_time * frac_exposed if frac_exposed is not None else 0.0
        bd = th.breakdown_s
        flops = plan.throughput.flops_per_token  # the plan's MFU basis (LoRA: no dW)
        eta = eta_s(self.total_steps - step_done, step_time)
        return {
            "tok_s_gpu": tok,
            "pred_tok_s_gpu": th.tokens_per_s_per_gpu,
            "pred_tok_s_gpu_low": low,
            "pred_tok_s_gpu_high": high,
            "speed_ratio": tok / th.tokens_per_s_per_gpu if th.tokens_per_s_per_gpu else 0.0,
            "speed": speed_verdict(tok, low, high),
            "step_time_s": step_time,
            "pred_step_time_s": th.step_time_s,
            "compute_s": compute,
            "pred_compute_s": bd.compute + bd.recompute + bd.optimizer if bd else th.step_time_s,
            "exposed_comm_s": exposed,
            "pred_exposed_comm_s": bd.exposed_communication if bd else 0.0,
            "other_s": max(0.0, step_time - compute - exposed),
            "mfu": tok * flops / plan.instance.peak_flops_bf16,
            "pred_mfu": th.mfu,
            "mem_reserved_gib": mem_gib,
            "pred_mem_gib": self.pred_mem,
            "pred_mem_high_gib": self.mem_high,
            "memory": "above_range" if mem_gib > self.mem_high else "in_range",
            "eta_s": eta,
            "total_steps": self.total_steps,
            "timing": f"{self.device.type}_profiler" if sp else "wall_clock",
        }

    def eta(self, step_done: int) -> float | None:
        """Seconds to the end at the rate measured since the check (None before it)."""
        if self.result is None or self.ready_at is None:
            return None
        since = step_done - self.ready_at[0]
        rate = (
            (time.perf_counter() - self.ready_at[1]) / since
            if since > 0
            else self.result["step_time_s"]
        )
        return eta_s(self.total_steps - step_done, rate)

    def observe(self, step: int, mem_gib: float, eta: float | None) -> None:
        """Rank 0, at the check and each logged step after it: the deadline and memory alerts."""
        now = self.clock()
        if eta is not None:
            fields: dict[str, Any] = {"step": step, "eta_s": eta, "projected_end_unix": now + eta}
            over, at, what = None, 0.0, ""
            if self.deadline is not None:
                at, what = self.deadline
                over = overrun_s(now, eta, at)
                fields.update(deadline_unix=at, deadline=what, overrun_s=over)
                fields.update(ends_before_deadline=over <= 0)
            self.last_eta = Eta(**fields)
            if over is not None and over > 0:
                end = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))
                self._alert(
                    step,
                    "overrun",
                    "overrun_s",
                    over,
                    f"at the measured rate the run ends {over / 3600:.2f} h after the "
                    f"{what} ({end}): {OVERRUN_ADVICE}; the loop saves a checkpoint "
                    f"ahead of the {what}",
                )
        high = self.mem_high
        if mem_gib > high:
            usable = self.plan.memory_gib.usable or self.plan.memory_gib.limit
            self._alert(
                step,
                "memory",
                "mem_over_gib",
                mem_gib - high,
                f"peak reserved memory {mem_gib:.2f} GiB is above the plan's range "
                f"(predicted {self.pred_mem:.2f} GiB, high end "
                f"{high:.2f} GiB, usable {usable:.2f} GiB): {MEMORY_ADVICE}",
            )

    def _alert(self, step: int, kind: str, key: str, value: float, message: str) -> None:
        if kind in self.alerted:  # once per kind; the summary keeps the latest figures
            return
        self.alerted.add(kind)
        rec = AlertRecord.model_validate(
            {"alert": kind, "step": step, key: value, "message": message, "time": self.clock()}
        )
        self.alerts.append(rec)
        self.emit(rec)

    def summary(self) -> tuple[CheckFigures | None, Eta | None, list[AlertRecord]]:
        """summary.json's `check`, `eta` and `alerts` fields."""
        check = None if self.result is None else CheckFigures(**self.result)
        return check, self.last_eta, self.alerts
