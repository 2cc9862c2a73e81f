"""The training loss: summed token cross-entropy over the targets that count.

Pretraining counts every target. Fine-tuning data (shard format v2) carries a per-token loss mask
(prompt tokens 0, completion tokens 1) and packed samples' document ids: a target counts when its
mask is set and it belongs to the same sample as its input (a sample's first token is never
predicted from the previous sample's last). The loop divides the sum by the counted targets of the
whole step on all ranks, so every counted token weighs the same however samples are packed and
batches are cut.

The head and the loss run inside the model's forward (`Transformer.forward(..., targets=)`):
under FSDP2 the head's weight is gathered only in the root module's pre-forward hooks. Two ways
(`training.loss_impl`):
- `chunked` (the default): PyTorch's `linear_cross_entropy` over chunks of
  `spec.long_context.loss_chunk_rows` rows, so the (tokens x vocab) logits never exist whole.
  It returns per-token losses (`reduction="none"`; its backward recomputes each chunk's logits)
  which are summed here in fp32: its own bf16 `mean`/`sum` accumulate in bf16 (1.3 % off at
  4,096 tokens, docs/training-loop.md).
- `full-logits`: the plain `cross_entropy(linear(h).float())`, 12 bytes per logit; the
  reference the chunked path is tested against, and a way back if a torch change breaks it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from blackwell_sm.spec.long_context import loss_chunk_rows

IGNORE_INDEX = -100  # cross_entropy's and linear_cross_entropy's default


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


def loss_targets(
    tokens: torch.Tensor, loss_mask: torch.Tensor | None, doc_ids: torch.Tensor | None
) -> torch.Tensor:
    """(batch, seq) targets tokens[:, 1:], IGNORE_INDEX where a target does not count."""
    w = target_weights(tokens, loss_mask, doc_ids)
    targets = tokens[:, 1:]
    return targets if w is None else targets.masked_fill(w == 0, IGNORE_INDEX)


def counted_targets(
    tokens: torch.Tensor,
    loss_mask: torch.Tensor | None = None,
    doc_ids: torch.Tensor | None = None,
    cp=None,
) -> float:
    """How many targets of `tokens` count toward the loss (this rank's share under context
    parallelism `cp`, a `train.context_parallel.CpGroup`)."""
    w = target_weights(tokens, loss_mask, doc_ids)
    if w is None:
        w = torch.ones_like(tokens[:, 1:], dtype=torch.float32)
    if cp is not None and cp.degree > 1:
        w = cp.shard(w, w.shape[1])
    return float(w.sum())


def head_loss(
    h: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    impl: str = "chunked",
    *,
    chunk_rows: int | None = None,
    form: str | None = None,
) -> torch.Tensor:
    """fp32 sum of cross_entropy(h @ weight.T, targets) over the targets not IGNORE_INDEX
    (`chunk_rows`: rows per chunk; default `loss_chunk_rows`, the planner's too; `form="cuda"`:
    the chunked loss as CUDA's kernel holds it, on any device: the trace's GPU form,
    train/gpu_kernels.py)."""
    h2, t = h.reshape(-1, h.shape[-1]), targets.reshape(-1)
    if form == "cuda" and impl == "chunked":
        from blackwell_sm.train.gpu_kernels import linear_cross_entropy

        return linear_cross_entropy(h2, weight, t).sum()
    if impl == "full-logits":
        return F.cross_entropy(F.linear(h2, weight).float(), t, reduction="sum")
    if impl != "chunked":
        raise ValueError(f"loss_impl must be chunked or full-logits, not {impl!r}")
    lowp = h2.dtype in (torch.bfloat16, torch.float16)
    options = torch.nn.LinearCrossEntropyOptions(
        batch_chunk_size=chunk_rows or loss_chunk_rows(weight.shape[0], h2.shape[0]),
        chunking_method=None,
        # compact: no (vocab x d) fp32 scratch on CUDA; CPU's only fp32-matmul policy is accurate.
        acc_policy="compact" if h2.is_cuda else "accurate",
        acc_dtype=torch.float32 if lowp else None,  # explicit: a set policy would drop it
    )
    per_token = F.linear_cross_entropy(h2, weight, t, reduction="none", options=options)
    return per_token.float().sum()


def loss_sum(
    model: nn.Module,
    tokens: torch.Tensor,
    loss_mask: torch.Tensor | None = None,
    doc_ids: torch.Tensor | None = None,
) -> torch.Tensor:
    """Summed cross-entropy (fp32) of the counted targets of `tokens` (batch, seq + 1); under
    context parallelism (`model.cp`), of this rank's share of them."""
    inputs, targets = tokens[:, :-1], loss_targets(tokens, loss_mask, doc_ids)
    docs = None if doc_ids is None else doc_ids[:, :-1]
    cp = getattr(model, "cp", None)
    if cp is None or cp.degree == 1:
        return model(inputs, docs, targets=targets)
    s = inputs.shape[1]
    return model(
        cp.shard(inputs, s),
        docs,
        targets=cp.shard(targets, s),
        positions=cp.positions(s, inputs.device),
    )
