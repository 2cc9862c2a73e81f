"""The decoder in plain PyTorch, small enough to hold in one's head; one class for every family.

The module tree is built from `blackwell_sm.spec.arch` (the block's linears, biases and norms
come from its tables; `tests/test_arch.py` checks the parameter names and shapes equal
`arch.param_table`). Names follow Hugging Face's `*ForCausalLM` (model.layers.N.self_attn.q_proj,
...) and RoPE uses the same rotate-half layout, so import and export are a prefix rename
(`arch.hf_key`). Build it on the meta device, shard it, then call `init_weights()` (or load).
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from blackwell_sm.spec import ModelSpec, arch
from blackwell_sm.spec.long_context import DENSE_MASK_MAX_ELEMENTS
from blackwell_sm.train.attention import AttnMask, attend, build_mask
from blackwell_sm.train.context_parallel import CpGroup, gather_sequence
from blackwell_sm.train.loss import head_loss


def rope_inv_freq(spec: ModelSpec, device: torch.device | None = None) -> torch.Tensor:
    """RoPE inverse frequencies (head_dim / 2,), fp32, with Llama 3.1 scaling when the spec has it.

    Llama 3 scaling: wavelengths longer than original_len / low_freq_factor are divided by
    `factor`, those shorter than original_len / high_freq_factor kept, and the band between
    interpolated linearly in original_len / wavelength.
    """
    hd = spec.head_dim
    inv = 1.0 / (spec.rope_theta ** (torch.arange(0, hd, 2, device=device).float() / hd))
    sc = spec.rope_scaling
    if sc is None:
        return inv
    n0 = sc.original_max_position_embeddings
    wavelen = 2 * math.pi / inv
    scaled = torch.where(wavelen > n0 / sc.low_freq_factor, inv / sc.factor, inv)
    t = (n0 / wavelen - sc.low_freq_factor) / (sc.high_freq_factor - sc.low_freq_factor)
    blended = (1 - t) * scaled / sc.factor + t * scaled
    middle = (wavelen >= n0 / sc.high_freq_factor) & (wavelen <= n0 / sc.low_freq_factor)
    return torch.where(middle, blended, scaled)


def rope_cache(spec: ModelSpec, seq_len: int, device: torch.device | None = None) -> torch.Tensor:
    """cos and sin for positions 0..seq_len-1, stacked as (2, seq_len, head_dim), fp32."""
    inv_freq = rope_inv_freq(spec, device)
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


def _linears(spec: ModelSpec, part: str) -> dict[str, nn.Linear]:
    """The block's linears under `part` (self_attn / mlp), as the description lists them."""
    return {
        lin.name.split(".")[1]: nn.Linear(lin.in_features, lin.out_features, bias=lin.bias)
        for lin in arch.block_linears(spec)
        if lin.name.startswith(part + ".")
    }


