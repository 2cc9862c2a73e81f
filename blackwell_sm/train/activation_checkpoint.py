"""Activation checkpointing per block: `none`, `selective`, `selective-op` or `full`.

`selective` keeps the outputs of every matmul and of the attention kernel and recomputes the rest
of the block (norms, RoPE, SiLU, elementwise products) during backward. `selective-op` is
torchtitan's per-op policy: it counts the block's matmuls in forward order and keeps the 1st, 3rd,
5th, ... (q, v, gate, down; `arch.saved_matmuls`) and the attention, and also recomputes the other
matmuls (k, o, up). `full` keeps only each block's input and recomputes the whole block. What each
mode keeps is the planner's `arch.block_saved_bytes_per_token`, held to the real bytes by
tests/test_activation_memory.py. A LoRA adapter's matmuls are not counted: its rank-wide
lora_A output is kept and its lora_B output recomputed (`lora.adapter_policy`).
"""

from __future__ import annotations

import functools

import torch
from torch import nn

from blackwell_sm.spec import arch
from blackwell_sm.train.gpu_kernels import ATTENTION_OP
from blackwell_sm.train.lora import adapter_policy

_MATMUL_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten.addmm.default,  # a linear with a bias (Qwen2's q/k/v)
    torch.ops.aten._scaled_mm.default,  # fp8 matmuls (torchao float8 / MX linears)
}
_ATTENTION_OPS = {
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
    ATTENTION_OP,  # the GPU kernel's stand-in (the trace's GPU form)
}


def _policy_fn(every_other: bool, rank: int | None = None):
    """A fresh SAC policy (one per checkpointed call: the matmul counters start at zero);
    `rank`: the LoRA adapters' (their matmuls are told apart by shape)."""
    from torch.utils.checkpoint import CheckpointPolicy

    counts = {False: 0, True: 0}  # forward pass, recompute pass

    def policy(ctx, op, *args, **kwargs):
        if op in _ATTENTION_OPS:
            return CheckpointPolicy.MUST_SAVE
        if op in _MATMUL_OPS and rank is not None:  # LoRA (train/lora.py): not counted
            kept = adapter_policy(args, rank)
            if kept is not None:
                return kept
        if op in _MATMUL_OPS:
            counts[ctx.is_recompute] += 1
            if not every_other or counts[ctx.is_recompute] % 2 == 1:
                return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _context(every_other: bool, rank: int | None = None):
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_policy_fn(every_other, rank))


_EVERY_OTHER = {"selective": False, "selective-op": True}


def apply_activation_checkpointing(model: nn.Module, mode: str) -> None:
    """Set the checkpointing mode on every block of `model` (a `Transformer`)."""
    if mode not in arch.AC_MODES:
        raise ValueError(
            f"activation_checkpointing must be one of {', '.join(arch.AC_MODES)}, not {mode!r}"
        )
    lora = getattr(model, "lora", None)
    rank = None if lora is None else lora.rank
    context_fn = None
    if mode in _EVERY_OTHER:
        context_fn = functools.partial(_context, _EVERY_OTHER[mode], rank)
    for block in model.layers:
        block.ac_mode = mode
        block.ac_context_fn = context_fn
