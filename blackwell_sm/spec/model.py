"""ModelSpec: a decoder's shape and family; its parameter count and FLOPs per token.

The architecture itself (layers, shapes, what each checkpointing mode keeps) lives in
`blackwell_sm.spec.arch`; the properties here are that module's answers for this spec, and they
are the single source the planner, the training loop's MFU and the benchmarks use.
"""

from __future__ import annotations

from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field, model_validator

from blackwell_sm.spec import arch
from blackwell_sm.spec.types import (
    MAX_HEADS,
    MAX_LAYERS,
    MAX_SEQ,
    MAX_VOCAB,
    MAX_WIDTH,
    Bool,
    NonNegInt,
    PosFloat,
    PosInt,
)

Family = Literal["llama", "mistral", "qwen2", "qwen3"]


class RopeScaling(BaseModel):
    """Llama 3.1's RoPE frequency scaling (`rope_type: llama3` in Hugging Face configs)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rope_type: Literal["llama3"] = Field("llama3", description="The one scaling supported.")
    factor: PosFloat = Field(
        le=1e6, description="Low frequencies are divided by this, in (0, 1000000]."
    )
    low_freq_factor: PosFloat = Field(
        le=1e6, description="Wavelength bound of the low band, in (0, 1000000]."
    )
    high_freq_factor: PosFloat = Field(
        le=1e6, description="Wavelength bound of the high band, in (0, 1000000]."
    )
    original_max_position_embeddings: PosInt = Field(
        le=MAX_SEQ, description=f"Context length the model was first trained at, 1..{MAX_SEQ}."
    )

    @model_validator(mode="after")
    def _bands(self) -> Self:
        if self.high_freq_factor <= self.low_freq_factor:
            raise ValueError("high_freq_factor must exceed low_freq_factor")
        return self


class ModelSpec(BaseModel):
    """A pre-norm decoder: RMSNorm, RoPE, grouped-query attention, SwiGLU MLP; `family` says
    which variant (q/k/v biases for qwen2, per-head q/k norms for qwen3, see spec/arch.py)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(
        "custom",
        min_length=1,
        max_length=256,
        description="Display name; presets use their own "
        "name. 1-256 characters (it becomes the bsm:model tag value: SageMaker TagValue max 256).",
    )
    family: Family = Field(
        "llama", description="Architecture family: llama, mistral, qwen2 or qwen3."
    )
    n_layers: PosInt = Field(le=MAX_LAYERS, description=f"Transformer blocks, 1..{MAX_LAYERS}.")
    d_model: PosInt = Field(le=MAX_WIDTH, description=f"Hidden size, 1..{MAX_WIDTH}.")
    n_heads: PosInt = Field(le=MAX_HEADS, description=f"Attention (query) heads, 1..{MAX_HEADS}.")
    n_kv_heads: PosInt = Field(
        le=MAX_HEADS, description=f"Key/value heads (GQA), 1..{MAX_HEADS}; must divide n_heads."
    )
    head_dim: PosInt | None = Field(
        None,
        le=MAX_WIDTH,
        description=f"Width of one head, 1..{MAX_WIDTH}; null: d_model / n_heads (which must "
        "then divide).",
    )
    ffn_dim: PosInt = Field(
        le=MAX_WIDTH, description=f"SwiGLU inner size (gate, up: d_model->ffn_dim), 1..{MAX_WIDTH}."
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
    rope_scaling: RopeScaling | None = Field(None, description="Llama 3.1 RoPE scaling, or null.")
    norm_eps: PosFloat = Field(1e-5, lt=1, description="RMSNorm epsilon, in (0, 1).")
    max_seq_len: PosInt = Field(
        8192, le=MAX_SEQ, description=f"Longest sequence the model supports, 1..{MAX_SEQ}."
    )
    bos_token_id: NonNegInt | None = Field(
        None,
        lt=MAX_VOCAB,
        description=f"Beginning-of-sequence token, >= 0 and < {MAX_VOCAB} (from an imported "
        "config; exported).",
    )
    eos_token_id: tuple[NonNegInt, ...] | None = Field(
        None, description="End-of-sequence token(s) (from an imported config; exported)."
    )

    @model_validator(mode="after")
    def _check_shape(self) -> Self:
        if self.head_dim is None:
            if self.d_model % self.n_heads:
                raise ValueError(
                    f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}) unless "
                    f"head_dim is set; allowed n_heads: divisors of {self.d_model}"
                )
            # Resolved once; not marked as set, so `{preset: ..., d_model: ...}` re-derives it.
            object.__setattr__(self, "head_dim", self.d_model // self.n_heads)
        elif self.family == "qwen2" and self.head_dim * self.n_heads != self.d_model:
            raise ValueError("qwen2 heads are d_model / n_heads wide: leave head_dim unset")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}); "
                f"allowed n_kv_heads: divisors of {self.n_heads}"
            )
        assert self.head_dim is not None
        if self.head_dim % 2:
            raise ValueError(f"head_dim {self.head_dim} must be even for RoPE")
        return self

    @property
    def q_dim(self) -> int:
        """Width of the Q projection (and of the attention output): n_heads * head_dim."""
        assert self.head_dim is not None  # resolved by _check_shape
        return self.n_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of the K (or V) projection: n_kv_heads * head_dim."""
        assert self.head_dim is not None  # resolved by _check_shape
        return self.n_kv_heads * self.head_dim

    @property
    def params_per_layer(self) -> int:
        """Parameters of one block (see arch.block_linears / arch.block_norms)."""
        return arch.params_per_layer(self)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.d_model

    @property
    def n_params(self) -> int:
        """Exact parameter count (embedding, blocks, final norm, output head unless tied)."""
        return arch.n_params(self)

    @property
    def n_matmul_params(self) -> int:
        """Parameters that take part in a matmul per token: everything but the input embedding.

        With tied embeddings the shared matrix still does the output projection, so it counts.
        """
        if self.tie_embeddings:
            return self.n_params
        return self.n_params - self.embedding_params

    def flops_per_token(self, seq_len: int) -> float:
        """Model FLOPs per trained token (forward + backward, no recompute); see arch."""
        return arch.flops_per_token(self, seq_len)
