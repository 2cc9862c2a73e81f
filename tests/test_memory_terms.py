"""planner/memory.py term by term, each restated here from its docstring for llama-3.1-8b (h 4096,
kv 1024, f 14,336, 32 heads, 32 blocks, V 128,256): a change to any one term fails a test of its
own, not only the 70B near-limit one. Byte widths are literals (they are the dtypes'); fitted
constants (fragmentation, runtime) are read from planner/calibration.py so a
refit does not fail these."""

from __future__ import annotations

from typing import Any

import pytest

from blackwell_sm.planner import calibration as C
from blackwell_sm.planner import memory as M
from blackwell_sm.planner.shape import shape
from blackwell_sm.spec import PRESETS
from blackwell_sm.spec.long_context import chunked_loss_bytes

GIB = 1024**3
m = shape(PRESETS["llama-3.1-8b"])
H, KV, F, NH, L, V = 4096, 1024, 14_336, 32, 32, 128_256
P, PER_LAYER, LIN = m.n_params, m.params_per_layer, m.linear_params
ROOT = P - L * PER_LAYER  # embedding, final norm, head
NORM_FUSED = 2 * H + 4  # bf16 input + fp32 rstd per token
NORM_CPU = 8 * H + 4  # fp32 input and normalised tensor + rstd
ATTN = 2 * H + 4 * NH  # attention output + fp32 logsumexp per head
SWIGLU_NONE = 3 * 2 * F  # gate, up, SiLU(gate)
# Per token: none keeps both norms' saves, each distinct matmul input (qkv's, gate/up's, down's),
# RoPE'd q/k and v, the attention, SwiGLU; selective every matmul output; selective-op q, v,
# gate and down's; full the block input.
PER_TOKEN = {
    ("none", True): 2 * NORM_FUSED + 2 * (H + H + F) + 2 * (H + 2 * KV) + ATTN + SWIGLU_NONE,
    ("none", False): 2 * NORM_CPU + 2 * (H + H + F) + 2 * (H + 2 * KV) + ATTN + SWIGLU_NONE,
    ("selective", True): 2 * H + ATTN + 2 * (H + KV + KV + H + F + F + H),
    ("selective-op", True): 2 * H + ATTN + 2 * (H + KV + F + H),
    ("full", True): 2 * H,
}


def test_the_model_is_the_one_restated():
    assert (m.d_model, m.kv_dim, m.ffn_dim, m.spec.n_heads, m.n_layers) == (H, KV, F, NH, L)
    assert (m.vocab_size, m.spec.q_dim, LIN, PER_LAYER - LIN) == (V, H, 218_103_808, 2 * H)


@pytest.mark.parametrize("n", [1, 8, 16, 64])
def test_states_are_fp32_params_grads_and_two_adam_moments_sharded(n):
    assert M.state_bytes(m, n) == pytest.approx((4 * P / n, 4 * P / n, 8 * P / n))


@pytest.mark.parametrize("precision,width", [("bf16", 2), ("fp8", 1), ("mxfp8", 2)])
@pytest.mark.parametrize("reshard,blocks", [(True, 2), (False, L)])
def test_gathered_params_are_the_live_blocks_and_the_bf16_root(precision, width, reshard, blocks):
    block = LIN * width + (PER_LAYER - LIN) * 2  # norms stay bf16
    assert M.gathered_param_bytes(m, precision, reshard) == blocks * block + ROOT * 2


def test_gradient_transients_are_the_head_and_one_block_beyond_its_saved_activations():
    head = V * H * 2
    assert M.head_grad_bytes(m) == head
    block = PER_LAYER * (2 + 4 + 4)  # bf16 grad, fp32 reduce-scatter input, one in flight
    assert M.grad_transient_bytes(m) == head + block
    assert M.grad_transient_bytes(m, 1e9) == head + block - 1e9
    assert M.grad_transient_bytes(m, 1e12) == head  # never below the head's


@pytest.mark.parametrize("mode,fused", list(PER_TOKEN))
@pytest.mark.parametrize("b,s", [(1, 4096), (2, 8192)])
def test_activations_per_block_per_mode(mode, fused, b, s):
    got = M.activation_bytes_per_block(m, b, s, mode, fused_norm=fused)
    assert got == b * s * PER_TOKEN[mode, fused]


