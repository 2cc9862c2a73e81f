"""Long context (issue 23) on CPU: the chunked loss against the plain one, the attention masks'
three forms against each other, context parallelism's layout, and (2 gloo processes) the chunked
loss with an FSDP2-sharded head and context parallelism against the unsharded model.

Tolerances: fp32, 1e-6 relative (loss and every gradient; measured 2-3e-7). bf16 (the loop's
compute), the chunked path against the plain bf16 one: loss 2**-9 relative, the bound of bf16's
rounding of each per-token loss (they are bf16, summed in fp32; measured 1.2e-4 over 80 counted
tokens, 4e-6 over 2,048); gradients 1e-2 relative in norm (measured 0.1-0.3 %, the size of bf16's
own rounding: the plain bf16 path is 0.24 % from fp32).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from long_support import SPEC, TIED, equivalence_worker  # noqa: E402
from train_support import spawn  # noqa: E402

from blackwell_sm.spec import long_context as lc  # noqa: E402
from blackwell_sm.train.attention import AttnMask, attend, block_mask, build_mask  # noqa: E402
from blackwell_sm.train.context_parallel import CpGroup  # noqa: E402
from blackwell_sm.train.loss import IGNORE_INDEX, head_loss, loss_sum  # noqa: E402
from blackwell_sm.train.model import Transformer  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
from loss_memory import cpu_peak_bytes  # noqa: E402


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm())


def _loss_and_grads(model: Transformer, impl: str, batch: tuple) -> tuple:
    model.loss_impl = impl
    model.zero_grad(set_to_none=True)
    loss = loss_sum(model, *batch)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


def _packed_batch(spec, b: int, s: int, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, spec.vocab_size, (b, s + 1), generator=g)
    mask = (torch.rand(b, s + 1, generator=g) > 0.3).long()  # fine-tuning: prompts ignored
    docs = torch.cumsum((torch.rand(b, s + 1, generator=g) < 0.1).long(), dim=1)
    return tokens, mask, docs


@pytest.mark.parametrize("spec", [SPEC, TIED], ids=["untied", "tied"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_chunked_loss_equals_the_full_logits_loss(spec, dtype):
    """Through the model (head inside its forward), ignored tokens from a fine-tuning mask and
    packed documents: the chunked loss and every gradient equal the plain path's."""
    model = Transformer(spec, max_seq_len=64)
    model.init_weights(0)
    model.to(getattr(torch, dtype))
    batch = _packed_batch(spec, 2, 64)
    ref_loss, ref_grads = _loss_and_grads(model, "full-logits", batch)
    loss, grads = _loss_and_grads(model, "chunked", batch)
    loss_tol, grad_tol = (1e-6, 1e-6) if dtype == "float32" else (2**-9, 1e-2)
    assert loss.dtype == torch.float32
    assert _rel(loss, ref_loss) < loss_tol
    for g, r in zip(grads, ref_grads, strict=True):
        assert _rel(g, r) < grad_tol


def test_chunked_loss_over_many_chunks_and_ignored_rows():
    """Many chunks, a chunk made only of ignored targets, and the bf16 trap: the sum is fp32."""
    g = torch.Generator().manual_seed(1)
    h0, w0 = torch.randn(700, 48, generator=g), torch.randn(300, 48, generator=g) * 0.1
    t = torch.randint(0, 300, (700,), generator=g)
    t[100:200] = IGNORE_INDEX  # chunk 1 (rows 64..127 of chunk size 64) and more: all ignored
    t[::9] = IGNORE_INDEX
    out = {}
    for impl in ("full-logits", "chunked"):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        loss = head_loss(h, w, t, impl, chunk_rows=64)
        loss.backward()
        out[impl] = (loss.detach(), h.grad, w.grad)
    for a, b in zip(out["chunked"], out["full-logits"], strict=True):
        assert _rel(a, b) < 1e-6
    assert (out["chunked"][1][100:200] == 0).all()  # ignored rows get no gradient


