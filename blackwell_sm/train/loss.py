"""The training loss: summed token cross-entropy over the targets that count.

Pretraining counts every target. Fine-tuning data (shard format v2) carries a per-token loss mask
(prompt tokens 0, completion tokens 1) and packed samples' document ids: a target counts when its
mask is set and it belongs to the same sample as its input (a sample's first token is never
predicted from the previous sample's last). The loop divides the sum by the counted targets of the
whole step on all ranks, so every counted token weighs the same however samples are packed and
batches are cut.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def target_weights(
    tokens: torch.Tensor, loss_mask: torch.Tensor | None, doc_ids: torch.Tensor | None
) -> torch.Tensor | None:
    """(batch, seq) 0/1 weights of the targets tokens[:, 1:], or None when every target counts."""
    if loss_mask is None and doc_ids is None:
        return None
    w = torch.ones_like(tokens[:, 1:], dtype=torch.float32)
    if loss_mask is not None:
        w = w * loss_mask[:, 1:].to(torch.float32)
    if doc_ids is not None:
        w = w * (doc_ids[:, 1:] == doc_ids[:, :-1]).to(torch.float32)
    return w


def counted_targets(
    tokens: torch.Tensor, loss_mask: torch.Tensor | None, doc_ids: torch.Tensor | None
) -> float:
    """How many targets of `tokens` count toward the loss."""
    w = target_weights(tokens, loss_mask, doc_ids)
    return float(tokens[:, 1:].numel()) if w is None else float(w.sum())


def loss_sum(
    model: nn.Module,
    tokens: torch.Tensor,
    loss_mask: torch.Tensor | None = None,
    doc_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Summed cross-entropy of the counted targets of `tokens` (batch, seq + 1)."""
    docs = None if doc_ids is None else doc_ids[:, :-1]
    logits = model(tokens[:, :-1]) if docs is None else model(tokens[:, :-1], doc_ids=docs)
    v = logits.shape[-1]
    w = target_weights(tokens, loss_mask, doc_ids)
    ce = F.cross_entropy(
        logits.float().reshape(-1, v),
        tokens[:, 1:].reshape(-1),
        reduction="sum" if w is None else "none",
    )
    return ce if w is None else (ce * w.reshape(-1)).sum()