@pytest.mark.parametrize("fused", [True, False])
def test_outside_the_blocks_token_ids_final_norm_and_head_input(fused):
    norm = 2 if fused else 8
    assert M.outside_block_activation_bytes(m, 2, 1024, fused_norm=fused) == 2 * 1024 * (
        8 + norm * H + 4 + 2 * H
    )
    outside = 2 * 1024 * (8 + norm * H + 4 + 2 * H)
    saved = M.saved_activation_bytes(m, 2, 1024, "full", fused_norm=fused)
    assert saved == L * 2 * 1024 * 2 * H + outside


@pytest.mark.parametrize("mode", ["none", "selective", "selective-op", "full"])
def test_the_activation_term_adds_backwards_working_set_and_the_recompute(mode):
    b, s = 2, 4096
    saved = L * b * s * PER_TOKEN[mode, True] + b * s * (8 + 2 * H + 4 + 2 * H)
    work = b * s * 2 * (F + H)  # the gradient flowing in and the MLP's widest
    if mode != "none":  # the recomputed block re-creates what "none" keeps
        work += b * s * (PER_TOKEN["none", True] - PER_TOKEN[mode, True])
    # No compile factor: the printed figure is the eager form the trace checks.
    assert M.activation_bytes(m, b, s, mode) == pytest.approx(saved + work, rel=1e-12)


def test_the_loss_term_full_logits_chunked_and_compiled():
    t = 2 * 4096
    assert M.logits_and_loss_bytes(m, 2, 4096) == t * V * 12  # fp32 logits, softmax, grad
    assert M.logits_and_loss_bytes(m, 2, 4096, compiled_loss=True) == t * V * 4
    for kind in ("cuda", "cpu"):
        got = M.logits_and_loss_bytes(m, 2, 4096, loss_impl="chunked", kind=kind)
        assert got == chunked_loss_bytes(V, H, t, kind=kind)
        assert kind == "cpu" or got < t * V * 4  # on the GPU never the whole logits


def test_context_parallelism_holds_the_whole_sequences_keys_and_values():
    b, s = 1, 65_536
    kv = b * s * 2 * KV * 2
    assert M.context_parallel_bytes(m, b, s, 1, "none") == 0
    assert M.context_parallel_bytes(m, b, s, 4, "none") == L * kv * 3 / 4
    assert M.context_parallel_bytes(m, b, s, 4, "selective") == 2 * kv