def test_long_context_layout_and_sizes():
    assert lc.loss_chunk_rows(128_256, 131_072) == 1024  # 2**27 logits: 512 MiB in fp32
    assert lc.loss_chunk_rows(151_936, 10) == 10
    assert lc.loss_chunk_rows(10**9, 5) == 1
    a, b = lc.cp_chunks(64, 2, 0)
    assert (list(a), list(b)) == (list(range(0, 16)), list(range(48, 64)))
    held = sorted(p for r in range(4) for chunk in lc.cp_chunks(96, 4, r) for p in chunk)
    assert held == list(range(96))  # every position on exactly one rank
    with pytest.raises(ValueError, match="multiple of 2 x cp_degree"):
        lc.cp_chunks(100, 4, 0)
    assert lc.mask_kind(packed=False, cp_degree=1, micro_batch=1, q_len=9, kv_len=9) == "causal"
    big = dict(packed=True, cp_degree=1, micro_batch=1, q_len=131_072, kv_len=131_072)
    assert lc.mask_kind(**big) == "block"
    assert lc.mask_kind(**big, device="cpu") == "dense"  # FlexAttention has no CPU backward
    assert lc.mask_kind(**{**big, "q_len": 8192, "kv_len": 8192}) == "dense"
    # The planner's term at 128k: the chunked loss holds about 1.3 GiB, the plain one 188 GiB.
    assert lc.loss_bytes("chunked", 128_256, 2048, 131_072) < 1.5 * 2**30
    assert lc.loss_bytes("full-logits", 128_256, 2048, 131_072) / 2**30 == pytest.approx(
        187.9, 1e-3
    )


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_chunked_loss_memory_is_the_planners_term(dtype):
    """Peak bytes of one chunked loss + backward on CPU (the allocator's counter) equal
    `chunked_loss_bytes(kind="cpu")` plus the weight gradient it returns, within 2 %; the
    full-logits peak is 12 bytes per logit."""
    n, d, v, rows = 768, 64, 3000, 128
    size = 4 if dtype == "float32" else 2
    g = torch.Generator().manual_seed(0)
    h = torch.randn(n, d, generator=g).to(getattr(torch, dtype)).requires_grad_()
    w = (torch.randn(v, d, generator=g) * 0.05).to(getattr(torch, dtype)).requires_grad_()
    t = torch.randint(0, v, (n,), generator=g)
    peaks = {}
    for impl in ("chunked", "full-logits"):
        run = lambda impl=impl: head_loss(h, w, t, impl, chunk_rows=rows).backward()  # noqa: E731
        run()  # first-call allocations out of the way
        h.grad = w.grad = None
        peaks[impl] = cpu_peak_bytes(run)[0]
        h.grad = w.grad = None
    want = lc.chunked_loss_bytes(v, d, n, kind="cpu", dtype_bytes=size, rows=rows) + v * d * size
    assert peaks["chunked"] == pytest.approx(want, rel=0.02)
    assert peaks["full-logits"] == pytest.approx(n * v * lc.LOSS_BYTES_PER_LOGIT_FULL, rel=0.02)


