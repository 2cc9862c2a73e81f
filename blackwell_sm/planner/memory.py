"""Per-GPU memory model of FSDP2 training, term by term (bytes unless a name says GiB).

Each function is pure and small so tests can hold it against a real run. The terms are those of
`MemoryBreakdown` in plan.py. Conventions: `b` sequences per micro-batch, `s` sequence length,
`h` d_model, `kv` the K (or V) width, `f` the SwiGLU inner size, `nh` query heads, `L` blocks.

Activation modes: "none", "selective" (every matmul and the attention kernel's outputs saved),
"selective-op" (torchtitan's per-op policy: every other matmul and the attention saved) and "full"
(block input only); what each keeps per token comes from `blackwell_sm.spec.arch`, the one
description of the block, and train/activation_checkpoint.py applies the same policies.
"""

from __future__ import annotations

from typing import NamedTuple

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner import lora
from blackwell_sm.planner.shape import Shape
from blackwell_sm.spec import arch, long_context

GIB = 1024**3

ActivationMode = str  # one of arch.AC_MODES: "none" | "selective" | "selective-op" | "full"


def block_linear_params(model: Shape) -> int:
    """Parameters of one block's linears (everything but its RMSNorm weights)."""
    return model.linear_params


def root_params(model: Shape) -> int:
    """Parameters outside the blocks (embedding, final norm, untied head): the FSDP root unit."""
    return model.n_params - model.n_layers * model.params_per_layer


def state_bytes(model: Shape, shard_degree: int) -> tuple[float, float, float]:
    """(fp32 master params, fp32 grads, AdamW exp_avg + exp_avg_sq) per GPU, sharded N ways
    (with LoRA: the frozen base in bf16, state for the trainable parameters only)."""
    if model.lora is not None:
        return lora.state_bytes(model, model.lora, shard_degree)
    p = model.n_params / shard_degree
    return p * C.MASTER_PARAM_BYTES, p * C.GRAD_BYTES, p * C.ADAM_STATE_BYTES


def gathered_param_bytes(model: Shape, precision: str, reshard_after_forward: bool) -> float:
    """bf16 (or fp8) unsharded parameters live in a block's backward. The root unit (embedding,
    norm, head) stays gathered for the whole step (train/parallelize.py: reshard_after_forward=False
    on the root); it is never low precision. Blocks: the running one plus FSDP2's one-block
    prefetch, or every block when kept gathered between forward and backward."""
    lin = block_linear_params(model)
    block = lin * C.GATHER_BYTES[precision] + (model.params_per_layer - lin) * 2
    block += model.lora.block_params * 2 if model.lora is not None else 0  # the adapters
    n_blocks = min(
        C.LIVE_GATHERED_BLOCKS if reshard_after_forward else model.n_layers, model.n_layers
    )
    return n_blocks * block + root_params(model) * 2


def head_grad_bytes(model: Shape) -> float:
    """The head's bf16 gradient (the embedding's, when tied): made in the loss's backward, alive
    through the whole backward (the root unit reduce-scatters it last); none when frozen."""
    if model.lora is not None and not model.lora.head_trainable:
        return 0.0
    return float(model.vocab_size * model.d_model * 2)


def grad_transient_bytes(model: Shape, block_saved: float = 0.0) -> float:
    """Unsharded gradients and reduce-scatter buffers at the peak of backward: the head's
    gradient, and a block's bf16 gradient with its fp32 reduce-scatter input and the previous
    block's reduce-scatter in flight, beyond the `block_saved` activations that block's
    backward has freed (the peak is then the next block's recompute; with more saved per block
    than its gradients, the last block's recompute, before any block gradient exists)."""
    trained = model.params_per_layer if model.lora is None else model.lora.block_params
    block = trained * C.BLOCK_GRAD_BYTES
    return head_grad_bytes(model) + max(0.0, block - block_saved)


norm_saved_bytes_per_elem = arch.norm_saved_bytes_per_elem


def activation_bytes_per_block(
    model: Shape,
    micro_batch: int,
    seq_len: int,
    mode: ActivationMode,
    dtype_bytes: int = 2,
    *,
    fused_norm: bool = True,
) -> float:
    """Bytes one block keeps for backward between its forward and its backward
    (`arch.block_saved_bytes_per_token` x tokens: the description says what each mode keeps)."""
    per_tok: float = arch.block_saved_bytes_per_token(model.spec, mode, dtype_bytes, fused_norm)
    if model.lora is not None:
        per_tok += lora.saved_bytes_per_token(model.lora, mode, dtype_bytes)
    return float(micro_batch * seq_len * per_tok)


