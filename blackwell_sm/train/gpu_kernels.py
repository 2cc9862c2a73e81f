"""The GPU's fused kernels (attention, RMSNorm) as ops of our own: the trace's GPU form on any device.

On a GPU, attention is a fused kernel (SDPA's flash or memory-efficient one, or compiled
FlexAttention) that returns its output and the fp32 logsumexp (b, heads, q) and keeps for
backward q, k and v (grouped-query K/V unexpanded), the output and the logsumexp; its backward
returns dq, dk and dv. On the CPU none of these can be traced: torch refuses FlexAttention's
backward there, eager FlexAttention compiles internally (no frame under the memory tracker) and
the tracker has no rule for the `flex_attention` higher-order op. `bsm::attention` is that
kernel's stand-in, a `torch.library` custom op: its fake kernel allocates exactly the outputs,
its autograd formula saves exactly those tensors, so `FSDPMemTracker` counts what the GPU holds.
Its real kernel (real CPU tensors, small sizes: the tests) is PyTorch's CPU flash attention, so
the stand-in computes true attention and its bytes can be held against plain SDPA's.

The fused RMSNorm likewise (`bsm::rms_norm`): CUDA's `_fused_rms_norm` keeps its input and an
fp32 rstd per row, where the CPU's composite of the same name keeps fp32 copies.

The block mask's metadata (FlexAttention's `BlockMask`: block counts and indices) is built by
`train/attention.py` as on the GPU and stays alive through the step like the kernel's inputs.
"""

from __future__ import annotations

import torch

_LIB = "bsm"


def _additive(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor | None:
    """A boolean mask as the CPU kernel takes it: 0 where seen, -inf elsewhere, q's dtype (an
    additive mask as it is)."""
    if mask is None or mask.dtype != torch.bool:
        return mask
    return torch.zeros(mask.shape, dtype=like.dtype).masked_fill(~mask, float("-inf"))


def _expand(k: torch.Tensor, heads: int) -> torch.Tensor:
    """K or V (b, kv_heads, kv, hd) repeated to `heads` query heads (the real kernel's GQA)."""
    return k.repeat_interleave(heads // k.shape[1], dim=1)


@torch.library.custom_op(f"{_LIB}::attention", mutates_args=())
def attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor | None, is_causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (b, heads, q, hd), logsumexp (b, heads, q) fp32); k, v (b, kv_heads, kv, hd);
    `mask`: a (b | 1, 1, q, kv) mask, boolean or additive, or None."""
    out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
        q,
        _expand(k, q.shape[1]),
        _expand(v, q.shape[1]),
        is_causal=is_causal,
        attn_mask=_additive(mask, q),
    )
    return _out_like(q).copy_(out), lse.float().contiguous()


def _out_like(q: torch.Tensor) -> torch.Tensor:
    """The output as CUDA's kernels lay it out: (b, q, heads, hd) in memory, seen as (b, heads,
    q, hd), so the model's transpose back before o_proj is a view, not a copy."""
    b, h, s, d = q.shape
    return q.new_empty((b, s, h, d)).transpose(1, 2)


@attention.register_fake
def _attention_fake(q, k, v, mask, is_causal):
    b, h, s, _ = q.shape
    return _out_like(q), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::attention_backward", mutates_args=())
def attention_backward(
    grad: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    mask: torch.Tensor | None,
    is_causal: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv), dk and dv at K/V's own head count (summed over each group)."""
    h, g = q.shape[1], q.shape[1] // k.shape[1]
    dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
        grad.contiguous(),
        q,
        _expand(k, h),
        _expand(v, h),
        out,
        lse,
        0.0,
        is_causal,
        attn_mask=_additive(mask, q),
    )

    def fold(x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(1, (k.shape[1], g)).sum(2)

    return dq, fold(dk), fold(dv)


@attention_backward.register_fake
def _attention_backward_fake(grad, q, k, v, out, lse, mask, is_causal):
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)


def _setup(ctx, inputs, output) -> None:
    q, k, v, mask, is_causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, mask)
    ctx.is_causal = is_causal
    ctx.set_materialize_grads(False)  # no zeros for the logsumexp's gradient (the GPU has none)


def _backward(ctx, grad_out: torch.Tensor, _grad_lse: torch.Tensor | None):
    q, k, v, out, lse, mask = ctx.saved_tensors
    dq, dk, dv = attention_backward(grad_out, q, k, v, out, lse, mask, ctx.is_causal)
    return dq, dk, dv, None, None


attention.register_autograd(_backward, setup_context=_setup)

#: The op (its OpOverload), for checkpointing policies that keep the attention's outputs.
ATTENTION_OP = torch.ops.bsm.attention.default


