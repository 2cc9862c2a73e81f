"""LoRA in the planner's models (`training.peft`; the loop's side is train/lora.py).

With adapters the base is frozen: its weights are kept sharded in bf16 (2 bytes per parameter,
no fp32 master), with no gradient and no optimizer state; the adapters (and any module trained
in full) are fp32 master weights with fp32 gradients and AdamW state. Compute: the frozen
linears still run forward (2 FLOPs per parameter per token) and the backward to their input
(dX: 2), but not the gradient of their weight (dW: 2); each adapter costs 6 FLOPs per
parameter per token like any trained linear. Activations: each adapter keeps its rank-wide
lora_A output (and with dropout its dropped input and mask) while no checkpointing mode
recomputes it (train/activation_checkpoint.py keeps it under `selective` and `selective-op`).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, NamedTuple

from blackwell_sm.spec import ModelSpec, arch
from blackwell_sm.spec.peft import PeftSpec

if TYPE_CHECKING:
    from blackwell_sm.planner.shape import Shape

BASE_BYTES = 2  # the frozen base's storage: bf16
TRAINABLE_BYTES = 4  # fp32 master weights and gradients
ADAM_BYTES = 8  # exp_avg + exp_avg_sq, fp32


class LoraShape(NamedTuple):
    """The adapters' numbers, made once with the model's `Shape` (`with_peft`)."""

    rank: int
    dropout: bool
    n_targets: int  # adapted linears per block
    target_in: int  # the adapted linears' input widths, summed (dropout's saves)
    last_in: int  # the input width of the block's last adapted linear (backward's first)
    block_params: int  # adapter parameters per block
    root_trainable: int  # parameters outside the blocks trained in full (modules_to_save)
    head_trainable: bool  # the output head's weight gets a gradient (lm_head, or tied embedding)

    def trainable(self, n_layers: int) -> int:
        """Trainable parameters of the whole model."""
        return n_layers * self.block_params + self.root_trainable


def lora_shape(model: ModelSpec, peft: PeftSpec) -> LoraShape:
    """The adapters `peft` adds to `model`."""
    lins = [
        lin for lin in arch.block_linears(model) if lin.name.split(".")[1] in peft.target_modules
    ]
    table = arch.param_table(model)
    root = sum(
        math.prod(table[name])
        for name in table
        if name.split(".")[0] in peft.modules_to_save and not name.startswith("layers.")
    )
    head = "lm_head" if not model.tie_embeddings else "embed_tokens"
    return LoraShape(
        rank=peft.rank,
        dropout=peft.dropout > 0,
        n_targets=len(lins),
        target_in=sum(lin.in_features for lin in lins),
        last_in=lins[-1].in_features,
        block_params=sum(peft.rank * (lin.in_features + lin.out_features) for lin in lins),
        root_trainable=root,
        head_trainable=head in peft.modules_to_save,
    )


def with_peft(model: Shape, peft: PeftSpec | None) -> Shape:
    """`model` with its adapters (`Shape.lora`), or as it is without `training.peft`."""
    if peft is None:
        return model
    return model._replace(lora=lora_shape(model.spec, peft))


def state_bytes(model: Shape, lora: LoraShape, shard_degree: int) -> tuple[float, float, float]:
    """(sharded params: bf16 base + fp32 trainable, fp32 grads, AdamW state) per GPU."""
    train = lora.trainable(model.n_layers)
    frozen = model.n_params - lora.root_trainable
    params = frozen * BASE_BYTES + train * TRAINABLE_BYTES
    return (
        params / shard_degree,
        train * TRAINABLE_BYTES / shard_degree,
        train * ADAM_BYTES / shard_degree,
    )


def saved_bytes_per_token(lora: LoraShape, mode: str, dtype_bytes: int = 2) -> float:
    """What one block's adapters add to what the block keeps for backward, per token: lora_A's
    output (every mode but full), and with dropout its output and mask (mode none only)."""
    if mode == "full":
        return 0.0
    extra = lora.n_targets * lora.rank * dtype_bytes
    if lora.dropout and mode == "none":
        extra += lora.target_in * (dtype_bytes + 1)
    return float(extra)


def recompute_bytes_per_token(lora: LoraShape, dtype_bytes: int = 2) -> float:
    """What a recomputed block's adapters re-create (the mode-none saves): its working set."""
    return saved_bytes_per_token(lora, "none", dtype_bytes)


def backward_work_bytes_per_token(lora: LoraShape, dtype_bytes: int = 2) -> float:
    """What an adapter's backward adds to the block's backward working set, per token (traced:
    the peak moves to the backward of the block's last adapted linear): the adapter's input
    gradient, alive beside the frozen linear's until the two are summed (in wide)."""
    return float(lora.last_in * dtype_bytes)


def linear_flops_per_param(lora: LoraShape | None) -> float:
    """FLOPs per token per base linear parameter: 6 trained, 4 frozen (no dW)."""
    return 6.0 if lora is None else 4.0


def adapter_flops_per_token(model: Shape) -> float:
    """The adapters' own FLOPs per token (forward and backward, 6 per parameter)."""
    lora = model.lora
    return 0.0 if lora is None else 6.0 * model.n_layers * lora.block_params


#: How a LoRA plan's flops_per_token and MFU are counted (Throughput.mfu_basis).
MFU_BASIS = (
    "frozen linears 4 and adapters 6 FLOPs per parameter (no weight gradient for the frozen "
    "base; the head 6 only if trained) + 12 x layers x d_model x seq_len per token, over the "
    "GPU's dense BF16 peak"
)


def model_flops_per_token(model: Shape, seq_len: int) -> float:
    """Model FLOPs per trained token, the MFU's numerator: the spec's 6 per matmul parameter
    (`arch.flops_per_token`), or with adapters the work the step needs: no weight gradient for
    the frozen linears (and head), the adapters' own 6 per parameter."""
    full = model.spec.flops_per_token(seq_len)
    lora = model.lora
    if lora is None:
        return full
    head = model.n_matmul_params - model.n_layers * model.params_per_layer
    no_dw = model.n_layers * model.linear_params + (0 if lora.head_trainable else head)
    return full - 2.0 * no_dw + adapter_flops_per_token(model)
