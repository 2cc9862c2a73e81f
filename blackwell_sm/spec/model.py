"""ModelSpec: a llama-style decoder shape, its exact parameter count and FLOPs per token.

This module is the single source of truth for parameter counts and FLOPs per token: the planner,
the training loop's MFU and the benchmarks all call these functions.
"""

from __future__ import annotations

from typing import Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from blackwell_sm.spec.types import (
    MAX_HEADS,
    MAX_LAYERS,
    MAX_SEQ,
    MAX_VOCAB,
    MAX_WIDTH,
    Bool,
    PosFloat,
    PosInt,
)


class ModelSpec(BaseModel):
    """A llama-style decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        "custom",
        min_length=1,
        max_length=256,
        description="Display name; presets use their own "
        "name. 1-256 characters (it becomes the bsm:model tag value: SageMaker TagValue max 256).",
    )
    n_layers: PosInt = Field(le=MAX_LAYERS, description=f"Transformer blocks, 1..{MAX_LAYERS}.")
    d_model: PosInt = Field(le=MAX_WIDTH, description=f"Hidden size, 1..{MAX_WIDTH}.")
    n_heads: PosInt = Field(
        le=MAX_HEADS, description=f"Attention (query) heads, 1..{MAX_HEADS}; must divide d_model."
    )
    n_kv_heads: PosInt = Field(
        le=MAX_HEADS, description=f"Key/value heads (GQA), 1..{MAX_HEADS}; must divide n_heads."
    )
    ffn_dim: PosInt = Field(
        le=MAX_WIDTH, description=f"SwiGLU inner size (w1, w3: d_model->ffn_dim), 1..{MAX_WIDTH}."
    )
    vocab_size: PosInt = Field(
        le=MAX_VOCAB, description=f"Vocabulary size, 1..{MAX_VOCAB} (uint32 token ids)."
    )
    tie_embeddings: Bool = Field(
        False, description="Share the input embedding with the output head."
    )
    rope_theta: PosFloat = Field(
        500000.0, le=1e12, description="RoPE base frequency, finite, in (0, 1e12]."
    )
    norm_eps: PosFloat = Field(1e-5, lt=1, description="RMSNorm epsilon, in (0, 1).")
    max_seq_len: PosInt = Field(
        8192, le=MAX_SEQ, description=f"Longest sequence the model supports, 1..{MAX_SEQ}."
    )

    @model_validator(mode="after")
    def _check_shape(self) -> Self:
        if self.d_model % self.n_heads:
            raise ValueError(
                f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}); "
                f"allowed n_heads: divisors of {self.d_model}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}); "
                f"allowed n_kv_heads: divisors of {self.n_heads}"
            )
        if self.head_dim % 2:
            raise ValueError(f"head_dim d_model/n_heads = {self.head_dim} must be even for RoPE")
        return self

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: n_kv_heads * head_dim."""
        return self.n_kv_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        """Parameters of one block: q, k, v, o projections, SwiGLU w1/w2/w3, two RMSNorm weights."""
        d = self.d_model
        attn = 2 * d * d + 2 * d * self.kv_dim
        mlp = 3 * d * self.ffn_dim
        norms = 2 * d
        return attn + mlp + norms

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """Exact parameter count (embedding, blocks, final norm, output head unless tied)."""
        head = 0 if self.tie_embeddings else self.vocab_size * self.d_model
        return self.embedding_params + self.n_layers * self.params_per_layer + self.d_model + head

    @property
    def n_matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: everything but the input embedding.

        With tied embeddings the shared matrix still does the output projection, so it counts.
        """
        if self.tie_embeddings:
            return self.n_params
        return self.n_params - self.embedding_params

    def flops_per_token(self, seq_len: int) -> float:
        """Model FLOPs per trained token (forward + backward, no recompute).

        6 x (all parameters except the input embedding) + 12 x layers x d_model x seq_len, the
        PaLM / torchtitan convention; the attention term counts the full (non-causal) score matrix.
        """
        return 6.0 * self.n_matmul_params + 12.0 * self.n_layers * self.d_model * seq_len
