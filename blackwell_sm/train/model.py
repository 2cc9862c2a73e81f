"""A llama-style decoder in plain PyTorch, small enough to hold in one's head.

Module names follow Hugging Face `LlamaForCausalLM` (model.layers.N.self_attn.q_proj, ...), and RoPE
uses the same rotate-half layout, so export is a rename-free copy. The parameter count equals
`ModelSpec.n_params` (tested). Build it on the meta device, shard it, then call `init_weights()`.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from blackwell_sm.spec import ModelSpec


def rope_cache(spec: ModelSpec, seq_len: int, device: torch.device | None = None) -> torch.Tensor:
    """cos and sin for positions 0..seq_len-1, stacked as (2, seq_len, head_dim), fp32."""
    hd = spec.head_dim
    inv_freq = 1.0 / (spec.rope_theta ** (torch.arange(0, hd, 2, device=device).float() / hd))
    t = torch.arange(seq_len, device=device).float()
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat([freqs, freqs], dim=-1)
    return torch.stack([emb.cos(), emb.sin()])


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([-x2, x1], dim=-1)


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """x: (batch, heads, seq, head_dim); rope: (2, seq, head_dim)."""
    cos, sin = rope[0].to(x.dtype), rope[1].to(x.dtype)
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        d, hd = spec.d_model, spec.head_dim
        self.n_heads, self.n_kv_heads, self.head_dim = spec.n_heads, spec.n_kv_heads, hd
        self.q_proj = nn.Linear(d, spec.n_heads * hd, bias=False)
        self.k_proj = nn.Linear(d, spec.kv_dim, bias=False)
        self.v_proj = nn.Linear(d, spec.kv_dim, bias=False)
        self.o_proj = nn.Linear(spec.n_heads * hd, d, bias=False)

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.gate_proj = nn.Linear(spec.d_model, spec.ffn_dim, bias=False)
        self.up_proj = nn.Linear(spec.d_model, spec.ffn_dim, bias=False)
        self.down_proj = nn.Linear(spec.ffn_dim, spec.d_model, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class Block(nn.Module):
    """Pre-norm transformer block. `ac_mode` is set by `apply_activation_checkpointing`."""

    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.input_layernorm = nn.RMSNorm(spec.d_model, eps=spec.norm_eps)
        self.self_attn = Attention(spec)
        self.post_attention_layernorm = nn.RMSNorm(spec.d_model, eps=spec.norm_eps)
        self.mlp = MLP(spec)
        self.ac_mode = "none"
        self.ac_context_fn = None

    def _forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), rope)
        return h + self.mlp(self.post_attention_layernorm(h))

    def forward(self, x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
        if self.ac_mode == "none" or not torch.is_grad_enabled():
            return self._forward(x, rope)
        from torch.utils.checkpoint import checkpoint

        kwargs = {"context_fn": self.ac_context_fn} if self.ac_context_fn else {}
        return checkpoint(self._forward, x, rope, use_reentrant=False, **kwargs)


class Transformer(nn.Module):
    """The decoder. Parameter names match Hugging Face Llama minus the `model.` prefix on blocks."""

    def __init__(self, spec: ModelSpec, max_seq_len: int | None = None) -> None:
        super().__init__()
        self.spec = spec
        self.embed_tokens = nn.Embedding(spec.vocab_size, spec.d_model)
        self.layers = nn.ModuleList(Block(spec) for _ in range(spec.n_layers))
        self.norm = nn.RMSNorm(spec.d_model, eps=spec.norm_eps)
        self.lm_head = (
            None if spec.tie_embeddings else nn.Linear(spec.d_model, spec.vocab_size, bias=False)
        )
        self.rope_len = max_seq_len or spec.max_seq_len
        self.register_buffer("rope", rope_cache(spec, self.rope_len), persistent=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        """tokens (batch, seq) -> logits (batch, seq, vocab)."""
        s = tokens.shape[1]
        rope = self.rope[:, :s]
        h = self.embed_tokens(tokens)
        for layer in self.layers:
            h = layer(h, rope)
        h = self.norm(h)
        if self.lm_head is None:
            return F.linear(h, self.embed_tokens.weight)
        return self.lm_head(h)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Standard init (normal 0.02; residual outputs scaled by 1/sqrt(2 x layers)); RoPE cache.

        Works on real and on sharded (DTensor) parameters after `to_empty`. Each parameter is drawn
        whole from its own seeded generator on its device and each rank keeps its shard, so the
        weights do not depend on how the model is sharded (FSDP, HSDP or one process); only one
        parameter is ever materialised in full.
        """
        std = 0.02
        out_std = std / math.sqrt(2 * self.spec.n_layers)
        for i, (name, p) in enumerate(self.named_parameters()):
            if name.endswith("norm.weight") or "layernorm" in name:
                p.fill_(1.0)
                continue
            s = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            full = torch.empty(p.shape, dtype=p.dtype, device=_local(p).device)
            gen = torch.Generator(device=full.device).manual_seed(seed * 100_003 + i)
            nn.init.trunc_normal_(full, std=s, a=-3 * s, b=3 * s, generator=gen)
            _local(p).copy_(_my_shard(p, full))
        self.rope = rope_cache(self.spec, self.rope_len, device=self.rope.device)


def _local(p: torch.Tensor) -> torch.Tensor:
    return p.to_local() if hasattr(p, "to_local") else p


def _my_shard(p: torch.Tensor, full: torch.Tensor) -> torch.Tensor:
    """This rank's piece of `full` under `p`'s placements (DTensor chunking), or `full`."""
    if not hasattr(p, "placements"):
        return full
    coord = p.device_mesh.get_coordinate()
    for mesh_dim, placement in enumerate(p.placements):
        if placement.is_shard():
            chunks = full.chunk(p.device_mesh.size(mesh_dim), dim=placement.dim)
            k = coord[mesh_dim]
            full = chunks[k] if k < len(chunks) else full.narrow(placement.dim, 0, 0)
    return full