class Attention(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = spec.n_heads, spec.n_kv_heads, spec.head_dim
        for name, layer in _linears(spec, "self_attn").items():
            self.add_module(name, layer)
        norms = {n.name.split(".")[1]: n for n in arch.block_norms(spec) if "." in n.name}
        # Qwen3: RMSNorm over each head's query and key, before RoPE.
        self.q_norm = nn.RMSNorm(spec.head_dim, eps=spec.norm_eps) if "q_norm" in norms else None
        self.k_norm = nn.RMSNorm(spec.head_dim, eps=spec.norm_eps) if "k_norm" in norms else None
        self.cp: CpGroup | None = None  # set by Transformer.set_context_parallel

    def forward(self, x: torch.Tensor, rope: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.q_proj(x).view(b, s, self.n_heads, self.head_dim)
        k = self.k_proj(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.v_proj(x).view(b, s, self.n_kv_heads, self.head_dim).transpose(1, 2)
        if self.q_norm is not None and self.k_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = apply_rope(q.transpose(1, 2), rope), apply_rope(k.transpose(1, 2), rope)
        if self.cp is not None:  # context parallelism: every rank's keys and values
            k, v = gather_sequence(k, self.cp), gather_sequence(v, self.cp)
        out = attend(q, k, v, mask)
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))


class MLP(nn.Module):
    def __init__(self, spec: ModelSpec) -> None:
        super().__init__()
        for name, layer in _linears(spec, "mlp").items():
            self.add_module(name, layer)

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

    def _forward(self, x: torch.Tensor, rope: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        h = x + self.self_attn(self.input_layernorm(x), rope, mask)
        return h + self.mlp(self.post_attention_layernorm(h))

    def forward(self, x: torch.Tensor, rope: torch.Tensor, mask: AttnMask) -> torch.Tensor:
        if self.ac_mode == "none" or not torch.is_grad_enabled():
            return self._forward(x, rope, mask)
        from torch.utils.checkpoint import checkpoint

        kwargs: dict[str, Any] = {"context_fn": self.ac_context_fn} if self.ac_context_fn else {}
        return checkpoint(
            self._checkpointed, x, rope, mask.dense, mask, use_reentrant=False, **kwargs
        )

    def _checkpointed(self, x: torch.Tensor, rope: torch.Tensor, dense, mask: AttnMask):
        # `dense` is `mask.dense`, passed as an argument of its own so that the checkpoint keeps
        # it as a saved tensor input (seen by saved-tensor hooks) like the block's input.
        return self._forward(x, rope, mask)


class Transformer(nn.Module):
    """The decoder. Parameter names are `arch.param_table(spec)`'s (HF's, see `arch.hf_key`)."""

    rope: torch.Tensor  # a buffer (register_buffer below)

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
        self.loss_impl = "chunked"  # training.loss_impl (train/loss.py), set by apply_plan
        self.cp: CpGroup | None = None  # context parallelism: set_context_parallel
        self.dense_mask_max = DENSE_MASK_MAX_ELEMENTS  # dense attention masks up to this size
        self.kernel_form: str | None = None  # "cuda": the GPU's kernels anywhere (gpu_form.py)

    def set_context_parallel(self, cp: CpGroup | None) -> None:
        """Split every sequence over `cp`'s ranks (train/context_parallel.py), or not (None)."""
        cp = cp if cp is not None and cp.degree > 1 else None
        self.cp = cp
        for layer in self.layers:
            layer.self_attn.cp = cp

    def head_weight(self) -> torch.Tensor:
        return self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight

    def forward(
        self,
        tokens: torch.Tensor,
        doc_ids: torch.Tensor | None = None,
        *,
        targets: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (batch, seq) -> logits (batch, seq, vocab), or with `targets` (batch, seq; -100
        where one does not count) the fp32 summed loss (train/loss.py: the head and the loss run
        here, inside the FSDP root's forward, where the head's weight is gathered).

        `doc_ids` (batch, seq): packed samples; a token attends only to earlier tokens with the
        same id. RoPE needs no restart: its scores depend on relative positions only, so a packed
        sample's logits equal its logits alone. Under context parallelism (`self.cp`) `tokens`
        are this rank's share, at global `positions`, and `doc_ids` cover the whole sequence.
        """
        b, s = tokens.shape
        device = tokens.device
        cp = self.cp
        if positions is None and cp is not None:  # this rank's share of the whole sequence
            positions = cp.positions(s * cp.degree, device)
        if positions is None:
            positions = torch.arange(s, device=device)
            rope = self.rope[:, :s]
        else:
            rope = self.rope[:, positions]
        kv_pos = positions if cp is None else cp.all_positions(s * cp.degree, device)
        mask = build_mask(
            doc_ids,
            q_pos=positions,
            kv_pos=kv_pos,
            micro_batch=b,
            cp_degree=1 if cp is None else cp.degree,
            dense_max=self.dense_mask_max,
            form=self.kernel_form,
        )
        h = self.embed_tokens(tokens)
        # One copy of the table in the compute dtype for every block (apply_rope's casts are then
        # views): per-call casts kept a cos and a sin for each q and k of every block.
        rope = rope.to(h.dtype)
        for layer in self.layers:
            h = layer(h, rope, mask)
        h = self.norm(h)
        if targets is None:
            return F.linear(h, self.head_weight())
        return head_loss(h, self.head_weight(), targets, self.loss_impl, form=self.kernel_form)

    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Standard init (normal 0.02; residual outputs scaled by 1/sqrt(2 x layers); norms 1,
        biases 0); RoPE cache.

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
            if name.endswith(".bias"):
                p.zero_()
                continue
            s = out_std if name.endswith(("o_proj.weight", "down_proj.weight")) else std
            full = torch.empty(p.shape, dtype=p.dtype, device=_local(p).device)
            gen = torch.Generator(device=full.device).manual_seed(seed * 100_003 + i)
            nn.init.trunc_normal_(full, std=s, a=-3 * s, b=3 * s, generator=gen)
            _local(p).copy_(_my_shard(p, full))
        self.init_rope()

    def init_rope(self) -> None:
        """Compute the RoPE table on the model's device (after `to_empty`, or loading weights)."""
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