def outside_block_activation_bytes(
    model: Shape,
    micro_batch: int,
    seq_len: int,
    dtype_bytes: int = 2,
    *,
    fused_norm: bool = True,
) -> float:
    """Saved outside the blocks: token ids (int64), the final norm's save and the head's input."""
    h = model.d_model
    per_tok = 8 + norm_saved_bytes_per_elem(fused_norm) * h + 4 + dtype_bytes * h
    return float(micro_batch * seq_len * per_tok)


def saved_activation_bytes(
    model: Shape,
    micro_batch: int,
    seq_len: int,
    mode: ActivationMode,
    dtype_bytes: int = 2,
    *,
    fused_norm: bool = True,
) -> float:
    """Everything kept for backward by the model's forward (all blocks + outside), no logits."""
    per_block = activation_bytes_per_block(
        model, micro_batch, seq_len, mode, dtype_bytes, fused_norm=fused_norm
    )
    outside = outside_block_activation_bytes(
        model, micro_batch, seq_len, dtype_bytes, fused_norm=fused_norm
    )
    return model.n_layers * per_block + outside


def activation_bytes(
    model: Shape,
    micro_batch: int,
    seq_len: int,
    mode: ActivationMode,
    *,
    dtype_bytes: int = 2,
    fused_norm: bool = True,
) -> float:
    """The `activations` term: saved activations at the peak plus backward's working set.

    Working set: the block being recomputed re-creates what mode "none" would have kept (only with
    checkpointing), and the gradients at backward's peak inside it: one of width f and one of h
    (traced: train/trace.py; the gradient flowing in and the MLP's widest one).
    """
    saved = saved_activation_bytes(
        model, micro_batch, seq_len, mode, dtype_bytes, fused_norm=fused_norm
    )
    tokens = micro_batch * seq_len
    work: float = tokens * dtype_bytes * (model.ffn_dim + model.d_model)
    if model.lora is not None:
        work += tokens * lora.backward_work_bytes_per_token(model.lora, dtype_bytes)
    if mode != "none":
        none = activation_bytes_per_block(
            model, micro_batch, seq_len, "none", dtype_bytes, fused_norm=fused_norm
        )
        own = activation_bytes_per_block(
            model, micro_batch, seq_len, mode, dtype_bytes, fused_norm=fused_norm
        )
        work += none - own
    return saved + work


def logits_and_loss_bytes(
    model: Shape,
    micro_batch: int,
    seq_len: int,
    *,
    compiled_loss: bool = False,
    loss_impl: str = "full-logits",
    kind: str = "cuda",
) -> float:
    """The loss at its peak for the `micro_batch x seq_len` tokens on this GPU. `chunked` (the
    loop's default, train/loss.py): one chunk of logits and the head input's gradient
    (`long_context.chunked_loss_bytes`). `full-logits`: b x s x V x bytes per logit (fewer when
    the loss is compiled, which fuses the fp32 upcast and log-softmax; rows of other stacks)."""
    tokens = micro_batch * seq_len
    if loss_impl == "chunked":
        return long_context.chunked_loss_bytes(model.vocab_size, model.d_model, tokens, kind=kind)
    per = C.LOSS_BYTES_PER_LOGIT_COMPILED if compiled_loss else C.LOSS_BYTES_PER_LOGIT
    return float(tokens * model.vocab_size * per)


def context_parallel_bytes(
    model: Shape, micro_batch: int, seq_len: int, cp_degree: int, mode: str
) -> float:
    """What context parallelism adds on one GPU (train/context_parallel.py): each attention holds
    the whole sequence's keys and values (b x s x 2 x kv x 2 bytes, all-gathered). Without
    checkpointing every block keeps its gathered K/V for backward (beyond the local share the
    activations count); with it only the block being recomputed holds them, with their
    gradients (before the reduce-scatter)."""
    if cp_degree == 1:
        return 0.0
    kv_bytes = micro_batch * seq_len * 2 * model.kv_dim * 2
    if mode == "none":
        return model.n_layers * kv_bytes * (cp_degree - 1) / cp_degree
    return 2.0 * kv_bytes


