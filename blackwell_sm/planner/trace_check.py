"""The planner beside the traced loop (`blackwell_sm/train/trace.py`, `bsm plan --trace`).

The trace runs the plan's real step on fake CPU tensors, eager; so the prediction it is held to
is the planner's memory model in that form (`kind="cpu"`: unfused norms, dense attention masks,
the CPU loss policy; `compile=False`), term by term, without what the tracker cannot see (the
runtime outside the allocator and its fragmentation). Pure: it reads the trace as a mapping
(`TraceResult.model_dump()`), so the planner never imports torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.planner import memory
from blackwell_sm.planner.lora import with_peft
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.shape import shape
from blackwell_sm.spec import long_context

#: What each traced term is and why it may differ from the prediction.
WHY = {
    "params_fp32": "fp32 shards of every parameter (FSDP2 pads a dimension that does not "
    "divide by the shard degree; the planner does not)",
    "grads_fp32": "sharded fp32 gradients alive at the peak: none before the last micro-batch's "
    "backward reduce-scatters them, unless micro-batches accumulate",
    "optimizer_states": "AdamW's exp_avg and exp_avg_sq (fp32) per shard, read from "
    "optimizer.state after a real step (the tracker miscounts the step on fake tensors)",
    "params_unsharded": "gathered bf16 parameters: the root (embedding, norm, head) and the "
    "blocks being run or prefetched at the peak",
    "grads_unsharded": "unsharded gradients and reduce-scatter buffers alive at the peak "
    "(the tracker books a gradient as a temporary until FSDP's post-backward hook: predicted "
    "here under activations_and_loss)",
    "activations_and_loss": "saved activations, the loss's working set, backward's "
    "temporaries and the gradients it has made (the tracker books them together); predicted "
    "without the CPU loss's temporaries inside one operator, which the tracker cannot see",
    "buffers": "the RoPE table (fp32, 2 x seq x head_dim); the planner leaves it out",
}
TERMS = tuple(WHY)


class TraceRow(BaseModel):
    """One memory term, predicted (CPU, eager form) beside traced, GiB per rank."""

    model_config = ConfigDict(extra="forbid")

    term: str
    predicted_gib: float
    traced_gib: float
    why: str = Field(description="What the term is and what can make the two differ.")


class TraceCheck(BaseModel):
    """The plan's prediction beside its traced step (`bsm plan --trace`)."""

    model_config = ConfigDict(extra="forbid")

    predicted_gib: float = Field(description="The planner's peak per rank in the traced form.")
    traced_gib: float = Field(description="The traced peak per rank.")
    error: float = Field(description="(predicted - traced) / traced.")
    peak_at: str = Field(description="Where the traced peak was.")
    plan_total_gib: float = Field(description="The plan's own total (its device, its forms).")
    form: str = Field("cpu", description="The traced form: gpu (the GPU's kernels) or cpu.")
    plan_tracked_gib: float = Field(
        0.0,
        description="The plan's printed total less its runtime and fragmentation allowance "
        "(which the tracker cannot see).",
    )
    plan_error: float = Field(
        0.0, description="(plan_tracked - traced) / traced: the printed figure against the trace."
    )
    rows: list[TraceRow]
    notes: list[str] = Field(description="What the traced form leaves out, and why.")
    trace: dict[str, Any] = Field(description="The trace itself (train/trace.py TraceResult).")


class TracedPlan(BaseModel):
    """A plan and its traced step (`plan(..., trace=True)`, `bsm plan --trace -o json`)."""

    model_config = ConfigDict(extra="forbid")

    plan: Plan
    trace: TraceCheck


def predicted_terms(plan: Plan, precision: str = "bf16", form: str = "cpu") -> dict[str, float]:
    """The planner's terms in the traced form (bytes per rank), named as the trace's
    (`precision`: the one the trace ran; `form`: gpu, the plan's device kinds, or cpu)."""
    kind = "cuda" if form == "gpu" else "cpu"
    c, spec = plan.config, plan.spec
    phases = memory.phase_terms(
        with_peft(shape(spec.model), spec.training.peft),
        shard_degree=c.shard_degree,
        replicate_degree=c.replicate_degree,
        micro_batch=c.micro_batch_size,
        seq_len=c.seq_len,
        precision=precision,
        mode=c.activation_checkpointing,
        reshard_after_forward=c.reshard_after_forward,
        kind=kind,
        packed=spec.training.task == "finetune",
        cp_degree=c.cp_degree,
        loss_impl=spec.training.loss_impl,
        grad_accum=c.grad_accum_steps,
        offload=getattr(c, "offload", False),
    )
    # What the tracker cannot see: temporaries inside one operator (the CPU loss's; in the GPU
    # form, the loss kernel stand-in's per-chunk buffers), so the peak it sees may be another
    # phase than the allocator's.
    unseen = 0.0
    if spec.training.loss_impl == "chunked":
        unseen = _loss_unseen_bytes(plan, kind)
    seen = {
        k: v.total - v.overhead - (unseen if v.logits_and_loss else 0.0) for k, v in phases.items()
    }
    t = phases[max(seen, key=lambda k: seen[k])]
    if not t.logits_and_loss:
        unseen = 0.0
    return {
        "params_fp32": t.params_fp32,
        "grads_fp32": t.grads_fp32,
        "optimizer_states": t.optimizer_states,
        "params_unsharded": t.params_unsharded,
        # The tracker books gradients made inside backward as temporaries until FSDP's
        # post-backward hook takes them: the head's, at the peak, is one.
        "grads_unsharded": 0.0,
        "activations_and_loss": t.activations
        + t.logits_and_loss
        + t.fp8_extras
        + t.grads_unsharded
        - unseen,
        "buffers": 0.0,
    }


