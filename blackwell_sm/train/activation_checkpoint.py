"""Activation checkpointing per block: `none`, `selective` (op-level) or `full`.

`selective` saves the outputs of matmuls and of the attention kernel and recomputes everything
else in the block (norms, RoPE, SiLU, elementwise products) during backward; `full` saves only
each block's input and recomputes the whole block.
"""

from __future__ import annotations

from functools import partial

import torch
from torch import nn

_SAVE_OPS = {
    torch.ops.aten.mm.default,
    torch.ops.aten._scaled_mm.default,  # fp8 matmuls (torchao float8 / MX linears)
    torch.ops.aten._scaled_dot_product_flash_attention.default,
    torch.ops.aten._scaled_dot_product_efficient_attention.default,
    torch.ops.aten._scaled_dot_product_cudnn_attention.default,
    torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def _policy(ctx, op, *args, **kwargs):
    from torch.utils.checkpoint import CheckpointPolicy

    if op in _SAVE_OPS:
        return CheckpointPolicy.MUST_SAVE
    return CheckpointPolicy.PREFER_RECOMPUTE


def _selective_context():
    from torch.utils.checkpoint import create_selective_checkpoint_contexts

    return create_selective_checkpoint_contexts(_policy)


def apply_activation_checkpointing(model: nn.Module, mode: str) -> None:
    """Set the checkpointing mode on every block of `model` (a `Transformer`)."""
    if mode not in ("none", "selective", "full"):
        raise ValueError(f"activation_checkpointing must be none, selective or full, not {mode!r}")
    for block in model.layers:
        block.ac_mode = mode
        block.ac_context_fn = partial(_selective_context) if mode == "selective" else None
