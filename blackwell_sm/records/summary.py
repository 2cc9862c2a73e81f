"""summary.json (`Summary`, versioned) and the measured figures of a run's records."""

from __future__ import annotations

import statistics
from typing import Annotated, Any

from pydantic import Field, Strict

from blackwell_sm.metrics import WARMUP_STEPS
from blackwell_sm.records.kinds import (
    AlertRecord,
    CheckFigures,
    Count,
    MemoryKind,
    NonNeg,
    Num,
    Positive,
    StartRecord,
    TrainRecord,
    UnixTime,
    _Model,
)

#: summary.json's `schema_version`. 1: the file has no `schema_version` (same fields).
SUMMARY_VERSION = 2


class Measured(_Model):
    """The run's measured figures: medians of the steady steps (WARMUP_STEPS of each launch left
    out), peak memory. None: nothing was measured (no step timed)."""

    steps_timed: Count
    step_time_s: Positive | None = None
    tokens_per_s_per_gpu: Positive | None = None
    mfu: NonNeg | None = None
    peak_memory_allocated_gib: NonNeg | None = None
    peak_memory_reserved_gib: NonNeg | None = None
    memory_kind: MemoryKind | None = None


class Predicted(_Model):
    step_time_s: NonNeg
    tokens_per_s_per_gpu: NonNeg
    mfu: NonNeg
    memory_gib: NonNeg = Field(
        description="Plan.predicted_memory_gib(): what memory compares with."
    )


class Ratios(_Model):
    tokens_per_s_per_gpu: NonNeg | None = None
    peak_memory: NonNeg | None = None


class Eta(_Model):
    """The latest logged step's time to the end, against the deadline when there is one."""

    step: Count
    eta_s: NonNeg
    projected_end_unix: UnixTime
    deadline_unix: UnixTime | None = None
    deadline: str | None = None
    overrun_s: Num | None = None
    ends_before_deadline: bool | None = None


class Summary(_Model):
    """summary.json: the loop's end-of-run account, measured beside predicted."""

    schema_version: Annotated[int, Strict(), Field(ge=1)] = SUMMARY_VERSION
    status: str = Field(
        pattern=r"^(completed|stopped( \(.*\))?)$",
        description="'completed', or 'stopped (REASON)' after a clean save.",
    )
    final_step: Count
    planned_steps: Count
    resumed_from_step: Count | None = None
    final_loss: Num | None = None
    final_val_loss: Num | None = None
    measured: Measured
    predicted: Predicted
    ratio_measured_over_predicted: Ratios
    check: CheckFigures | None = Field(None, description="None: too few steps to check.")
    eta: Eta | None = None
    alerts: list[AlertRecord] = Field(default_factory=list)

    @property
    def completed(self) -> bool:
        return self.status == "completed"


def measured_from(records: list[Any], *, peak: Measured | None = None) -> Measured:
    """Measured figures of `records`: the medians of each launch's train records after its first
    WARMUP_STEPS (all of them when a launch logged no more), the highest peak memory. `peak`: the
    process's own allocator peaks (the loop's summary), else the records'."""
    train: list[TrainRecord] = []
    steady: list[TrainRecord] = []
    for seg in segments(records):
        t = [r for r in seg if isinstance(r, TrainRecord)]
        train += t
        steady += t[WARMUP_STEPS:] or t
    if not steady:
        return peak or Measured(steps_timed=0)
    if peak is None:
        upd = dict(
            peak_memory_allocated_gib=max(r.mem_alloc_gib for r in train),
            peak_memory_reserved_gib=max(r.mem_reserved_gib for r in train),
            memory_kind=train[-1].memory_kind,
        )
    else:
        upd = peak.model_dump(
            include={"peak_memory_allocated_gib", "peak_memory_reserved_gib", "memory_kind"}
        )
    return Measured(
        steps_timed=len(steady),
        step_time_s=statistics.median(r.step_time_s for r in steady),
        tokens_per_s_per_gpu=statistics.median(r.tok_s_gpu for r in steady),
        mfu=statistics.median(r.mfu for r in steady),
        **upd,
    )


def segments(records: list[Any]) -> list[list[Any]]:
    """The records of each launch: split at `start` records, and (version 1 files, which have
    none) where a train record's step does not increase."""
    out: list[list[Any]] = [[]]
    last = None
    for r in records:
        new = isinstance(r, StartRecord) or (
            isinstance(r, TrainRecord) and last is not None and r.step <= last
        )
        if new and out[-1]:
            out.append([])
        if isinstance(r, StartRecord):
            last = None
        elif isinstance(r, TrainRecord):
            last = r.step
        out[-1].append(r)
    return [s for s in out if s]
