"""Step-time model of FSDP2 training: compute at a calibrated fraction of peak, FSDP collectives
over NVLink (inside a node) or EFA (across nodes) overlapped with compute, HSDP all-reduce, and
the optimizer step. Pure functions; seconds.
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.memory import Shape, block_linear_params, root_params, shape
from blackwell_sm.spec import ModelSpec, arch, long_context


def recompute_flops_per_token(
    model: ModelSpec | Shape, seq_len: int, mode: str
) -> tuple[float, float]:
    """(linear, attention) FLOPs per token redone in backward by activation checkpointing
    (`arch.recompute_flops_per_token`: full redoes every block's forward, selective-op the
    matmuls it does not keep, selective and none no matmul or attention)."""
    model = shape(model) if isinstance(model, ModelSpec) else model
    return arch.recompute_flops_per_token(model.spec, seq_len, mode)


def compute_time_per_token(
    model: ModelSpec | Shape,
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
    model: ModelSpec | Shape,
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
    the attention takes a dense mask (every score block computed). `loss_impl` chunked: the
    loss's backward recomputes each chunk's logits (8 head FLOPs per parameter, not 6)."""
    model = shape(model) if isinstance(model, ModelSpec) else model
    gpu = instance.gpu
    k = constants or C.constants_for(gpu.name)
    scale = k.compute_scale
    bf16_peak = gpu.peak_flops("bf16")
    lowp_peak = gpu.peak_flops(precision)
    eff_lin = k.matmul_efficiency[(precision, compile)] * scale
    eff_bf16 = k.matmul_efficiency[("bf16", compile)] * scale
    eff_attn = k.attention_efficiency * scale
    lin_params = model.n_layers * block_linear_params(model)
    head_params = model.n_matmul_params - model.n_layers * model.params_per_layer
    rec_lin, rec_attn = recompute_flops_per_token(model, seq_len, mode)
    t_lin = 6.0 * lin_params / (lowp_peak * eff_lin)
    head_flops = 8.0 if loss_impl == "chunked" else 6.0
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


def context_parallel_comm_s(
    model: ModelSpec | Shape,
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
    of their gradients; each GPU moves (cp - 1) / cp of the whole sequence's K/V (bf16)."""
    if cp_degree == 1:
        return 0.0
    model = shape(model) if isinstance(model, ModelSpec) else model
    kv = micro_batch * seq_len * 2 * model.kv_dim * 2 * (cp_degree - 1) / cp_degree
    bw = link_bandwidth(instance, cp_degree > instance.gpus_per_instance, constants)
    return model.n_layers * (2 if mode == "none" else 3) * kv / bw


class StepTime(NamedTuple):
    compute_s: float  # per step, all micro-batches, recompute included
    comm_s: float  # FSDP + HSDP collectives per step, before overlap
    exposed_comm_s: float  # the part not hidden under compute
    optimizer_s: float
    step_s: float
    recompute_s: float = 0.0  # the part of compute_s that activation checkpointing redoes


def step_time(
    model: ModelSpec | Shape,
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
) -> StepTime:
    """Predicted time of one optimizer step on every GPU (they run in lock-step). `cp_degree`:
    each GPU computes seq_len / cp_degree tokens of each sequence (attention over the whole
    sequence) and all-gathers K/V (`context_parallel_comm_s`, exposed)."""
    model = shape(model) if isinstance(model, ModelSpec) else model
    k = constants or C.constants_for(instance.gpu.name)
    tokens = micro_batch * seq_len // cp_degree
    form = long_context.mask_kind(
        packed=packed, cp_degree=cp_degree, micro_batch=micro_batch,
        q_len=seq_len // cp_degree, kv_len=seq_len, device=instance.gpu.kind,
    )  # fmt: skip
    base, rec = compute_terms_per_token(
        model, instance, seq_len, precision, mode, compile, form == "dense", k, loss_impl
    )
    t_comp = tokens * (base + rec)
    t_cp = context_parallel_comm_s(model, instance, micro_batch, seq_len, cp_degree, mode, k)
    gpn = instance.gpus_per_instance
    n = shard_degree
    # Per micro-batch FSDP traffic: all-gather forward (+ again in backward when resharding),
    # reduce-scatter of fp32 grads. Ring: each GPU moves (n-1)/n of the full buffer.
    t_ag = t_rs = t_first = 0.0
    if n > 1:
        bw = link_bandwidth(instance, n > gpn, k)
        lin = model.n_layers * block_linear_params(model)
        other = model.n_params - lin
        gather = lin * C.GATHER_BYTES[precision] + other * 2
        frac = (n - 1) / n
        n_ag = 2 if reshard_after_forward else 1
        t_ag = n_ag * frac * gather / bw
        t_rs = frac * model.n_params * 4 / bw
        # Exposed regardless of overlap (part of the traffic above, not added to it): the first
        # block's all-gather (root + block 0) and the last reduce-scatter (root).
        t_first = frac * (root_params(model) * 2 + model.params_per_layer * 2) / bw
        t_first += frac * root_params(model) * 4 / bw
    t_ar = 0.0
    r = replicate_degree
    if r > 1:
        # HSDP: all-reduce of each shard's fp32 grads across replicas, every micro-batch (FSDP2's
        # default), over EFA when the replica group spans nodes.
        bw = link_bandwidth(instance, n * r > gpn, k)
        t_ar = 2 * (r - 1) / r * model.n_params * 4 / n / bw
    comm_mb = t_ag + t_rs + t_ar
    # The first gather and the last reduce-scatter have nothing to hide under; the rest hides
    # under compute up to COMM_OVERLAP of it. Never more than all the communication. The CP
    # gathers sit on the attention's critical path: all exposed.
    exposed_mb = t_first + max(0.0, comm_mb - t_first - k.comm_overlap * t_comp) + t_cp
    comm_mb += t_cp
    bytes_opt = model.n_params / n * C.OPTIMIZER_BYTES_PER_PARAM
    t_opt = bytes_opt / (instance.gpu.hbm_tb_s * 1e12 * k.hbm_efficiency)
    step = grad_accum * (t_comp + exposed_mb) + t_opt
    return StepTime(
        grad_accum * t_comp,
        grad_accum * comm_mb,
        grad_accum * exposed_mb,
        t_opt,
        step,
        grad_accum * tokens * rec,
    )