def test_the_attention_mask_causal_dense_and_block():
    mask = M.attention_mask_bytes
    assert mask(m, 2, 4096, "full", packed=False, cp_degree=1, kind="cuda") == 0
    # dense (2 x 4096 x 4096 <= 2**26): one bool mask per row, saved once with checkpointing
    assert mask(m, 2, 4096, "full", packed=True, cp_degree=1, kind="cuda") == 2 * 4096 * 4096
    # without checkpointing each block keeps a bf16 copy and the K/V expanded to all heads
    per = 2 * 4096 * 4096
    grow = 2 * 2 * (H - KV) * 2 * 4096
    assert mask(m, 2, 4096, "none", packed=True, cp_degree=1, kind="cuda") == L * (2 * per + grow)
    # unpacked under context parallelism: one mask (q = s / cp) shared by the rows
    assert mask(m, 2, 4096, "full", packed=False, cp_degree=2, kind="cuda") == 2048 * 4096
    # block (past 2**26 elements): 4 int32 tables of q/128 x (1 + kv/128) per row
    s = 32_768
    want = 2 * 2 * 4 * (s // 128) * (1 + s // 128)
    assert mask(m, 2, s, "full", packed=True, cp_degree=1, kind="cuda") == want
    assert mask(m, 1, s, "full", packed=True, cp_degree=1, kind="cpu") == s * s  # CPU: dense


def test_low_precision_extras_are_transposed_weight_copies_of_the_live_blocks():
    assert M.fp8_extra_bytes(m, "bf16") == 0
    assert M.fp8_extra_bytes(m, "fp8") == 2 * LIN * 1
    assert M.fp8_extra_bytes(m, "mxfp8") == 2 * LIN * 2


def test_overhead_is_the_runtime_plus_fragmentation_of_the_dynamic_memory():
    cpu = M.overhead_bytes("cpu", 10 * GIB, 0)
    assert cpu == pytest.approx((C.CPU_RUNTIME_GIB * GIB, C.FRAGMENTATION * 10 * GIB))
    cuda = M.overhead_bytes("cuda", 10 * GIB, 2, fragmentation=0.2)
    assert cuda == pytest.approx(((C.CUDA_CONTEXT_GIB + 2 * C.NCCL_GIB_PER_GROUP) * GIB, 2 * GIB))


KNOBS: dict[str, Any] = {
    **dict(shard_degree=8, replicate_degree=2, micro_batch=2, seq_len=4096, precision="fp8"),
    **dict(mode="selective", reshard_after_forward=True, kind="cuda", grad_accum=1),
}


@pytest.mark.parametrize("accum", [1, 4])
def test_each_phase_counts_what_is_alive_then(accum):
    """The phases of `phase_terms`, restated from the leaf terms pinned above."""
    k = {**KNOBS, "grad_accum": accum}
    got = M.phase_terms(m, **k)
    assert tuple(got) == M.PHASES
    params, grads, optim = M.state_bytes(m, 8)
    root = ROOT * 2
    block = (M.gathered_param_bytes(m, "fp8", False) - root) / L
    acts = M.activation_bytes(m, 2, 4096, "selective")
    saved = M.saved_activation_bytes(m, 2, 4096, "selective")
    per_block = M.activation_bytes_per_block(m, 2, 4096, "selective")
    first = M.outside_block_activation_bytes(m, 2, 4096) + per_block
    gt = M.grad_transient_bytes(m, per_block)
    acc = grads if accum > 1 else 0.0
    late = grads if accum > 1 else grads - ROOT * 4 / 8
    logits = M.logits_and_loss_bytes(m, 2, 4096)
    lowp = M.fp8_extra_bytes(m, "fp8")
    runtime = (C.CUDA_CONTEXT_GIB + 2 * C.NCCL_GIB_PER_GROUP) * GIB  # shard and replicate groups
    want = {
        "loss": (acc, root + block, M.head_grad_bytes(m), saved, logits),
        "backward": (acc, root + 2 * block, gt, acts, 0.0),
        "backward end": (late, root + 2 * block, gt, first + acts - saved, 0.0),
    }
    for phase, (sharded, gathered, grad_t, act, loss) in want.items():
        t = got[phase]
        assert (t.params_fp32, t.optimizer_states, t.fp8_extras) == (params, optim, lowp), phase
        assert t.grads_fp32 == pytest.approx(sharded), phase
        assert t.params_unsharded == pytest.approx(gathered), phase
        assert t.grads_unsharded == pytest.approx(grad_t), phase
        assert t.activations == pytest.approx(act), phase
        assert t.logits_and_loss == loss, phase
        frag = C.FRAGMENTATION * (act + loss + grad_t)
        assert (t.runtime, t.overhead) == pytest.approx((runtime, runtime + frag)), phase
    opt = got["optimizer"]
    assert opt[:9] == pytest.approx((params, grads, optim, 0, 0, 0, 0, 0, runtime))
    assert M.memory_terms(m, **k) == max(got.values(), key=lambda t: t.total)


def test_the_phases_add_the_mask_once_and_context_parallel_keys_by_mode():
    base: dict[str, Any] = {**KNOBS, "precision": "bf16", "seq_len": 8192, "micro_batch": 1}
    plain = M.phase_terms(m, **base)
    packed = M.phase_terms(m, **base, packed=True)
    mask = M.attention_mask_bytes(m, 1, 8192, "selective", packed=True, cp_degree=1, kind="cuda")
    for phase in ("loss", "backward", "backward end"):
        assert packed[phase].activations - plain[phase].activations == pytest.approx(mask)
    cp = {**base, "cp_degree": 2}
    for mode in ("none", "full"):
        with_cp = M.phase_terms(m, **{**cp, "mode": mode})
        local = M.phase_terms(m, **{**base, "seq_len": 4096, "mode": mode})
        extra = M.context_parallel_bytes(m, 1, 8192, 2, mode)
        extra += M.attention_mask_bytes(m, 1, 8192, mode, packed=False, cp_degree=2, kind="cuda")
        got = with_cp["backward"].activations - local["backward"].activations
        assert got == pytest.approx(extra), mode
        nccl = with_cp["backward"].runtime - local["backward"].runtime
        assert nccl == pytest.approx(C.NCCL_GIB_PER_GROUP * GIB)  # its own process group
        # keys kept by every block count in the loss phase too; a recomputed block's do not
        loss = with_cp["loss"].activations - local["loss"].activations
        kept = M.context_parallel_bytes(m, 1, 8192, 2, mode) if mode == "none" else 0.0
        assert loss == pytest.approx(extra - M.context_parallel_bytes(m, 1, 8192, 2, mode) + kept)