def _cp_inputs(seq: int, cp: int, rank: int, b: int = 2, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    group = CpGroup(cp, rank)
    q_pos = group.positions(seq) if cp > 1 else torch.arange(seq)
    kv_pos = group.all_positions(seq) if cp > 1 else torch.arange(seq)
    docs = torch.cumsum((torch.rand(b, seq, generator=g) < 0.004).long(), dim=1)
    return q_pos, kv_pos, docs


@pytest.mark.parametrize("seq, cp, rank", [(512, 1, 0), (1000, 2, 1), (768, 3, 2)])
def test_block_mask_equals_the_dense_mask(seq, cp, rank):
    """FlexAttention's block mask, built from per-block ranges (never q x kv), gives the dense
    mask's attention (forward: torch 2.13 has no FlexAttention backward on CPU), and its blocks
    are sound: every pair the rule allows lies in a listed block, every full block is all
    allowed. Positions of a CP rank's two chunks, keys in gathered order, documents crossing
    block and chunk edges, lengths that are not whole blocks."""
    q_pos, kv_pos, docs = _cp_inputs(seq, cp, rank)
    dense = build_mask(docs, q_pos=q_pos, kv_pos=kv_pos, micro_batch=2, cp_degree=cp)
    assert dense.kind == "dense"
    bm = block_mask(q_pos, kv_pos, docs[:, q_pos], docs[:, kv_pos])
    g = torch.Generator().manual_seed(1)
    q = torch.randn(2, 4, len(q_pos), 16, generator=g)
    k, v = torch.randn(2, 2, seq, 16, generator=g), torch.randn(2, 2, seq, 16, generator=g)
    with torch.no_grad():
        out = attend(q, k, v, AttnMask("block", block=bm))
        ref = attend(q, k, v, dense)
    torch.testing.assert_close(out, ref, atol=2e-6, rtol=1e-5)
    # block soundness against the dense rule
    nq, nk = -(-len(q_pos) // 128), -(-seq // 128)
    rule = torch.zeros(2, nq * 128, nk * 128, dtype=torch.bool)
    rule[:, : len(q_pos), :seq] = dense.dense[:, 0]
    per_block = rule.reshape(2, nq, 128, nk, 128)
    listed = torch.zeros(2, nq, nk, dtype=torch.bool)
    full = torch.zeros(2, nq, nk, dtype=torch.bool)
    for b in range(2):
        for i in range(nq):
            n = int(bm.kv_num_blocks[b, 0, i])
            listed[b, i, bm.kv_indices[b, 0, i, :n].long()] = True
            nf = int(bm.full_kv_num_blocks[b, 0, i])
            full[b, i, bm.full_kv_indices[b, 0, i, :nf].long()] = True
    any_allowed = per_block.any(dim=(2, 4))
    assert not (any_allowed & ~(listed | full)).any()  # nothing allowed is dropped
    assert per_block.all(dim=(2, 4))[full].all()  # full blocks need no mask
    assert not (listed & full).any()


def test_cp_positions_shard_and_gathered_order():
    group = CpGroup(2, 1)
    assert group.positions(8).tolist() == [2, 3, 4, 5]
    assert group.all_positions(8).tolist() == [0, 1, 6, 7, 2, 3, 4, 5]
    x = torch.arange(16).reshape(2, 8)
    assert group.shard(x, 8).tolist() == [[2, 3, 4, 5], [10, 11, 12, 13]]


@pytest.mark.slow
def test_gloo_sharded_head_and_context_parallel_equal_the_unsharded_model(tmp_path):
    """2 processes: the chunked loss with the FSDP2-sharded head (tied and untied) equals the
    unsharded full-logits reference, then context parallelism (cp 2) equals the unsharded model:
    logits at global positions, the loss summed over the CP ranks, every gradient."""
    spawn(equivalence_worker, 1e-6, tmp=tmp_path)


def test_the_long_context_benchmarks_run(capsys):
    """Smoke: both scripts print valid figures on tiny settings (the figures are measurements)."""
    import json

    import long_context_envelope
    import loss_memory

    assert loss_memory.main(["--tokens", "300", "--d-model", "16", "--vocab", "500"]) == 0
    assert long_context_envelope.main(["--only", "llama-3.2-1b"]) == 0
    recs = {r["name"]: r for r in map(json.loads, capsys.readouterr().out.splitlines())}
    assert recs["loss.float32.rel_err.loss"]["ok"] is True
    assert recs["envelope.llama-3.2-1b.no_cp.seq_len"]["value"] == 131072
    assert recs["envelope.stretch.llama-3.1-70b.32768.memory_gib"]["feasible"] is True
