"""The plan's notes: every warning, reason and advice the planner writes is a `Note` with a
stable `code` (the table below) and a text for people. Code that reacts to a note tests its code,
never its words. Part of the Plan's schema (the container reads it), so pydantic only.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

NoteKind = Literal["warning", "reason", "advice"]

#: Every note code the planner writes, and what it means (docs/planner.md lists them). Code that
#: reacts to a note tests its code; the text is for people and may be reworded at any time.
NOTE_CODES: dict[str, str] = {
    # warnings
    "profile_no_entry": "the calibration profile has no entry for this GPU: defaults used",
    "profile_mode_uncalibrated": "the profile did not fit the matmul efficiency this plan runs at",
    "default_tokens": "no total_tokens or total_steps: 20 tokens per parameter assumed",
    "price_source": "where the price per instance-hour comes from",
    "local_count_ignored": "a local run is one machine: compute.instance_count is ignored",
    "precision_partial": "a pinned low precision leaves some linears in bf16",
    "batch_rounded": "the global batch was rounded to split evenly over the GPUs",
    "memory_high": "predicted memory is above 90% of the device",
    "comm_bound": "exposed communication is a large share of the step",
    "no_fit": "no configuration fits in memory",
    "no_count_meets_deadline": "no instance count meets the deadline: the fastest is shown",
    "no_count_fits": "no instance count up to the search's limit fits in memory",
    "over_max_runtime": "the run is longer than one SageMaker job (28 days)",
    "jobs_at_slow_end": "at the slow end of the range the run needs several SageMaker jobs",
    "over_deadline": "the prediction exceeds compute.deadline_hours",
    "misses_deadline": "the chosen count misses the deadline (with what would meet it)",
    "over_published": "the speed is above the best published figure for this GPU and model",
    "cost_confirm": "the pessimistic cost is above compute.confirm_cost_usd",
    "quota_instances_per_job": "more instances than SageMaker's default per-job quota",
    "scale_beyond_search": "more instances than the planner's search and tests cover",
    # reasons
    "objective": "which objective chose the plan, and what the other would pick",
    "count_auto": "why instance_count auto chose this count",
    "layout": "shard and replicate degrees",
    "batch": "micro-batch and gradient accumulation",
    "checkpointing": "the activation-checkpointing mode",
    "reshard": "reshard_after_forward",
    "compile": "torch.compile",
    "precision": "the precision (pinned, or the only one considered)",
    "precision_chosen": "precision auto chose a low precision, and why",
    "precision_kept_bf16": "precision auto kept bf16, and why",
    "precision_skipped": "a low precision not considered (unsupported, ineligible, no fit)",
    "cp_degree": "the context-parallel degree: pinned, needed to fit, or faster",
    "offload": "why the state is or is not in host memory",
    "tie_free_memory": "among equally fast layouts, the one with more free memory",
    "pinned_config": "a pinned configuration, not searched",
    # advice
    "fit_instances": "more instances would fit",
    "fit_none_with_pins": "no instance count fits with these pins",
    "fit_full_checkpointing": "full activation checkpointing would fit",
    "fit_seq_len": "a shorter seq_len would fit",
    "fit_cp_degree": "context parallelism (training.pins.cp_degree) would fit",
    "fit_precision": "a low precision would fit",
    "fit_micro_batch": "micro_batch_size 1 would fit",
    "fit_offload": "the state in host memory would fit, at a cost in time",
    "fit_fewer_micro_batches": "one micro-batch per step would fit, with smaller batches",
    "fit_combine": "no single change fits",
    "near_miss": "a faster layout misses the memory limit narrowly",
    "deadline_instances": "the instance count that meets the deadline",
    "deadline_tokens": "the token count that meets the deadline",
    "deadline_seq_len": "a shorter seq_len that meets the deadline",
    # a version-1 plan read back: its sentences had no codes
    "v1": "a note of a schema_version 1 plan (no code was recorded)",
}


class Note(BaseModel):
    """One thing the plan says: a warning, a reason for a choice, or advice. React to `code`."""

    model_config = ConfigDict(extra="forbid")

    kind: NoteKind = Field(description="warning, reason or advice.")
    code: str = Field(description="Stable identifier (plan.NOTE_CODES); the text may change.")
    text: str = Field(description="The note in words, for people.")

    @field_validator("code")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in NOTE_CODES:
            raise ValueError(f"unknown note code {v!r}; known: {', '.join(NOTE_CODES)}")
        return v


def warning(code: str, text: str) -> Note:
    return Note(kind="warning", code=code, text=text)


def reason(code: str, text: str) -> Note:
    return Note(kind="reason", code=code, text=text)


def advice(code: str, text: str) -> Note:
    return Note(kind="advice", code=code, text=text)
