"""The trace's GPU form (train/gpu_form.py, train/gpu_kernels.py): each kernel's stand-in computes
what the real op does and keeps for backward what the GPU kernel keeps, so PyTorch's memory
tracker books the GPU's bytes; small real tensors on the CPU, no process group."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from blackwell_sm.train import gpu_kernels  # noqa: E402
from blackwell_sm.train.gpu_form import FusedRMSNorm, use_gpu_form  # noqa: E402


def _saved(fn, *args):
    """(result, [(shape, dtype) of every tensor autograd keeps]) of `fn(*args)`."""
    saved = []

    def pack(t):
        saved.append((tuple(t.shape), t.dtype))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    return out, saved


def _qkv(kv_heads: int, dtype=torch.float32):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 4, 128, 64, generator=g, dtype=dtype).requires_grad_()
    k = torch.randn(2, kv_heads, 128, 64, generator=g, dtype=dtype).requires_grad_()
    v = torch.randn(2, kv_heads, 128, 64, generator=g, dtype=dtype).requires_grad_()
    return q, k, v


@pytest.mark.parametrize("masked", [False, True])
def test_the_attention_stand_in_is_attention_with_grouped_heads(masked):
    q, k, v = _qkv(kv_heads=2)
    mask = None
    if masked:
        mask = torch.rand(2, 1, 128, 128, generator=torch.Generator().manual_seed(1)) > 0.3
        mask[..., 0] = True
    out = gpu_kernels.attention(q, k, v, mask, not masked)[0]
    ref = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=not masked, enable_gqa=True
    )
    g = torch.randn_like(out)
    ours, theirs = torch.autograd.grad(out, (q, k, v), g), torch.autograd.grad(ref, (q, k, v), g)
    assert torch.allclose(out, ref, atol=1e-5)
    for a, b in zip(ours, theirs, strict=True):
        assert torch.allclose(a, b, atol=1e-4)


def test_the_attention_stand_in_books_what_sdpa_books():
    """Equal heads (where the CPU runs SDPA's flash kernel): the memory tracker's peak over
    forward and backward is SDPA's to the byte; with grouped K/V it keeps them unexpanded, the
    output and an fp32 logsumexp per query and head, as the GPU kernels do."""
    from torch.distributed._tools.mem_tracker import MemTracker

    def peak(fn):
        q, k, v = _qkv(kv_heads=4, dtype=torch.bfloat16)
        mt = MemTracker()
        with mt:
            fn(q, k, v).sum().backward()
        return mt.get_tracker_snapshot("peak")[torch.device("cpu")]["Total"]

    ours = peak(lambda q, k, v: gpu_kernels.attention(q, k, v, None, True)[0])
    sdpa = peak(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert ours == sdpa > 0
    q, k, v = _qkv(kv_heads=1, dtype=torch.bfloat16)
    (out, lse), saved = _saved(gpu_kernels.attention, q, k, v, None, True)
    assert sorted(saved, key=str) == sorted(
        [(tuple(t.shape), t.dtype) for t in (q, k, v, out, lse)], key=str
    )
    assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
    assert out.transpose(1, 2).is_contiguous()  # o_proj's reshape is a view, as on CUDA


def test_the_norm_stand_in_keeps_its_input_and_an_fp32_rstd():
    torch.manual_seed(0)
    norm = torch.nn.RMSNorm(64, eps=1e-5)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5)
    x = torch.randn(3, 5, 64, requires_grad=True)
    g = torch.randn(3, 5, 64)
    ref = norm(x)
    ref_grads = torch.autograd.grad(ref, (x, norm.weight), g)
    norm.__class__ = FusedRMSNorm
    out, saved = _saved(norm, x)
    assert torch.allclose(out, ref, atol=1e-6)
    for a, b in zip(torch.autograd.grad(out, (x, norm.weight), g), ref_grads, strict=True):
        assert torch.allclose(a, b, atol=1e-5)
    assert sorted(saved, key=str) == sorted(
        [((3, 5, 64), torch.float32), ((64,), torch.float32), ((3, 5, 1), torch.float32)], key=str
    )


def test_the_loss_stand_in_is_cross_entropy():
    torch.manual_seed(0)
    x, w = torch.randn(10, 16, requires_grad=True), torch.randn(50, 16, requires_grad=True)
    t = torch.randint(0, 50, (10,))
    t[3] = -100
    ours = gpu_kernels.linear_cross_entropy(x, w, t).sum()
    ref = F.cross_entropy(x @ w.T, t, reduction="sum")
    assert torch.allclose(ours, ref, atol=1e-4)
    for a, b in zip(
        torch.autograd.grad(ours, (x, w)), torch.autograd.grad(ref, (x, w)), strict=True
    ):
        assert torch.allclose(a, b, atol=1e-5)


def test_use_gpu_form_swaps_every_norm_and_sets_the_kernel_form():
    from blackwell_sm.spec.presets import PRESETS
    from blackwell_sm.train.model import Transformer

    with torch.device("meta"):
        model = Transformer(PRESETS["tiny"], max_seq_len=64)
    use_gpu_form(model)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.RMSNorm)]
    assert norms and all(type(m) is FusedRMSNorm for m in norms)
    assert model.kernel_form == "cuda"
