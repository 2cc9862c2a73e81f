"""Apply a plan to a meta-device model: precision → activation checkpointing → compile → FSDP2.

The order matters and is the torchtitan order: low-precision linears are swapped in first (FSDP
must shard the swapped modules' weights), checkpointing wraps each block's forward, compile sees
the checkpointed block, and FSDP wraps the compiled blocks and then the root.
"""

from __future__ import annotations

import torch
from torch import nn

from blackwell_sm.planner.plan import Plan
from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing
from blackwell_sm.train.model import Transformer
from blackwell_sm.train.precision import convert_precision


def apply_plan(model: Transformer, plan: Plan, mesh) -> Transformer:
    """Make `model` (on the meta device) run exactly `plan.config` on `mesh`; returns it."""
    cfg = plan.config
    convert_precision(model, cfg.precision)
    apply_activation_checkpointing(model, cfg.activation_checkpointing)
    if cfg.compile:
        for block in model.layers:
            block.compile()  # in place: parameter names (and so checkpoints) stay the same
    apply_fsdp(model, mesh, reshard_after_forward=cfg.reshard_after_forward)
    return model


def apply_fsdp(model: Transformer, mesh, *, reshard_after_forward: bool) -> None:
    """fully_shard each block, then the root (embedding, final norm, head), bf16 compute."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    # On a 2-D mesh fully_shard replicates across dim 0 and shards across dim 1 (HSDP).
    for block in model.layers:
        fully_shard(block, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard_after_forward)
    # The root's parameters are needed again right at the start of backward: keep them gathered.
    fully_shard(model, mesh=mesh, mp_policy=mp, reshard_after_forward=False)


def materialize(model: nn.Module, device: torch.device, seed: int, *, init: bool = True) -> None:
    """Allocate the (sharded) parameters on `device` and initialise them in place (or leave them
    for a checkpoint or `training.init_from` to fill: `init=False`)."""
    model.to_empty(device=device)
    if init:
        model.init_weights(seed)
    else:
        model.init_rope()