def attention_mask_bytes(
    model: Shape,
    micro_batch: int,
    seq_len: int,
    mode: str,
    *,
    packed: bool,
    cp_degree: int,
    kind: str,
) -> float:
    """The attention mask's bytes (train/attention.py, `long_context.mask_kind`): none for the
    causal kernel; a dense mask as `arch.document_mask_bytes` (queries: this rank's share of the
    sequence); FlexAttention's block mask, a few bytes per 128 x 128 block."""
    q_len = seq_len // cp_degree
    form = long_context.mask_kind(
        packed=packed,
        cp_degree=cp_degree,
        micro_batch=micro_batch,
        q_len=q_len,
        kv_len=seq_len,
        device=kind,
    )
    if form == "causal":
        return 0.0
    if form == "block":  # kv_num_blocks, kv_indices, and their full-block twins (int32)
        return float(micro_batch * 2 * 4 * (-(-q_len // 128)) * (1 + -(-seq_len // 128)))
    # Without packing the mask is the same for every row: (1, 1, q, kv), broadcast over the batch.
    rows = micro_batch if packed else 1
    return float(
        arch.document_mask_bytes(
            model.spec, micro_batch, seq_len, mode, q_len=q_len, mask_rows=rows
        )
    )


def fp8_extra_bytes(model: Shape, precision: str) -> float:
    """Low-precision extras: the fp8 copies of the live blocks' weights (and their transposes for
    backward) made by the fp8 / mxfp8 linears; scales and amax buffers are negligible."""
    if precision == "bf16":
        return 0.0
    # fp8 all-gather already delivers fp8 weights: only the transposed copy for backward is new.
    copies = 1 if precision == "fp8" else 2
    return float(C.LIVE_GATHERED_BLOCKS * block_linear_params(model) * copies)


def overhead_bytes(
    kind: str, dynamic_bytes: float, n_groups: int, fragmentation: float = C.FRAGMENTATION
) -> tuple[float, float]:
    """(runtime outside the caching allocator, allocator fragmentation) per GPU.

    Runtime: CUDA context + one NCCL communicator per process group (0 groups on one GPU), or the
    Python/torch runtime of a CPU worker. Fragmentation: a fraction of the dynamic memory.
    """
    if kind == "cpu":
        runtime = C.CPU_RUNTIME_GIB * GIB
    else:
        runtime = (C.CUDA_CONTEXT_GIB + C.NCCL_GIB_PER_GROUP * n_groups) * GIB
    return runtime, fragmentation * dynamic_bytes


class MemoryTerms(NamedTuple):
    """Per-GPU bytes by term (names as in MemoryBreakdown), each as alive at the peak, plus the
    allocator-visible part and which moment of the step the peak is (`PHASES`)."""

    params_fp32: float
    grads_fp32: float
    optimizer_states: float
    params_unsharded: float
    grads_unsharded: float
    activations: float
    logits_and_loss: float
    fp8_extras: float
    overhead: float
    runtime: float  # the part of `overhead` outside torch's caching allocator
    phase: str = "backward"

    @property
    def total(self) -> float:
        return (
            self.params_fp32
            + self.grads_fp32
            + self.optimizer_states
            + self.params_unsharded
            + self.grads_unsharded
            + self.activations
            + self.logits_and_loss
            + self.fp8_extras
            + self.overhead
        )

    @property
    def reserved(self) -> float:
        """What torch.cuda.max_memory_reserved would report: total minus runtime outside it."""
        return self.total - self.runtime


#: The moments of a step one of which is the peak (docs/planner.md "Tracing the real loop").
PHASES = ("loss", "backward", "backward end", "optimizer")


# long function: the three moments of the step, each term by term
def phase_terms(
    model: Shape,
    *,
    shard_degree: int,
    replicate_degree: int,
    micro_batch: int,
    seq_len: int,
    precision: str,
    mode: ActivationMode,
    reshard_after_forward: bool,
    kind: str = "cuda",
    compiled_loss: bool = False,
    packed: bool = False,
    fragmentation: float = C.FRAGMENTATION,
    cp_degree: int = 1,
    loss_impl: str = "full-logits",
    grad_accum: int = 1,
    offload: bool = False,
) -> dict[str, MemoryTerms]:
    """The terms at each of `PHASES` for one configuration on one GPU (`packed`: fine-tuning rows of
    packed samples, whose block-diagonal attention mask adds `attention_mask_bytes` to the
    activations; `fragmentation`: the allocator's, from a calibration profile when one applies;
    `cp_degree`: each GPU holds seq_len / cp_degree tokens of every sequence, plus
    `context_parallel_bytes`; `loss_impl`: the loss's term, `logits_and_loss_bytes`;
    `grad_accum`: with more than one, the earlier micro-batches' sharded gradients are alive).
    Each phase counts what is alive at it (traced: train/trace.py). `offload`: the sharded
    parameters, gradients and optimizer state live in host memory (planner/offload.py; on a
    CPU instance that is the device memory, so they stay counted)."""
    # Offloaded state is in host memory; on a CPU instance that is the device's own memory.
    moved = offload and kind != "cpu"
    params, grads, optim = (0.0, 0.0, 0.0) if moved else state_bytes(model, shard_degree)
    single = shard_degree * replicate_degree == 1
    # FSDP2 casts to bf16 per unit even on one rank (a no-op all-gather): same live copies.
    root, L = root_params(model) * 2, model.n_layers
    block = (gathered_param_bytes(model, precision, False) - root) / L
    fused = kind != "cpu"
    local = seq_len // cp_degree  # this GPU's tokens of each sequence
    acts = activation_bytes(model, micro_batch, local, mode, fused_norm=fused)
    saved = saved_activation_bytes(model, micro_batch, local, mode, fused_norm=fused)
    work = acts - saved  # the recomputed block's working set and backward's gradients
    cp = context_parallel_bytes(model, micro_batch, seq_len, cp_degree, mode)
    if mode == "none":  # every block keeps its gathered K/V
        saved += cp
    else:  # only the recomputed block holds them (with their gradients)
        work += cp
    mask = attention_mask_bytes(
        model, micro_batch, seq_len, mode, packed=packed, cp_degree=cp_degree, kind=kind
    )
    logits = logits_and_loss_bytes(
        model, micro_batch, local, compiled_loss=compiled_loss, loss_impl=loss_impl, kind=kind
    )
    lowp = fp8_extra_bytes(model, precision)
    # Gathered: the block FSDP prefetches for backward (loss), or it and the running one.
    n1, n2 = (1, C.LIVE_GATHERED_BLOCKS) if reshard_after_forward else (L, L)
    per_block = activation_bytes_per_block(model, micro_batch, local, mode, fused_norm=fused)
    out_b = outside_block_activation_bytes(model, micro_batch, local, fused_norm=fused)
    saved, first = saved + mask, out_b + per_block + mask  # the mask: one storage, to the end
    gt = grad_transient_bytes(model, per_block)
    acc = grads if grad_accum > 1 else 0.0  # earlier micro-batches' sharded gradients
    # Backward's end (the first block's recompute): every block's sharded gradient but the root's.
    root_trained = root_params(model) if model.lora is None else model.lora.root_trainable
    late = grads if grad_accum > 1 else grads - root_trained * C.GRAD_BYTES / shard_degree
    late = 0.0 if moved else late
    phases = {  # (sharded grads, gathered, unsharded grads, activations, loss)
        "loss": (acc, root + min(n1, L) * block, head_grad_bytes(model), saved, logits),
        "backward": (acc, root + min(n2, L) * block, gt, saved + work, 0.0),
        "backward end": (late, root + min(n2, L) * block, gt, first + work, 0.0),
    }
    n_groups = 0 if single else (1 if replicate_degree == 1 or shard_degree == 1 else 2)
    n_groups += 1 if cp_degree > 1 else 0
    out = {}
    for name, (sharded, gathered, grad_t, act, loss) in phases.items():
        runtime, frag = overhead_bytes(kind, act + loss + grad_t, n_groups, fragmentation)
        out[name] = MemoryTerms(
            params, sharded, optim, gathered, grad_t, act, loss, lowp, runtime + frag, runtime, name
        )
    runtime, _ = overhead_bytes(kind, 0.0, n_groups, fragmentation)
    # The optimizer step: every sharded gradient, nothing gathered, no activations.
    out["optimizer"] = MemoryTerms(
        params, grads, optim, 0.0, 0.0, 0.0, 0.0, 0.0, runtime, runtime, "optimizer"
    )
    return out


def memory_terms(model: Shape, **knobs) -> MemoryTerms:
    """The terms at the peak: the largest of `phase_terms` (same arguments); others are 0."""
    return max(phase_terms(model, **knobs).values(), key=lambda t: t.total)
