"""Attention masks and the attention call: one rule, three forms.

The rule: a query at global position p (document d) sees the keys at positions <= p of document
d. Without packed documents and with the whole sequence on this rank it is SDPA's own causal
kernel. Otherwise the mask is built from global positions (context parallelism hands each rank
two chunks of the sequence; `train/context_parallel.py`) and document ids: a dense boolean
(b, 1, q, kv) mask while it is small, else FlexAttention's block mask, built here block by block
from per-block position and document ranges, so q x kv is never materialised (at seq 131,072 a
dense mask is 16 GiB). Which form: `spec.long_context.mask_kind`, the planner's rule too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from blackwell_sm.spec.long_context import DENSE_MASK_MAX_ELEMENTS, mask_kind

BLOCK = 128  # FlexAttention's default block size (queries and keys)


@dataclass(frozen=True)
class AttnMask:
    """What each block's attention needs: the form, and the mask of that form (or nothing)."""

    kind: str  # "causal" | "dense" | "block"
    dense: torch.Tensor | None = None  # (b, 1, q, kv) bool
    block: Any = None  # a FlexAttention BlockMask
    stand_in: bool = False  # the GPU kernel's stand-in (train/gpu_kernels.py), any device


def build_mask(
    doc_ids: torch.Tensor | None,
    *,
    q_pos: torch.Tensor,
    kv_pos: torch.Tensor,
    micro_batch: int,
    cp_degree: int = 1,
    dense_max: int = DENSE_MASK_MAX_ELEMENTS,
    form: str | None = None,
) -> AttnMask:
    """The mask for queries at global positions `q_pos` (q,) over keys at `kv_pos` (kv,);
    `doc_ids` (b, seq): the document of every position of the row (None: one document).
    `form="cuda"`: the GPU's rule and kernel on whatever device the tensors are (the trace's
    GPU form: `train/gpu_form.py`); None: the tensors' own device."""
    stand_in = form == "cuda"
    kind = mask_kind(
        packed=doc_ids is not None,
        cp_degree=cp_degree,
        micro_batch=micro_batch,
        q_len=len(q_pos),
        kv_len=len(kv_pos),
        device=form or q_pos.device.type,
        dense_max=dense_max,
    )
    if kind == "causal":
        return AttnMask("causal", stand_in=stand_in)
    dq = None if doc_ids is None else doc_ids[:, q_pos]
    dkv = None if doc_ids is None else doc_ids[:, kv_pos]
    if kind == "dense":
        mask = (kv_pos[None, :] <= q_pos[:, None])[None]
        if dq is not None and dkv is not None:
            mask = mask & (dq[:, :, None] == dkv[:, None, :])
        return AttnMask("dense", dense=mask[:, None], stand_in=stand_in)
    return AttnMask("block", block=block_mask(q_pos, kv_pos, dq, dkv), stand_in=stand_in)


def document_mask(doc_ids: torch.Tensor) -> torch.Tensor:
    """(batch, 1, seq, seq) bool: causal, and only within the same document."""
    pos = torch.arange(doc_ids.shape[1], device=doc_ids.device)
    mask = build_mask(
        doc_ids,
        q_pos=pos,
        kv_pos=pos,
        micro_batch=doc_ids.shape[0],
        dense_max=doc_ids.shape[0] * len(pos) ** 2,
    )
    assert mask.dense is not None
    return mask.dense


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttnMask) -> torch.Tensor:
    """q (b, heads, q, hd); k, v (b, kv_heads, kv, hd) -> (b, heads, q, hd)."""
    if mask.stand_in:
        return _stand_in(q, k, v, mask)
    if mask.kind == "causal":
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    if mask.kind == "dense":
        # K/V heads expanded here: with a mask, `enable_gqa` sends CUDA's SDPA to the math
        # kernel (an s x s score matrix per head); expanded, the memory-efficient one runs.
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask.dense)
    return _flex(q.device)(q, k, v, block_mask=mask.block, enable_gqa=True)


def _stand_in(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: AttnMask) -> torch.Tensor:
    """The GPU kernel `attend` calls for `mask`, as `train/gpu_kernels.py`'s stand-in: what
    it returns and keeps for backward (the block mask stays alive with `mask`)."""
    from torch._subclasses.fake_tensor import is_fake

    from blackwell_sm.train.gpu_kernels import attention

    if mask.kind == "causal":
        return attention(q, k, v, None, True)[0]
    if mask.kind == "dense":  # as on the GPU: K/V expanded, the memory-efficient kernel, which
        # keeps the mask as an additive one in q's dtype
        rep = q.shape[1] // k.shape[1]
        k, v = k.repeat_interleave(rep, dim=1), v.repeat_interleave(rep, dim=1)
        assert mask.dense is not None
        bias = torch.zeros(mask.dense.shape, dtype=q.dtype, device=q.device)
        return attention(q, k, v, bias.masked_fill(~mask.dense, float("-inf")), False)[0]
    if not is_fake(q):
        raise NotImplementedError("the block mask's stand-in runs on fake tensors only")
    return attention(q, k, v, None, False)[0]


