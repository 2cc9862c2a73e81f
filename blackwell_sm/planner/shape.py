"""A model's shape as the planner's models use it: the numbers of a ModelSpec, computed once at
the planner's edge (`shape(spec)`) and passed to the memory and step-time models, which take a
`Shape` only."""

from __future__ import annotations

from functools import lru_cache
from typing import NamedTuple

from blackwell_sm.planner.lora import LoraShape
from blackwell_sm.spec import ModelSpec, arch


class Shape(NamedTuple):
    """The numbers of a ModelSpec the models use, computed once (the search calls them often)."""

    n_layers: int
    d_model: int
    kv_dim: int
    ffn_dim: int
    n_heads: int
    vocab_size: int
    n_params: int
    params_per_layer: int
    n_matmul_params: int
    linear_params: int  # one block's linears (weights and biases), arch.block_linear_params
    spec: ModelSpec  # the description everything above comes from
    lora: LoraShape | None = None  # training.peft's adapters (planner/lora.py `with_peft`)


@lru_cache(maxsize=256)
def shape(model: ModelSpec | Shape) -> Shape:
    if isinstance(model, Shape):
        return model
    return Shape(
        model.n_layers,
        model.d_model,
        model.kv_dim,
        model.ffn_dim,
        model.n_heads,
        model.vocab_size,
        model.n_params,
        model.params_per_layer,
        model.n_matmul_params,
        arch.block_linear_params(model),
        model,
    )
