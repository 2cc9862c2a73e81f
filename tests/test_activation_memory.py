"""The planner's memory terms against the real model on CPU.

Activations: run `blackwell_sm.train.model.Transformer` (bf16 parameters) forward at a few small
shapes with `apply_activation_checkpointing` in each mode and measure the bytes really kept for
backward, then hold them against `memory.saved_activation_bytes(..., fused_norm=False)` for every
family (llama with and without RoPE scaling, mistral, qwen2's q/k/v biases, qwen3's q/k norms and
head_dim != d_model / n_heads) and every mode, to the byte (torch is pinned: a change here is a
real one). What is measured (unique storages, parameters and the shared RoPE table excluded):
- tensors autograd saves, seen through `torch.autograd.graph.saved_tensors_hooks` — with
  non-reentrant checkpointing these are the checkpoint's own saved inputs (block input, RoPE slice)
  plus everything saved outside the blocks (token ids, final norm, head input);
- for `selective` and `selective-op`, the op outputs the selective-checkpoint policy stores, read
  from the SAC storage of each block's context (they are kept outside autograd's saved tensors).
In the term: the block inputs, saved matmul/attention outputs, norm saves, the final norm and the
head's input. Out of it (other terms): parameters, the recompute working set (`activations` adds
it), logits and the loss (`logits_and_loss`: no loss is computed here, and the head's matmul saves
no output). CPU RMSNorm is the composite kernel (fp32 upcast), hence fused_norm=False.

States: parameter, gradient and AdamW-state bytes of an fp32 model after a real AdamW step equal
`memory.state_bytes(model, 1)` exactly (AdamW's scalar `step` counters are not state bytes).
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from model_support import capture_sac_storages, small_spec  # noqa: E402

from blackwell_sm.planner import memory  # noqa: E402
from blackwell_sm.planner.shape import shape as model_shape  # noqa: E402
from blackwell_sm.train.activation_checkpoint import apply_activation_checkpointing  # noqa: E402
from blackwell_sm.train.model import Transformer  # noqa: E402

LLAMA31 = {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
LLAMA31 |= {"original_max_position_embeddings": 64}
B = dict(d_model=256, n_heads=8, n_kv_heads=8, ffn_dim=704, vocab_size=160)
C = dict(d_model=192, n_heads=6, ffn_dim=512, vocab_size=64)
MISTRAL = dict(n_heads=8, ffn_dim=448, vocab_size=80, rope_theta=1e6)
SHAPES = [
    # (model, micro_batch, seq_len): every family, tied and untied, head_dim != d_model / n_heads.
    (small_spec(name="a", max_seq_len=128), 2, 64),
    (small_spec(name="b", max_seq_len=128, **B), 1, 64),
    (small_spec(name="c", max_seq_len=256, tie_embeddings=True, **C), 3, 96),
    (
        small_spec(name="qwen2", family="qwen2", max_seq_len=128, ffn_dim=352, tie_embeddings=True),
        2,
        64,
    ),
    (small_spec(name="qwen3", family="qwen3", max_seq_len=128, head_dim=64, ffn_dim=384), 2, 64),
    (small_spec(name="mistral", family="mistral", max_seq_len=128, **MISTRAL), 1, 96),
    (small_spec(name="llama31", max_seq_len=256, n_kv_heads=1, rope_scaling=LLAMA31), 2, 64),
]
MODES = ["none", "selective", "selective-op", "full"]


pytestmark = pytest.mark.usefixtures("one_thread")


def _measure_saved_bytes(model: Transformer, tokens, mode: str) -> int:
    """Bytes kept for backward after the forward: autograd-saved tensors + SAC storage."""
    apply_activation_checkpointing(model, mode)
    exclude = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    seen: dict[int, int] = {}

    def note(t) -> None:
        st = t.untyped_storage()
        if st.data_ptr() not in exclude:
            seen[st.data_ptr()] = st.nbytes()

    sac_storages = capture_sac_storages(model) if mode.startswith("selective") else []

    def pack(t):
        note(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        logits = model(tokens)
    for storage in sac_storages:
        for per_op in storage.values():
            for wrapped in per_op.values():
                vals = wrapped if isinstance(wrapped, (tuple, list)) else (wrapped,)
                for w in vals:
                    for v in w if isinstance(w, (tuple, list)) else (w,):
                        val = getattr(v, "val", None)
                        if isinstance(val, torch.Tensor):
                            note(val)
                        elif isinstance(val, (tuple, list)):
                            for x in val:
                                if isinstance(x, torch.Tensor):
                                    note(x)
    if mode.startswith("selective"):
        assert sac_storages, "the selective policy stored nothing: the measurement is broken"
    # Backward must still work on what was kept (the measurement did not disturb the graph).
    logits.float().sum().backward()
    return sum(seen.values())


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", SHAPES, ids=[s[0].name for s in SHAPES])
def test_activation_term_matches_real_model(shape, mode):
    spec, b, s = shape
    torch.manual_seed(0)
    model = Transformer(spec, max_seq_len=s)
    model.init_weights(0)
    model.to(torch.bfloat16)
    tokens = torch.randint(0, spec.vocab_size, (b, s))
    measured = _measure_saved_bytes(model, tokens, mode)
    predicted = memory.saved_activation_bytes(model_shape(spec), b, s, mode, 2, fused_norm=False)
    # Exact: the description counts every tensor the real block keeps (torch is pinned).
    assert predicted == measured, (mode, predicted, measured)


def test_checkpointing_really_saves_less():
    spec, b, s = SHAPES[0]
    model = Transformer(spec, max_seq_len=s)
    model.init_weights(0)
    model.to(torch.bfloat16)
    tokens = torch.randint(0, spec.vocab_size, (b, s))
    got = {m: _measure_saved_bytes(model, tokens, m) for m in MODES}
    assert got["full"] < got["selective-op"] < got["selective"] < got["none"]


@pytest.mark.parametrize("mode", ["selective", "full"])
def test_the_recompute_working_set_is_what_a_recomputed_block_recreates(mode):
    """With checkpointing, backward recomputes one block at a time: its working set grows by
    what that block keeps without checkpointing less what it keeps with it. Measured on the real
    model (saved bytes with mode none, minus with `mode`, per block) and held against the
    `activations` term less the saved bytes, less the same for mode none (the gradient buffers
    every mode has): to the byte. Halving the recompute term fails here."""
    spec, b, s = SHAPES[0]
    measured = {}
    for m in ("none", mode):
        torch.manual_seed(0)
        model = Transformer(spec, max_seq_len=s)
        model.init_weights(0)
        model.to(torch.bfloat16)
        measured[m] = _measure_saved_bytes(model, torch.randint(0, spec.vocab_size, (b, s)), m)
    per_block = (measured["none"] - measured[mode]) / spec.n_layers

    def working_set(m: str) -> float:
        total = memory.activation_bytes(model_shape(spec), b, s, m, dtype_bytes=2, fused_norm=False)
        return total - memory.saved_activation_bytes(
            model_shape(spec), b, s, m, 2, fused_norm=False
        )

    assert per_block > 0
    assert working_set(mode) - working_set("none") == per_block, (mode, per_block)


def test_state_bytes_exact_after_a_real_adamw_step():
    spec = SHAPES[0][0]
    model = Transformer(spec, max_seq_len=32)
    model.init_weights(0)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, foreach=False)
    tokens = torch.randint(0, spec.vocab_size, (2, 32))
    torch.nn.functional.cross_entropy(
        model(tokens).reshape(-1, spec.vocab_size), tokens.reshape(-1)
    ).backward()
    opt.step()
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    grads = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters())
    states = sum(
        v.numel() * v.element_size()
        for st in opt.state.values()
        for k, v in st.items()
        if k in ("exp_avg", "exp_avg_sq")
    )
    assert (params, grads, states) == memory.state_bytes(model_shape(spec), 1)
    # ... and sharding divides each exactly by the shard degree.
    assert memory.state_bytes(model_shape(spec), 4) == tuple(x / 4 for x in (params, grads, states))


@pytest.mark.parametrize("mode", MODES)
def test_document_mask_bytes_match_the_real_model(mode):
    """Packed fine-tuning rows: the block-diagonal mask adds `arch.document_mask_bytes`."""
    from blackwell_sm.spec import arch

    spec, b, s = SHAPES[4]  # qwen3
    model = Transformer(spec, max_seq_len=s)
    model.init_weights(0)
    model.to(torch.bfloat16)
    tokens = torch.randint(0, spec.vocab_size, (b, s))
    docs = (torch.arange(s) // 20).expand(b, s).contiguous()
    plain = _measure_saved_bytes(model, tokens, mode)
    forward = model.forward
    model.forward = lambda x: forward(x, doc_ids=docs)
    packed = _measure_saved_bytes(model, tokens, mode)
    assert packed - plain == arch.document_mask_bytes(spec, b, s, mode)
    terms = [
        memory.memory_terms(
            model_shape(spec),
            shard_degree=1,
            replicate_degree=1,
            micro_batch=b,
            seq_len=s,
            precision="bf16",
            mode=mode,
            reshard_after_forward=True,
            kind="cpu",
            packed=p,
        )
        for p in (False, True)
    ]
    assert terms[1].activations - terms[0].activations == packed - plain
