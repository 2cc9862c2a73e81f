"""LoRA on the decoder: adapters on the target linears, the base frozen in bf16 (`training.peft`).

`apply_lora(model, peft)` runs on the meta-device model before anything else of the plan
(train/parallelize.py): each target `nn.Linear` becomes a `LoraLinear` that keeps the same
`weight` (and `bias`) and adds `lora_A` (rank x in) and `lora_B` (out x rank) as PEFT names them,
so the parameter names are `...q_proj.weight` (the base, unchanged) and `...q_proj.lora_A.weight`.
Every parameter but the adapters and `modules_to_save` is frozen and cast to bf16: FSDP2 shards
it, gathers it, and holds no gradient and no optimizer state for it. The adapters stay fp32 (the
master weights; FSDP computes in bf16). Checkpoints hold the trainable parameters only
(`trainable_only`); the base comes again from `init_from` (or the seed) on resume.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from blackwell_sm.spec.peft import PeftSpec

BASE_DTYPE = torch.bfloat16  # the frozen base weights' storage (and compute) dtype


def is_adapter(name: str) -> bool:
    """Whether a parameter name is an adapter's (`...lora_A.weight`, `...lora_B.weight`)."""
    return ".lora_A." in name or ".lora_B." in name


class LoraLinear(nn.Linear):
    """y = x W^T + b + lora_B(lora_A(dropout(x))) x alpha / r (PEFT's LoRA layer)."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float, dropout: float) -> None:
        nn.Module.__init__(self)
        self.in_features, self.out_features = base.in_features, base.out_features
        self.weight, self.bias = base.weight, base.bias
        dev = base.weight.device
        self.lora_A = nn.Linear(base.in_features, rank, bias=False, device=dev)
        self.lora_B = nn.Linear(rank, base.out_features, bias=False, device=dev)
        self.lora_dropout: nn.Module = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.scaling = alpha / rank

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.linear(x, self.weight, self.bias)
        return out + self.lora_B(self.lora_A(self.lora_dropout(x))) * self.scaling


def adapter_policy(args: tuple, rank: int) -> object | None:
    """Selective checkpointing of a matmul `args` (mm's operands) under adapters of `rank`:
    keep lora_A's output (rank wide: small, and what lora_B's backward needs), recompute
    lora_B's (as wide as the base linear's output); None for a base matmul. Told apart by shape
    alone (so compiled graphs see the same): the spec keeps the rank below every adapted width."""
    from torch.utils.checkpoint import CheckpointPolicy

    if len(args) < 2 or not hasattr(args[0], "shape") or not hasattr(args[1], "shape"):
        return None
    if args[1].shape[-1] == rank:
        return CheckpointPolicy.MUST_SAVE
    if args[0].shape[-1] == rank:
        return CheckpointPolicy.PREFER_RECOMPUTE
    return None


def adapter_layers(model: nn.Module) -> dict[str, LoraLinear]:
    """Module name -> LoraLinear, in the model's order."""
    return {n: m for n, m in model.named_modules() if isinstance(m, LoraLinear)}


def apply_lora(model: nn.Module, peft: PeftSpec) -> nn.Module:
    """Add adapters to `model`'s target linears, freeze (and cast to bf16) everything else but
    `peft.modules_to_save`; in place, returns `model`."""
    for block in model.layers:
        for part in (block.self_attn, block.mlp):
            for name in peft.target_modules:
                layer = getattr(part, name, None)
                if isinstance(layer, nn.Linear):
                    setattr(part, name, LoraLinear(layer, peft.rank, peft.alpha, peft.dropout))
    for mod_name, module in model.named_modules():
        for p_name, p in list(module.named_parameters(recurse=False)):
            full = f"{mod_name}.{p_name}" if mod_name else p_name
            if is_adapter(full) or full.split(".")[0] in peft.modules_to_save:
                continue
            frozen = nn.Parameter(p.detach().to(BASE_DTYPE), requires_grad=False)
            setattr(module, p_name, frozen)
    model.lora = peft  # read by the loop and the export
    return model


@torch.no_grad()
def init_adapters(model: nn.Module, seed: int) -> None:
    """PEFT's default init: lora_A Kaiming-uniform (a = sqrt(5)), lora_B zero, so the adapted
    model starts equal to its base. Each A is drawn whole from its own seeded generator and
    each rank keeps its shard (independent of the sharding, as `Transformer.init_weights`)."""
    from blackwell_sm.train.model import _local, _my_shard

    for i, (name, layer) in enumerate(adapter_layers(model).items()):
        a, b = layer.lora_A.weight, layer.lora_B.weight
        full = torch.empty(a.shape, dtype=torch.float32, device=_local(a).device)
        gen = torch.Generator(device=full.device).manual_seed(seed * 100_003 + 7919 + i)
        bound = 1.0 / math.sqrt(a.shape[1])  # kaiming_uniform_ with a = sqrt(5)
        full.uniform_(-bound, bound, generator=gen)
        _local(a).copy_(_my_shard(a, full))
        _local(b).zero_()
        del name


def merged_deltas(model: nn.Module) -> dict[str, Callable[[], torch.Tensor]]:
    """Adapted weight name -> a function giving its full fp32 delta B A x alpha / r (a
    collective when sharded: every rank calls it, in the same order); none without adapters."""
    from torch.distributed.tensor import DTensor

    def full(p: torch.Tensor) -> torch.Tensor:
        return (p.full_tensor() if isinstance(p, DTensor) else p).detach().float()

    def delta(layer: LoraLinear) -> Callable[[], torch.Tensor]:
        return lambda: (full(layer.lora_B.weight) @ full(layer.lora_A.weight)) * layer.scaling

    return {f"{n}.weight": delta(m) for n, m in adapter_layers(model).items()}


def trainable_only(model: nn.Module) -> bool:
    """Whether checkpoints hold the trainable parameters only (a model with frozen ones)."""
    return getattr(model, "lora", None) is not None


def frozen_names(model: nn.Module) -> list[str]:
    """The frozen parameters' names (the base)."""
    return [n for n, p in model.named_parameters() if not p.requires_grad]
