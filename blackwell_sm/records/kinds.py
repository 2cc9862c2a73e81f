"""The records of metrics.jsonl, one class per `kind`, and the figure types they share."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict

#: metrics.jsonl's format, written in each launch's `start` record. 1: before `start` records
#: (a skipped step's figures written as the strings "nan"/"inf"; alerts without `time`).
RECORDS_VERSION = 2

Num = Annotated[float, Strict(), Field(allow_inf_nan=False)]
NonNeg = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=0)]
Positive = Annotated[float, Strict(), Field(allow_inf_nan=False, gt=0)]
AnyFloat = Annotated[float, Strict()]  # may be NaN or infinite: what the NaN guard saw
Count = Annotated[int, Strict(), Field(ge=0)]
UnixTime = Annotated[float, Strict(), Field(allow_inf_nan=False, ge=0)]
MemoryKind = Literal["cuda_max_allocated_reserved", "cpu_max_rss"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class _Record(_Model):
    kind: str
    step: Count = Field(description="The optimizer steps done (1-based: the step just taken).")


class StartRecord(_Record):
    """A launch of the loop began (fresh, or resumed from a checkpoint): a segment of the run."""

    kind: Literal["start"] = "start"
    version: Annotated[int, Strict(), Field(ge=1)] = RECORDS_VERSION
    resumed_from_step: Count | None = Field(None, description="None: a fresh start.")
    checkpoint: str | None = Field(None, description="The checkpoint resumed from (its name).")
    world_size: Annotated[int, Strict(), Field(ge=1)]
    time: UnixTime


class TrainRecord(_Record):
    """A logged optimizer step: the `[bsm-step]` line's figures."""

    kind: Literal["train"] = "train"
    loss: Num
    lr: NonNeg
    grad_norm: NonNeg
    tok_s_gpu: Positive
    mfu: NonNeg
    step_time_s: Positive = Field(description="Mean wall time per step since the last logged one.")
    mem_alloc_gib: NonNeg
    mem_reserved_gib: NonNeg
    memory_kind: MemoryKind | None = Field(
        None, description="What the memory figures are; None only in a record read from a log line."
    )
    time: UnixTime | None = Field(None, description="Unix seconds (the log event's, from logs).")
    eta_s: NonNeg | None = Field(None, description="Seconds to the end; from the check on.")


class ValRecord(_Record):
    kind: Literal["val"] = "val"
    loss: Num
    time: UnixTime | None = None


class BadStepRecord(_Record):
    """A step the NaN guard skipped (train/guard.py): its non-finite loss or gradient norm."""

    kind: Literal["bad_step"] = "bad_step"
    loss: AnyFloat
    grad_norm: AnyFloat
    in_row: Annotated[int, Strict(), Field(ge=1)]
    time: UnixTime


Verdict = Literal["below_range", "in_range", "above_range"]


class CheckFigures(_Model):
    """The in-job check's figures (train/check.py; docs/training-loop.md has each one)."""

    tok_s_gpu: NonNeg
    pred_tok_s_gpu: NonNeg
    pred_tok_s_gpu_low: NonNeg
    pred_tok_s_gpu_high: NonNeg
    speed_ratio: NonNeg
    speed: Verdict
    step_time_s: Positive
    pred_step_time_s: NonNeg
    compute_s: NonNeg
    pred_compute_s: NonNeg
    exposed_comm_s: NonNeg
    pred_exposed_comm_s: NonNeg
    other_s: NonNeg
    mfu: NonNeg
    pred_mfu: NonNeg
    mem_reserved_gib: NonNeg
    pred_mem_gib: NonNeg
    pred_mem_high_gib: NonNeg
    memory: Literal["in_range", "above_range"]
    eta_s: NonNeg
    total_steps: Count
    timing: Literal["cuda_profiler", "cpu_profiler", "wall_clock"]
    slowest_rank_step_time_s: Positive | None = None


class CheckRecord(CheckFigures):
    kind: Literal["check"] = "check"
    step: Count


class AlertRecord(_Record):
    """The run will not end before its deadline (`overrun`), or memory is above the plan's range."""

    kind: Literal["alert"] = "alert"
    alert: Literal["overrun", "memory"]
    overrun_s: Num | None = None
    mem_over_gib: Num | None = None
    message: str
    time: UnixTime | None = Field(None, description="Absent in version 1 files.")

    @property
    def figure(self) -> tuple[str, float]:
        key = "overrun_s" if self.alert == "overrun" else "mem_over_gib"
        value = getattr(self, key)
        if value is None:
            raise ValueError(f"a {self.alert} alert without {key}")
        return key, value


class SaveRecord(_Record):
    """A checkpoint written at `step` (with async saves: its write started)."""

    kind: Literal["save"] = "save"
    checkpoint: str = Field(description="The checkpoint directory's name.")
    time: UnixTime


class StopRecord(_Record):
    """The loop stopped before its last step (a signal, the deadline), after saving."""

    kind: Literal["stop"] = "stop"
    reason: str
    time: UnixTime


Record = (
    StartRecord
    | TrainRecord
    | ValRecord
    | BadStepRecord
    | CheckRecord
    | AlertRecord
    | SaveRecord
    | StopRecord
)
KINDS: dict[str, type[BaseModel]] = {
    c.model_fields["kind"].default: c
    for c in (
        StartRecord,
        TrainRecord,
        ValRecord,
        BadStepRecord,
        CheckRecord,
        AlertRecord,
        SaveRecord,
        StopRecord,
    )
}
