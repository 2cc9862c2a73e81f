"""Shared figures for run records and metric lines (tests of records, logs, progress, reports)."""

from __future__ import annotations

from typing import Any

#: A `[bsm-step]` line's figures (train records add step, time and the rest).
STEP_FIGURES: dict[str, Any] = {
    **dict(loss=2.0, lr=1e-4, grad_norm=1.0, tok_s_gpu=9000.0, mfu=0.4, step_time_s=1.5),
    **dict(mem_alloc_gib=60.0, mem_reserved_gib=64.0),
}

#: A check record's fields as the loop fills them (tests build check lines and records from it).
CHECK_FIELDS: dict[str, Any] = {
    **dict(tok_s_gpu=9100.0, pred_tok_s_gpu=10000.0, speed_ratio=0.91, speed="in_range"),
    **dict(pred_tok_s_gpu_low=7000.0, pred_tok_s_gpu_high=11000.0, other_s=0.1, mfu=0.4),
    **dict(step_time_s=1.45, pred_step_time_s=1.3, compute_s=1.2, pred_compute_s=1.1),
    **dict(exposed_comm_s=0.15, pred_exposed_comm_s=0.1, pred_mfu=0.45, eta_s=9000.0),
    **dict(mem_reserved_gib=63.0, pred_mem_gib=64.0, pred_mem_high_gib=70.0, memory="in_range"),
    **dict(total_steps=2_000_000, timing="cuda_profiler"),
}


def step_figures(**change: Any) -> dict[str, Any]:
    """STEP_FIGURES with some changed (a value of None drops that figure)."""
    out = {**STEP_FIGURES, **change}
    return {k: v for k, v in out.items() if v is not None}
