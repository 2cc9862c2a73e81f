"""Step-time model of FSDP2 training: compute at a calibrated fraction of peak, FSDP collectives
over NVLink (inside a node) or EFA (across nodes) overlapped with compute, HSDP all-reduce, and
the optimizer step. Pure functions of a `memory.Shape` (the search converts the ModelSpec once);
seconds.
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner import lora
from blackwell_sm.planner.memory import root_params
from blackwell_sm.planner.shape import Shape
from blackwell_sm.spec import arch, long_context


def recompute_flops_per_token(model: Shape, seq_len: int, mode: str) -> tuple[float, float]:
    """(linear, attention) FLOPs per token redone in backward by activation checkpointing
    (`arch.recompute_flops_per_token`: full redoes every block's forward, selective-op the
    matmuls it does not keep, selective and none no matmul or attention)."""
    return arch.recompute_flops_per_token(model.spec, seq_len, mode)


def compute_time_per_token(
    model: Shape,
    instance: InstanceType,
    seq_len: int,
    precision: str,
    mode: str,
    compile: bool,
    packed: bool = False,
    constants: C.Constants | None = None,
) -> float:
    """Seconds of compute per token on one GPU (forward + backward + recompute).

    `packed` (fine-tuning rows with a block-diagonal mask): the attention kernel takes a dense
    mask and computes every score block, where the causal kernel skips the upper half."""
    base, recompute = compute_terms_per_token(
        model, instance, seq_len, precision, mode, compile, packed, constants
    )
    return base + recompute


def compute_terms_per_token(
    model: Shape,
    instance: InstanceType,
    seq_len: int,
    precision: str,
    mode: str,
    compile: bool,
    packed: bool = False,
    constants: C.Constants | None = None,
    loss_impl: str = "full-logits",
) -> tuple[float, float]:
    """(forward + backward, recompute) seconds of compute per token on one GPU. `constants`:
    the calibration to use (default: `calibration.constants_for` the instance's GPU). `packed`:
    the attention takes a dense mask (every score block computed; `dense_mask`). `loss_impl`
    chunked: the loss's backward recomputes each chunk's logits (8 head FLOPs per parameter,
    not 6)."""
    gpu = instance.gpu
    k = constants or C.constants_for(gpu.name)
    scale = k.compute_scale
    bf16_peak = gpu.peak_flops("bf16")
    lowp_peak = gpu.peak_flops(precision)
    eff_lin = k.matmul_efficiency[(precision, compile)] * scale
    eff_bf16 = k.matmul_efficiency[("bf16", compile)] * scale
    eff_attn = k.attention_efficiency * scale
    lin_params = model.n_layers * model.linear_params
    head_params = model.n_matmul_params - model.n_layers * model.params_per_layer
    rec_lin, rec_attn = recompute_flops_per_token(model, seq_len, mode)
    # LoRA (planner/lora.py): no weight gradient for frozen linears; the adapters' own FLOPs.
    lin_flops = lora.linear_flops_per_param(model.lora) * lin_params
    t_lin = (lin_flops + lora.adapter_flops_per_token(model)) / (lowp_peak * eff_lin)
    head_flops = 8.0 if loss_impl == "chunked" else 6.0
    if model.lora is not None and not model.lora.head_trainable:
        head_flops -= 2.0  # no gradient for the frozen head's weight
    t_head = head_flops * head_params / (bf16_peak * eff_bf16)  # the output head stays bf16
    frac = 1.0 if packed else C.ATTENTION_CAUSAL_FRACTION
    attn = 12.0 * model.n_layers * model.spec.q_dim * seq_len * frac
    t_attn = attn / (bf16_peak * eff_attn)
    a, b = C.ELEMENTWISE_BYTES[compile]
    t_elem = (
        model.n_layers
        * (a * model.d_model + b * model.ffn_dim)
        / (gpu.hbm_tb_s * 1e12 * k.hbm_efficiency)
    )
    t_rec = rec_lin / (lowp_peak * eff_lin) + rec_attn * frac / (bf16_peak * eff_attn)
    if mode == "full":
        t_rec += 0.25 * t_elem  # the forward's elementwise ops run again
    if mode == "selective":
        t_rec += C.SELECTIVE_RECOMPUTE_TIME * (t_lin + t_attn)
    return t_lin + t_head + t_attn + t_elem, t_rec


def link_bandwidth(
    instance: InstanceType, group_spans_nodes: bool, constants: C.Constants | None = None
) -> float:
    """Achieved per-GPU bus bandwidth (bytes/s) of a collective inside one node or across nodes."""
    k = constants or C.constants_for(instance.gpu.name)
    if group_spans_nodes:
        per_gpu = instance.inter_node_gbps / 8.0 / instance.gpus_per_instance * 1e9
        return per_gpu * k.efa_efficiency
    return instance.intra_node_gb_s * 1e9 * k.nvlink_efficiency


def dense_mask(
    packed: bool, cp_degree: int, micro_batch: int, seq_len: int, instance: InstanceType
) -> bool:
    """Whether the attention takes a dense mask (`long_context.mask_kind`): every score block is
    then computed, where the causal kernel and FlexAttention's block mask skip the upper half."""
    form = long_context.mask_kind(
        packed=packed,
        cp_degree=cp_degree,
        micro_batch=micro_batch,
        q_len=seq_len // cp_degree,
        kv_len=seq_len,
        device=instance.gpu.kind,
    )
    return form == "dense"


def context_parallel_comm_s(
    model: Shape,
    instance: InstanceType,
    micro_batch: int,
    seq_len: int,
    cp_degree: int,
    mode: str,
    constants: C.Constants | None = None,
) -> float:
    """Seconds per micro-batch of context parallelism's collectives (train/context_parallel.py):
    in every block the K and V all-gather (forward, and again when a checkpointing `mode`
    recomputes the block: the gather is not among the ops any mode keeps) and the reduce-scatter
    of their gradients; each GPU moves (cp - 1) / cp of the whole sequence's K/V (bf16). They
    sit on the attention's critical path: all exposed."""
    if cp_degree == 1:
        return 0.0
    kv = micro_batch * seq_len * 2 * model.kv_dim * 2 * (cp_degree - 1) / cp_degree
    bw = link_bandwidth(instance, cp_degree > instance.gpus_per_instance, constants)
    return model.n_layers * (2 if mode == "none" else 3) * kv / bw


def _trained(model: Shape) -> int:
    """Parameters with gradients and optimizer state: all, or with LoRA the adapters (and
    the modules trained in full)."""
    if model.lora is None:
        return model.n_params
    return model.lora.trainable(model.n_layers)


def optimizer_time(
    model: Shape, instance: InstanceType, shard_degree: int, constants: C.Constants | None = None
) -> float:
    """Seconds of the AdamW step and grad-norm on each GPU's shard (HBM-bound)."""
    k = constants or C.constants_for(instance.gpu.name)
    bytes_opt = _trained(model) / shard_degree * C.OPTIMIZER_BYTES_PER_PARAM
    return bytes_opt / (instance.gpu.hbm_tb_s * 1e12 * k.hbm_efficiency)


class Comm(NamedTuple):
    """One micro-batch's collectives on each GPU, seconds."""

    total: float  # FSDP all-gathers and reduce-scatter, HSDP all-reduce, before overlap
    first: float  # the part nothing hides: the first block's all-gather (root + block 0) and
    # the last reduce-scatter (root); included in `total`


def comm_per_micro_batch(
    model: Shape,
    instance: InstanceType,
    shard_degree: int,
    replicate_degree: int,
    precision: str,
    reshard_after_forward: bool,
    constants: C.Constants | None = None,
) -> Comm:
    """Per micro-batch FSDP traffic: all-gather forward (+ again in backward when resharding),
    reduce-scatter of fp32 grads (ring: each GPU moves (n-1)/n of the full buffer); with HSDP the
    all-reduce of each shard's fp32 grads across replicas (FSDP2's default: every micro-batch),
    over EFA when the group spans nodes."""
    k = constants or C.constants_for(instance.gpu.name)
    gpn, n, r = instance.gpus_per_instance, shard_degree, replicate_degree
    t_ag = t_rs = t_first = 0.0
    if n > 1:
        bw = link_bandwidth(instance, n > gpn, k)
        lin = model.n_layers * model.linear_params
        gather = lin * C.GATHER_BYTES[precision] + (model.n_params - lin) * 2
        if model.lora is not None:  # the adapters, gathered with their block
            gather += 2 * model.n_layers * model.lora.block_params
        frac = (n - 1) / n
        t_ag = (2 if reshard_after_forward else 1) * frac * gather / bw
        t_rs = frac * _trained(model) * 4 / bw  # gradients of trained parameters only
        root = root_params(model)
        root_grads = root if model.lora is None else model.lora.root_trainable
        t_first = frac * (root * 2 + model.params_per_layer * 2 + root_grads * 4) / bw
    t_ar = 0.0
    if r > 1:
        bw = link_bandwidth(instance, n * r > gpn, k)
        t_ar = 2 * (r - 1) / r * _trained(model) * 4 / n / bw
    return Comm(t_ag + t_rs + t_ar, t_first)


def exposed(comm: Comm, compute_s: float, overlap: float, cp_s: float = 0.0) -> float:
    """The communication of one micro-batch not hidden under its `compute_s`: the first gather
    and the last reduce-scatter, and what passes `overlap` of the compute (never more than all
    of it), and the context-parallel collectives `cp_s` (all exposed)."""
    return comm.first + max(0.0, comm.total - comm.first - overlap * compute_s) + cp_s


def micro_batch_compute_s(
    micro_batch: int, seq_len: int, cp_degree: int, per_token: tuple[float, float]
) -> float:
    """One micro-batch's compute on one GPU, recompute included: its seq_len / cp_degree tokens
    of each sequence at `per_token` (`compute_terms_per_token`: base and recompute seconds)."""
    return micro_batch * seq_len // cp_degree * (per_token[0] + per_token[1])


def step_seconds(
    compute_s: float,
    comm: Comm,
    overlap: float,
    grad_accum: int,
    optimizer_s: float,
    cp_s: float = 0.0,
) -> float:
    """One optimizer step: every micro-batch's compute and exposed communication, then the
    optimizer."""
    return grad_accum * (compute_s + exposed(comm, compute_s, overlap, cp_s)) + optimizer_s


class StepTime(NamedTuple):
    compute_s: float  # per step, all micro-batches, recompute included
    comm_s: float  # FSDP + HSDP collectives per step, before overlap
    exposed_comm_s: float  # the part not hidden under compute
    optimizer_s: float
    step_s: float
    recompute_s: float = 0.0  # the part of compute_s that activation checkpointing redoes


def step_time(
    model: Shape,
    instance: InstanceType,
    *,
    shard_degree: int,
    replicate_degree: int,
    micro_batch: int,
    grad_accum: int,
    seq_len: int,
    precision: str,
    mode: str,
    compile: bool,
    reshard_after_forward: bool,
    packed: bool = False,
    constants: C.Constants | None = None,
    cp_degree: int = 1,
    loss_impl: str = "full-logits",
    per_token: tuple[float, float] | None = None,
    comm: Comm | None = None,
) -> StepTime:
    """Predicted time of one optimizer step on every GPU (they run in lock-step). `cp_degree`:
    each GPU computes seq_len / cp_degree tokens of each sequence (attention over the whole
    sequence) and all-gathers K/V (`context_parallel_comm_s`). `per_token`, `comm`:
    `compute_terms_per_token` and `comm_per_micro_batch` of these arguments, when the caller
    has them already."""
    k = constants or C.constants_for(instance.gpu.name)
    tokens = micro_batch * seq_len // cp_degree
    dense = dense_mask(packed, cp_degree, micro_batch, seq_len, instance)
    per_token = per_token or compute_terms_per_token(
        model, instance, seq_len, precision, mode, compile, dense, k, loss_impl
    )
    rec = per_token[1]
    t_comp = micro_batch_compute_s(micro_batch, seq_len, cp_degree, per_token)
    comm = comm or comm_per_micro_batch(
        model, instance, shard_degree, replicate_degree, precision, reshard_after_forward, k
    )
    t_cp = context_parallel_comm_s(model, instance, micro_batch, seq_len, cp_degree, mode, k)
    exposed_mb = exposed(comm, t_comp, k.comm_overlap, t_cp)
    t_opt = optimizer_time(model, instance, shard_degree, k)
    step = step_seconds(t_comp, comm, k.comm_overlap, grad_accum, t_opt, t_cp)
    return StepTime(
        grad_accum * t_comp,
        grad_accum * (comm.total + t_cp),
        grad_accum * exposed_mb,
        t_opt,
        step,
        grad_accum * tokens * rec,
    )