def _loss_unseen_bytes(plan: Plan, kind: str) -> float:
    """The chunked loss's bytes inside one operator: on CPU its bf16 weight-gradient
    temporaries; on CUDA (the GPU form's stand-in, train/gpu_kernels.py) all of
    `chunked_loss_bytes` but the input gradient it returns."""
    m, c = plan.spec.model, plan.config
    if kind != "cuda":
        return long_context.loss_kernel_temp_bytes(m.vocab_size, m.d_model, kind=kind)
    rows = c.micro_batch_size * c.seq_len // c.cp_degree
    whole = long_context.chunked_loss_bytes(m.vocab_size, m.d_model, rows, kind="cuda")
    return whole - rows * m.d_model * 2


def compare(plan: Plan, trace: Mapping[str, Any]) -> TraceCheck:
    """`plan`'s prediction beside `trace` (a TraceResult as a mapping), term by term."""
    form = str(trace.get("form", "cpu"))
    pred = predicted_terms(plan, str(trace.get("precision", "bf16")), form)
    traced = trace["terms"]
    rows = [
        TraceRow(
            term=k,
            predicted_gib=round(pred[k] / GIB, 3),
            traced_gib=round(traced.get(k, 0) / GIB, 3),
            why=WHY[k],
        )
        for k in TERMS
    ]
    p, t = sum(pred.values()), float(trace["peak_bytes"])
    mem = plan.memory_gib
    tracked = mem.total - mem.overhead
    notes = _notes(plan, form)
    return TraceCheck(
        predicted_gib=round(p / GIB, 3),
        traced_gib=round(t / GIB, 3),
        error=round((p - t) / t, 4) if t else 0.0,
        peak_at=str(trace.get("peak_at", "")),
        plan_total_gib=plan.memory_gib.total,
        form=form,
        plan_tracked_gib=round(tracked, 3),
        plan_error=round((tracked - t / GIB) / (t / GIB), 4) if t else 0.0,
        rows=rows,
        notes=notes,
        trace=dict(trace),
    )


def _notes(plan: Plan, form: str) -> list[str]:
    """What the traced form leaves out of the plan's printed figure, and why."""
    if form == "gpu":
        notes = [
            "traced in the GPU form on the CPU device, eager: the GPU's fused RMSNorm, its "
            "attention kernel under the GPU's mask rule (FlexAttention's block mask where the "
            "plan uses it) and the chunked loss under CUDA's policy, as stand-in ops that keep "
            "what the kernels keep (train/gpu_kernels.py); the prediction is the plan's own "
            "(cuda) form",
            "inside the loss kernel (its per-chunk logits) the tracker sees nothing: predicted "
            "here without them",
        ]
    else:
        notes = [
            "traced on the CPU device, eager: the prediction is the planner's CPU form (unfused "
            "norms, dense masks, the CPU loss policy), not the plan's own device form",
        ]
    notes += [
        "runtime and allocator fragmentation are outside what the tracker counts (left out of "
        "plan_tracked_gib too)",
        "the fake process group completes every collective at once: FSDP2's all-gather and "
        "reduce-scatter buffers are counted, but a reduce-scatter still in flight on a GPU "
        "while the next block's backward runs is never seen (the planner keeps one, "
        "BLOCK_GRAD_BYTES); NCCL's own buffers are in the runtime allowance",
    ]
    if plan.config.compile:
        notes.append(
            "the plan compiles each block; the trace runs eager (inductor on fake CPU tensors "
            "is not the GPU's compile): the planner credits compile with no memory saving, so "
            "the printed figure is this eager form (measured compiled runs sit 4-10 % below it)"
        )
    if plan.config.precision != "bf16":
        notes.append(
            f"the plan runs {plan.config.precision}; traced (and predicted here) in "
            "bf16: torchao's low-precision linears need a GPU, so plan_error includes the "
            "low-precision gathers and copies"
        )
    return notes
