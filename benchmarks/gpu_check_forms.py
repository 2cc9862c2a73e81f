"""The GPU form of the trace, checked on the GPU machine (gpu_check's `gpu-form-trace` run).

The plans users get on one ml.p6-b200.48xlarge (8 ranks) are traced in the GPU form twice: on
the cuda device (fake tensors on the GPU's own torch: nothing is allocated) and on the CPU
device (the stand-in kernels of `blackwell_sm/train/gpu_kernels.py`, what `bsm plan --trace`
runs on a laptop). Both are held to the planner's own (cuda) form, and to each other: the
instrument is checked where the real kernels exist. The CP/FlexAttention plan is llama-3.2-1b at
131,072 tokens (context parallelism, FlexAttention's block mask); the offload plan llama-3.1-8b
at 8,192 with its state in host memory (FSDP2's CPUOffloadPolicy: the trace reports it as host
bytes). Under --cpu-dry the tiny model with cp 2 and with offload, CPU only.
"""

from __future__ import annotations

import time
from typing import Any

#: (name, model, seq_len, overrides): the plans traced on the GPU machine.
GPU_PLANS = (
    ("1b-128k-cp-flex", "llama-3.2-1b", 131072, {}),
    ("8b-8k-offload", "llama-3.1-8b", 8192, {"training.pins.offload": True}),
)
DRY_PLANS = (
    ("tiny-cp2", "tiny", 512, {"cp_degree": 2, "training.global_batch_seqs": 16}),
    (
        "tiny-offload",
        "tiny",
        256,
        {"training.pins.offload": True, "training.global_batch_seqs": 16},
    ),
)
#: Goal: the trace within this of the planner's own form, each device form within it of the other.
GOAL = 0.05


def _one(p, device: str) -> dict[str, Any]:
    from blackwell_sm.planner.trace_check import compare
    from blackwell_sm.train.trace import trace_plan

    t0 = time.perf_counter()
    try:
        r = trace_plan(p, warmup=False, device=device, form="gpu")
    except Exception as e:  # the instrument under test: say why, go on
        return {"device": device, "failed": f"{type(e).__name__}: {e}"}
    c = compare(p, r.model_dump())
    return {
        "device": device,
        "traced_gib": c.traced_gib,
        "host_bytes": r.host_bytes,
        "predicted_gib": c.predicted_gib,
        "error": c.error,
        "plan_tracked_gib": c.plan_tracked_gib,
        "plan_error": c.plan_error,
        "peak_at": c.peak_at,
        "wall_s": round(time.perf_counter() - t0, 1),
    }


def forms(*, dry: bool) -> dict[str, Any]:
    """Per plan: its config and its GPU-form traces (cpu device; cuda too on a GPU)."""
    from blackwell_sm.api.plan import plan

    rows: dict[str, Any] = {}
    for name, model, seq, over in DRY_PLANS if dry else GPU_PLANS:
        p = plan(model, seq_len=seq, allow_infeasible=True, **over)
        devices = ("cpu",) if dry else ("cuda", "cpu")
        traces = [_one(p, d) for d in devices]
        ok = all(abs(t.get("error", 1.0)) <= GOAL for t in traces)
        if len(traces) == 2 and ok:
            a, b = (t["traced_gib"] for t in traces)
            ok = abs(a - b) <= GOAL * b
        rows[name] = {"config": p.config.model_dump(), "traces": traces, "ok": ok}
    return rows


def forms_row(rd: Any, *, dry: bool, common: dict[str, Any], emit) -> dict:
    """The `gpu-form-trace` run's JSON row."""
    t0 = time.perf_counter()
    rows = forms(dry=dry)
    ok = all(r.get("ok", True) for r in rows.values())
    worst = max(
        (abs(t["error"]) for r in rows.values() for t in r.get("traces", []) if "error" in t),
        default=None,
    )
    return emit(
        "gpu_check.run",
        worst,
        "max |trace error| against the planner's GPU form",
        ok=None if dry else ok,
        plans=rows,
        goal=f"each trace within {GOAL:.0%} of the plan's GPU form; cuda and cpu traces alike",
        wall_s=round(time.perf_counter() - t0, 1),
        **common,
    )