# --- the fused RMSNorm --------------------------------------------------------------------------
# CUDA's `aten._fused_rms_norm` keeps its input and an fp32 rstd per row; on the CPU the same op
# is a composite that keeps fp32 copies, so the GPU form needs its own op here too.


@torch.library.custom_op(f"{_LIB}::rms_norm", mutates_args=())
def rms_norm(
    x: torch.Tensor, weight: torch.Tensor | None, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """(y in x's dtype, rstd (..., 1) fp32) over the last dimension."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    y = xf * rstd
    if weight is not None:
        y = y * weight.float()
    return y.to(x.dtype), rstd


@rms_norm.register_fake
def _rms_norm_fake(x, weight, eps):
    return torch.empty_like(x), x.new_empty((*x.shape[:-1], 1), dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::rms_norm_backward", mutates_args=())
def rms_norm_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor | None, rstd: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of `rms_norm` (dweight empty when there is no weight)."""
    xf, gf = x.float(), grad.float()
    w = weight.float() if weight is not None else torch.ones(x.shape[-1])
    gw = gf * w
    dx = rstd * (gw - xf * rstd.pow(2) * (gw * xf).mean(-1, keepdim=True))
    dw = (gf * xf * rstd).reshape(-1, x.shape[-1]).sum(0)
    return dx.to(x.dtype), dw.to(w.dtype if weight is None else weight.dtype)


@rms_norm_backward.register_fake
def _rms_norm_backward_fake(grad, x, weight, rstd):
    dw = x.new_empty((x.shape[-1],)) if weight is None else torch.empty_like(weight)
    return torch.empty_like(x), dw


def _norm_setup(ctx, inputs, output) -> None:
    x, weight, _eps = inputs
    ctx.save_for_backward(x, weight, output[1])
    ctx.set_materialize_grads(False)  # no zeros for rstd's gradient


def _norm_backward(ctx, grad: torch.Tensor, _grad_rstd: torch.Tensor | None):
    x, weight, rstd = ctx.saved_tensors
    dx, dw = rms_norm_backward(grad, x, weight, rstd)
    return dx, (dw if weight is not None else None), None


rms_norm.register_autograd(_norm_backward, setup_context=_norm_setup)


# --- the chunked loss under CUDA's policy -------------------------------------------------------
# `linear_cross_entropy`'s chunked path picks its buffers by device (`acc_policy="compact"` on
# CUDA: no (vocab x d) fp32 scratch; the CPU allocates one and an fp32 copy of the weight), and
# its backward is Python the tracker follows. The stand-in is one op whose forward keeps the
# head's input and its targets and returns per-token fp32 losses, and whose backward returns the
# input's and the weight's gradients; the kernel's per-chunk buffers live inside the op, as
# inside CUDA's (`long_context.chunked_loss_bytes`, the planner's, counts them).


@torch.library.custom_op(f"{_LIB}::linear_cross_entropy", mutates_args=())
def linear_cross_entropy(
    x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor
) -> torch.Tensor:
    """Per-token fp32 cross-entropy of x (n, d) @ weight.T (v, d) against `target` (n,);
    0 where the target is -100."""
    logits = (x.float() @ weight.float().T).log_softmax(-1)
    keep = target != -100
    picked = logits.gather(1, target.clamp_min(0)[:, None])[:, 0]
    return torch.where(keep, -picked, 0.0)


@linear_cross_entropy.register_fake
def _lce_fake(x, weight, target):
    return x.new_empty((x.shape[0],), dtype=torch.float32)


@torch.library.custom_op(f"{_LIB}::linear_cross_entropy_backward", mutates_args=())
def linear_cross_entropy_backward(
    grad: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, target: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """(dx, dweight) of `linear_cross_entropy` for the per-token upstream gradient `grad`."""
    p = (x.float() @ weight.float().T).softmax(-1)
    keep = target != -100
    p[torch.arange(len(target)), target.clamp_min(0)] -= 1.0
    d = p * (grad.float() * keep)[:, None]
    return (d @ weight.float()).to(x.dtype), (d.T @ x.float()).to(weight.dtype)


@linear_cross_entropy_backward.register_fake
def _lce_backward_fake(grad, x, weight, target):
    return torch.empty_like(x), torch.empty_like(weight)


def _lce_setup(ctx, inputs, output) -> None:
    x, weight, target = inputs
    ctx.save_for_backward(x, weight, target)


def _lce_backward(ctx, grad: torch.Tensor):
    x, weight, target = ctx.saved_tensors
    dx, dw = linear_cross_entropy_backward(grad, x, weight, target)
    return dx, dw, None


linear_cross_entropy.register_autograd(_lce_backward, setup_context=_lce_setup)
