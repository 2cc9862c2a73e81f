"""The GPU check's runs: what each one is, its spec, and its plan for the GPU at hand.

Every run is planned by the real planner for this machine's one GPU; `--cpu-dry` swaps in the
tiny model and short sequences, so the same path runs on CPU in the tests.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

GPU_MODEL, GPU_SEQ, GPU_GLOBAL_SEQS = "llama-3.2-1b", 4096, 8
DRY_MODEL, DRY_SEQ, DRY_GLOBAL_SEQS = "tiny", 64, 4
#: The long-sequence run tries these, longest first, and takes the first the chunked loss fits
#: on this GPU (the row says whether the full-logits loss would have fitted it too).
LONG_SEQS, DRY_LONG_SEQS = (131072, 65536, 32768, 16384), (1024, 512)
#: cp-numerics: the sequence of its attention check (16 K: FlexAttention's block mask on CUDA).
CP_SEQ, DRY_CP_SEQ = 16384, 512


@dataclass(frozen=True)
class RunDef:
    """One configuration of the check; `gpu` values, swapped for tiny ones under --cpu-dry."""

    name: str
    model: str = GPU_MODEL
    precision: str = "bf16"
    ac: str = "none"
    global_seqs: int = GPU_GLOBAL_SEQS
    loss_impl: str = "chunked"
    long_seq: bool = False  # the longest of LONG_SEQS the chunked loss fits
    steps: int | None = None  # overrides --steps (long runs: fewer, slower steps)
    ckpt: bool = False  # checkpoint, SIGTERM after the first save, resume, export
    fill_memory: bool = False  # the feasible micro-batch that uses the most memory
    mfu_goal: bool = True
    compare_loss_with: str | None = None  # a run of the same data whose losses this one matches
    kind: str = "launch"  # "launch": the real launcher; "cp": the in-process CP numerics;
    # "trace": the GPU-form traces of users' plans (gpu_check_forms.py)
    pins: dict[str, Any] = field(default_factory=dict)


def runs() -> list[RunDef]:
    """The runs in priority order (a --budget-s cut drops the last): every AC mode the spec
    knows, fp8, the loss paths, the long sequence, near-limit, CP numerics, checkpointing."""
    from typing import get_args

    from blackwell_sm.spec.training import Checkpointing

    out = [RunDef(f"bf16-ac-{mode}", ac=mode) for mode in get_args(Checkpointing)]
    out.append(RunDef("fp8", precision="fp8"))
    out.append(
        RunDef(
            "loss-full-logits",
            loss_impl="full-logits",
            mfu_goal=False,
            compare_loss_with="bf16-ac-none",
        )
    )
    # Eager (compile pinned off) where memory is the point: the fake-tensor trace runs eager, so
    # these runs' allocated peaks are held to it (gpu_check_trace.py).
    eager = {"compile": False}
    out.append(
        RunDef(
            "long-seq",
            ac="full",
            global_seqs=1,
            long_seq=True,
            steps=8,
            mfu_goal=False,
            pins=eager,
        )
    )
    out.append(
        RunDef(
            "near-limit",
            model="llama-3.2-3b",
            ac="none",
            global_seqs=32,
            mfu_goal=False,
            fill_memory=True,
            pins=eager,
        )
    )
    out.append(RunDef("cp-numerics", kind="cp", mfu_goal=False))
    # The plans users get on a p6-b200 node traced in the GPU form (fake tensors: no launch).
    out.append(RunDef("gpu-form-trace", kind="trace", mfu_goal=False))
    out.append(RunDef("ckpt-resume-export", ckpt=True, mfu_goal=False, pins=eager))
    return out


def make_spec(rd: RunDef, *, dry: bool, steps: int, seq: int | None = None):
    """The RunSpec for one run: precision, AC and loss as the run says, synthetic data."""
    from blackwell_sm.spec import parse_spec

    model, default_seq, seqs = (
        (DRY_MODEL, DRY_SEQ, DRY_GLOBAL_SEQS) if dry else (rd.model, GPU_SEQ, rd.global_seqs)
    )
    if rd.long_seq:
        seqs = 1
    total = 2 * steps if rd.ckpt else steps
    ckpt = (
        {"interval_steps": steps, "interval_minutes": None, "async_save": True, "keep_last": 2}
        if rd.ckpt
        else {"interval_steps": None, "interval_minutes": None, "async_save": False}
    )
    return parse_spec(
        {
            "model": model,
            "training": {
                "seq_len": seq or default_seq,
                "global_batch_seqs": seqs,
                "total_steps": total,
                "precision": rd.precision,
                "activation_checkpointing": rd.ac,
                "loss_impl": rd.loss_impl,
                "schedule": {"warmup_steps": min(10, steps - 1)},
                "checkpoint": ckpt,
                "data": {"source": "synthetic"},
                "export_model": rd.ckpt,
                "log_interval_steps": 1,
                "pins": {"compile": not dry, **rd.pins},
            },
        }
    )


def long_seq_plan(rd: RunDef, instance, *, dry: bool, steps: int) -> tuple[Any, dict[str, Any]]:
    """The longest sequence the chunked loss fits on this GPU, and what full logits would do."""
    from blackwell_sm.planner.api import make_plan

    tried: list[int] = []
    for seq in DRY_LONG_SEQS if dry else LONG_SEQS:
        plan = make_plan(make_spec(rd, dry=dry, steps=steps, seq=seq), instance=instance)
        tried.append(seq)
        if plan.feasible:
            full = make_plan(
                make_spec(replace(rd, loss_impl="full-logits"), dry=dry, steps=steps, seq=seq),
                instance=instance,
            )
            return plan, {
                "seq_tried": tried,
                "full_logits_feasible": full.feasible,
                "full_logits_predicted_gib": round(full.memory_gib.total, 3),
            }
    return plan, {"seq_tried": tried}


def plan_run(rd: RunDef, instance, *, dry: bool, steps: int) -> tuple[Any, dict[str, Any]]:
    """The run's plan and any facts of its choice. A `fill_memory` run tests the memory
    prediction where it matters: the planner's own choice leaves headroom on purpose, so this
    takes the feasible micro-batch (a power of two) that comes closest to the usable limit."""
    from blackwell_sm.errors import BsmError
    from blackwell_sm.planner.api import make_plan

    if rd.long_seq:
        return long_seq_plan(rd, instance, dry=dry, steps=steps)
    spec = make_spec(rd, dry=dry, steps=steps)
    plan = make_plan(spec, instance=instance)
    if not rd.fill_memory:
        return plan, {}
    best = plan
    mb = 1
    while mb <= spec.training.global_batch_seqs:
        pinned = make_spec(
            replace(rd, pins={**rd.pins, "micro_batch_size": mb}), dry=dry, steps=steps
        )
        try:
            p = make_plan(pinned, instance=instance)
        except (BsmError, ValueError):  # a pin the batch cannot take: try the next
            p = None
        if p is not None and p.feasible and p.memory_gib.total > best.memory_gib.total:
            best = p
        mb *= 2
    return best, {}
