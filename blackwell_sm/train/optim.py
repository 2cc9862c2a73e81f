"""AdamW and the learning-rate schedule (linear warmup, then cosine/linear/constant decay)."""

from __future__ import annotations

import math

import torch
from torch import nn

from blackwell_sm.spec.training import OptimizerSpec, ScheduleSpec


def build_optimizer(model: nn.Module, spec: OptimizerSpec, device: torch.device):
    """AdamW, fused on CUDA. Weight decay on matrices only (not norms). Parameters offloaded to
    the host (FSDP2's CPUOffloadPolicy) step there, unfused."""
    first = next(iter(model.parameters()), None)
    if first is not None:
        device = (first.to_local() if hasattr(first, "to_local") else first).device
    decay: list[nn.Parameter] = []
    no_decay: list[nn.Parameter] = []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [
        {"params": decay, "weight_decay": spec.weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(
        groups,
        lr=spec.lr,
        betas=spec.betas,
        eps=spec.eps,
        fused=device.type == "cuda",
        foreach=None if device.type == "cuda" else False,
    )


def lr_at(step: int, *, peak: float, total_steps: int, schedule: ScheduleSpec) -> float:
    """Learning rate for optimizer step `step` (0-based); a pure function, so resume is exact."""
    warm = schedule.warmup_steps
    if warm and step < warm:
        return peak * (step + 1) / warm
    floor = peak * schedule.min_lr_ratio
    if schedule.decay == "constant":
        return peak
    span = max(1, total_steps - warm)
    frac = min(1.0, (step - warm) / span)
    if schedule.decay == "linear":
        return peak - (peak - floor) * frac
    return floor + (peak - floor) * 0.5 * (1 + math.cos(math.pi * frac))


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    for group in optimizer.param_groups:
        group["lr"] = lr


def clip_grad_norm(model: nn.Module, max_norm: float | None) -> torch.Tensor:
    """Total grad norm over all shards (DTensor-aware), a 0-d tensor left on the device (reading
    it is a host sync: the loop does so on logged steps only); clips in place when max_norm is
    set."""
    from torch.distributed.tensor import DTensor

    params = [p for p in model.parameters() if p.grad is not None]
    grads = [p.grad for p in params]
    total = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=None)
    if isinstance(total, DTensor):
        # Partial sums live on each shard; full_tensor() reduces them across the mesh.
        total = total.full_tensor()
    if max_norm is not None:
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total, foreach=None)
    return total
