"""Apply a plan to a meta-device model: loss and context parallelism → LoRA adapters (with
`training.peft`, train/lora.py) → precision → activation checkpointing → compile → FSDP2.

The order matters and is the torchtitan order: low-precision linears are swapped in first (FSDP
must shard the swapped modules' weights), checkpointing wraps each block's forward, compile sees
the checkpointed block, and FSDP wraps the compiled blocks and then the root. Context parallelism
(train/context_parallel.py) changes no module: the attention gathers K/V over its group, and its
ranks are part of FSDP's shard dimension.
"""

from __future__ import annotations

import os

import torch
from torch import nn

from blackwell_sm.opt_ml import ENV_TEST_FP32_COMPUTE
from blackwell_sm.planner.plan import Plan
from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing
from blackwell_sm.train.context_parallel import CpGroup
from blackwell_sm.train.model import Transformer
from blackwell_sm.train.precision import convert_precision


def apply_plan(model: Transformer, plan: Plan, mesh, cp: CpGroup | None = None) -> Transformer:
    """Make `model` (on the meta device) run exactly `plan.config` on `mesh` (FSDP) and `cp`
    (the context-parallel group when `config.cp_degree` > 1); returns it."""
    cfg = plan.config
    if (cp.degree if cp else 1) != cfg.cp_degree:
        raise ValueError(
            f"the plan has cp_degree {cfg.cp_degree}; got a group of {cp.degree if cp else 1}"
        )
    model.loss_impl = plan.spec.training.loss_impl
    model.set_context_parallel(cp)
    if plan.spec.training.peft is not None:  # before FSDP: it shards them with the base
        from blackwell_sm.train.lora import apply_lora

        apply_lora(model, plan.spec.training.peft)
    convert_precision(model, cfg.precision)
    apply_activation_checkpointing(model, cfg.activation_checkpointing)
    if cfg.compile:
        for block in model.layers:
            block.compile()  # in place: parameter names (and so checkpoints) stay the same
    fp32 = os.environ.get(ENV_TEST_FP32_COMPUTE) == "1"  # test-only (opt_ml.py)
    apply_fsdp(
        model,
        mesh,
        reshard_after_forward=cfg.reshard_after_forward,
        param_dtype=torch.float32 if fp32 else torch.bfloat16,
        offload=getattr(cfg, "offload", False),
    )
    return model


def apply_fsdp(
    model: Transformer,
    mesh,
    *,
    reshard_after_forward: bool,
    param_dtype: torch.dtype = torch.bfloat16,
    offload: bool = False,
) -> None:
    """fully_shard each block, then the root (embedding, final norm, head), bf16 compute
    (`param_dtype` float32: exact comparisons in tests). `offload`: the sharded parameters,
    gradients and optimizer state in host memory (FSDP2's CPUOffloadPolicy, pinned on CUDA;
    planner/offload.py): each all-gather copies its shard in, each reduce-scatter its out."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=param_dtype, reduce_dtype=torch.float32)
    kw: dict = {"mp_policy": mp}
    if offload:
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    # On a 2-D mesh fully_shard replicates across dim 0 and shards across dim 1 (HSDP).
    for block in model.layers:
        fully_shard(block, mesh=mesh, reshard_after_forward=reshard_after_forward, **kw)
    # The root's parameters are needed again right at the start of backward: keep them gathered.
    fully_shard(model, mesh=mesh, reshard_after_forward=False, **kw)
    model.state_offloaded = offload  # materialize() puts the state on the host


def materialize(model: nn.Module, device: torch.device, seed: int, *, init: bool = True) -> None:
    """Allocate the (sharded) parameters on `device` and initialise them in place (or leave them
    for a checkpoint or `training.init_from` to fill: `init=False`). Offloaded (FSDP2's
    CPUOffloadPolicy on the model): the parameters on the host, the buffers on `device`."""
    offloaded = getattr(model, "state_offloaded", False)  # set by apply_fsdp
    model.to_empty(device="cpu" if offloaded else device)
    if offloaded:
        for m in model.modules():
            for name, buf in m.named_buffers(recurse=False):
                setattr(m, name, buf.to(device))
    if init:
        model.init_weights(seed)
    else:
        model.init_rope()
    if getattr(model, "lora", None) is not None:  # the adapters start as PEFT's, always
        from blackwell_sm.train.lora import init_adapters

        init_adapters(model, seed)