_COMPILED_FLEX: list[Any] = []


def _flex(device: torch.device):
    """FlexAttention: compiled on CUDA (its eager form materialises the scores), eager on CPU
    (tests: torch 2.13 runs it there with a warning)."""
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    if device.type != "cuda":
        warnings.filterwarnings("ignore", message=".*flex_attention.*", category=UserWarning)
        return flex_attention
    if not _COMPILED_FLEX:
        _COMPILED_FLEX.append(torch.compile(flex_attention, dynamic=False))
    return _COMPILED_FLEX[0]


def _block_ranges(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-block (min, max) along the last dim of `x`, padded to whole blocks with its edge."""
    n = x.shape[-1]
    pad = -n % BLOCK
    if pad:
        x = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], pad)], dim=-1)
    blocks = x.reshape(*x.shape[:-1], -1, BLOCK)
    return blocks.amin(-1), blocks.amax(-1)


def block_mask(
    q_pos: torch.Tensor,
    kv_pos: torch.Tensor,
    docs_q: torch.Tensor | None,
    docs_kv: torch.Tensor | None,
):
    """FlexAttention's BlockMask for the rule, from per-block ranges (no q x kv tensor).

    A (query block, key block) pair is empty when every key comes after every query or their
    document ranges do not meet; full when every key precedes every query and both blocks lie in
    one and the same document; partial otherwise (the mask_mod decides per element). Exact for
    positions that increase inside a block and documents that do not decrease with position, as
    the loader's and context parallelism's layouts are. Blocks cut by the end are never full.
    """
    from torch.nn.attention.flex_attention import BlockMask

    b = 1 if docs_q is None else docs_q.shape[0]
    nq, nkv = len(q_pos), len(kv_pos)
    qlo, qhi = _block_ranges(q_pos)
    klo, khi = _block_ranges(kv_pos)
    any_seen = klo[None, :] <= qhi[:, None]  # (QB, KB)
    all_seen = khi[None, :] <= qlo[:, None]
    if docs_q is not None and docs_kv is not None:
        dqlo, dqhi = _block_ranges(docs_q)  # (b, QB)
        dklo, dkhi = _block_ranges(docs_kv)
        meet = (dklo[:, None, :] <= dqhi[:, :, None]) & (dqlo[:, :, None] <= dkhi[:, None, :])
        one_doc = (dqlo == dqhi)[:, :, None] & (dklo == dkhi)[:, None, :]
        one_doc = one_doc & (dqlo[:, :, None] == dklo[:, None, :])
        any_seen, all_seen = any_seen[None] & meet, all_seen[None] & one_doc
    else:
        any_seen, all_seen = any_seen[None], all_seen[None]
    whole_q = torch.arange(qlo.shape[0], device=q_pos.device) < nq // BLOCK
    whole_kv = torch.arange(klo.shape[0], device=q_pos.device) < nkv // BLOCK
    full = all_seen & whole_q[None, :, None] & whole_kv[None, None, :]
    partial = any_seen & ~full
    full, partial = full.expand(b, -1, -1), partial.expand(b, -1, -1)

    # Lookups padded to whole blocks: the kernel may evaluate the mask past the ends.
    pad_q, pad_kv = -nq % BLOCK, -nkv % BLOCK
    qp = F.pad(q_pos, (0, pad_q), value=-1)
    kp = F.pad(kv_pos, (0, pad_kv), value=torch.iinfo(kv_pos.dtype).max)
    dq = None if docs_q is None else F.pad(docs_q, (0, pad_q), value=-1)
    dk = None if docs_kv is None else F.pad(docs_kv, (0, pad_kv), value=-2)

    def mask_mod(bi, h, qi, ki):
        seen = kp[ki] <= qp[qi]
        if dq is None or dk is None:
            return seen
        return seen & (dq[bi, qi] == dk[bi, ki])

    def indices(blocks: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = blocks.sum(-1, dtype=torch.int32)[:, None]  # (b, 1, QB)
        order = torch.argsort(blocks.to(torch.int8), dim=-1, descending=True, stable=True)
        return counts, order.to(torch.int32)[:, None]

    kv_num, kv_idx = indices(partial)
    full_num, full_idx = indices(full)
    return BlockMask.from_kv_blocks(
        kv_num,
        kv_idx,
        full_num,
        full_idx,
        BLOCK_SIZE=BLOCK,
        mask_mod=mask_mod,
        seq_lengths=(nq, nkv),
    )
