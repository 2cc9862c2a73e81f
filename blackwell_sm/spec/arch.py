"""The decoder architecture in one home: what every other part derives from a `ModelSpec`.

Every family the toolkit trains is a pre-norm decoder (RMSNorm, RoPE, grouped-query attention,
SwiGLU MLP). Families differ in a few switches (`FAMILIES`): q/k/v biases (Qwen2), per-head q/k
RMSNorm (Qwen3) and the Hugging Face class they come from and leave as. From a spec this module
gives, in one place:

- the block's linear layers in forward order (name, shape, bias) and its norms;
- the parameter table by name (the trainer's module tree is built from it and tested equal to it;
  names are Hugging Face's minus the `model.` prefix, see `HF_PREFIX`);
- the parameter count and the FLOPs per token (the planner's and the loop's MFU);
- the bytes each activation-checkpointing mode keeps per token, and the matmul FLOPs it redoes;
- the fp8 / mxfp8 divisibility rule the planner checks and the trainer's converter applies.

Pure Python (no torch): the planner imports it; `tests/test_arch.py` and
`tests/test_activation_memory.py` hold it against the real modules.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from blackwell_sm.spec.model import ModelSpec


class Family(NamedTuple):
    """The switches that tell one family's block from another's, and its Hugging Face identity."""

    hf_class: str
    model_type: str
    qkv_bias: bool  # q_proj, k_proj and v_proj carry a bias (o_proj and the MLP never do)
    qk_norm: bool  # RMSNorm over head_dim on each query and key head, before RoPE


FAMILIES: dict[str, Family] = {
    "llama": Family("LlamaForCausalLM", "llama", qkv_bias=False, qk_norm=False),
    "mistral": Family("MistralForCausalLM", "mistral", qkv_bias=False, qk_norm=False),
    "qwen2": Family("Qwen2ForCausalLM", "qwen2", qkv_bias=True, qk_norm=False),
    "qwen3": Family("Qwen3ForCausalLM", "qwen3", qkv_bias=False, qk_norm=True),
}

#: Our top-level module names -> Hugging Face's (the same table for the four families: their
#: `*ForCausalLM` keeps the decoder under `model.` and the output head at the top).
HF_PREFIX: dict[str, str] = {
    "embed_tokens": "model.embed_tokens",
    "layers": "model.layers",
    "norm": "model.norm",
    "lm_head": "lm_head",
}

#: Activation-checkpointing modes, in order of memory kept (most first).
AC_MODES = ("none", "selective", "selective-op", "full")

#: Low-precision linears need both dimensions divisible by this (torchao float8: 16; MX formats:
#: the 32-element scaling block). The planner refuses a precision that would leave a block linear
#: in bf16; the trainer converts exactly the linears this rule admits.
LOWP_DIVISOR = {"fp8": 16, "mxfp8": 32}


class Linear(NamedTuple):
    """One linear layer of a block. `reads` names the tensor it takes (shared inputs count once)."""

    name: str
    in_features: int
    out_features: int
    bias: bool
    reads: str

    @property
    def params(self) -> int:
        return self.in_features * self.out_features + (self.out_features if self.bias else 0)


class Norm(NamedTuple):
    """One RMSNorm of a block: its weight width and how many it normalises per token."""

    name: str
    dim: int
    rows: int


@lru_cache(maxsize=512)
def block_linears(spec: ModelSpec) -> tuple[Linear, ...]:
    """The block's linears in forward order: q, k, v, o, gate, up, down."""
    fam = FAMILIES[spec.family]
    h, q, kv, f = spec.d_model, spec.q_dim, spec.kv_dim, spec.ffn_dim
    b = fam.qkv_bias
    return (
        Linear("self_attn.q_proj", h, q, b, "attn_norm"),
        Linear("self_attn.k_proj", h, kv, b, "attn_norm"),
        Linear("self_attn.v_proj", h, kv, b, "attn_norm"),
        Linear("self_attn.o_proj", q, h, False, "attention"),
        Linear("mlp.gate_proj", h, f, False, "mlp_norm"),
        Linear("mlp.up_proj", h, f, False, "mlp_norm"),
        Linear("mlp.down_proj", f, h, False, "swiglu"),
    )


@lru_cache(maxsize=512)
def block_norms(spec: ModelSpec) -> tuple[Norm, ...]:
    """The block's RMSNorms in forward order."""
    norms = [Norm("input_layernorm", spec.d_model, 1)]
    if FAMILIES[spec.family].qk_norm:
        assert spec.head_dim is not None  # resolved by ModelSpec's validator
        norms.append(Norm("self_attn.q_norm", spec.head_dim, spec.n_heads))
        norms.append(Norm("self_attn.k_norm", spec.head_dim, spec.n_kv_heads))
    norms.append(Norm("post_attention_layernorm", spec.d_model, 1))
    return tuple(norms)


def block_linear_params(spec: ModelSpec) -> int:
    """Parameters of one block's linears (weights and biases)."""
    return sum(lin.params for lin in block_linears(spec))


def params_per_layer(spec: ModelSpec) -> int:
    """Parameters of one block: its linears and its norms' weights."""
    return block_linear_params(spec) + sum(n.dim for n in block_norms(spec))


def n_params(spec: ModelSpec) -> int:
    """Exact parameter count: embedding, blocks, final norm, and the output head unless tied."""
    head = 0 if spec.tie_embeddings else spec.vocab_size * spec.d_model
    return (
        spec.vocab_size * spec.d_model
        + spec.n_layers * params_per_layer(spec)
        + spec.d_model
        + head
    )


def param_table(spec: ModelSpec) -> dict[str, tuple[int, ...]]:
    """Every parameter of the model by our name, with its shape (the trainer's module tree)."""
    t: dict[str, tuple[int, ...]] = {"embed_tokens.weight": (spec.vocab_size, spec.d_model)}
    for i in range(spec.n_layers):
        for lin in block_linears(spec):
            t[f"layers.{i}.{lin.name}.weight"] = (lin.out_features, lin.in_features)
            if lin.bias:
                t[f"layers.{i}.{lin.name}.bias"] = (lin.out_features,)
        for n in block_norms(spec):
            t[f"layers.{i}.{n.name}.weight"] = (n.dim,)
    t["norm.weight"] = (spec.d_model,)
    if not spec.tie_embeddings:
        t["lm_head.weight"] = (spec.vocab_size, spec.d_model)
    return t


def hf_key(name: str) -> str:
    """Our parameter name -> the Hugging Face checkpoint key (all four families)."""
    top, _, rest = name.partition(".")
    return f"{HF_PREFIX[top]}.{rest}"


def flops_per_token(spec: ModelSpec, seq_len: int) -> float:
    """Model FLOPs per trained token (forward + backward, no recompute).

    6 x (all parameters except the input embedding; with tied embeddings the shared matrix still
    does the output projection) + 12 x layers x (n_heads x head_dim) x seq_len for the attention
    scores and their weighted sum: the PaLM / torchtitan convention, full (non-causal) matrix.
    """
    matmul_params = n_params(spec) - (0 if spec.tie_embeddings else spec.vocab_size * spec.d_model)
    return 6.0 * matmul_params + 12.0 * spec.n_layers * spec.q_dim * seq_len


# --- activation checkpointing: what each mode keeps, what it redoes -------------------------------


def saved_matmuls(spec: ModelSpec, mode: str) -> tuple[Linear, ...]:
    """The linears whose outputs a selective mode keeps for backward.

    `selective` keeps all seven. `selective-op` (torchtitan's per-op policy) counts the block's
    matmuls in forward order and keeps the 1st, 3rd, 5th and 7th (q, v, gate, down); the others
    (k, o, up) are recomputed in backward. Both also keep the attention kernel's outputs.
    """
    lins = block_linears(spec)
    if mode == "selective":
        return lins
    if mode == "selective-op":
        return lins[0::2]
    return ()


def norm_saved_bytes_per_elem(fused_norm: bool) -> int:
    """Bytes an RMSNorm keeps per input element for backward.

    Fused (CUDA `_fused_rms_norm`): its bf16 input. Composite (CPU): the fp32 upcast input and the
    fp32 normalised tensor (measured in tests/test_activation_memory.py).
    """
    return 2 if fused_norm else 8


def _norm_saved_per_token(norm: Norm, fused_norm: bool) -> int:
    return norm.rows * (norm_saved_bytes_per_elem(fused_norm) * norm.dim + 4)  # + fp32 rstd


@lru_cache(maxsize=2048)
def block_saved_bytes_per_token(
    spec: ModelSpec, mode: str, dtype_bytes: int = 2, fused_norm: bool = True
) -> int:
    """Bytes one block keeps for backward per token, between its forward and its backward.

    In: the block input (checkpointing modes), the matmul outputs a selective policy keeps, the
    attention output and its fp32 logsumexp (flash/SDPA: no s x s term); without checkpointing,
    what autograd keeps: each distinct matmul input, RoPE'd q/k and v, SwiGLU's gate, up and
    SiLU(gate), and every norm's save. Out: parameters, the shared RoPE table, the recompute
    working set and the logits (other terms of the planner's memory model).
    """
    d = dtype_bytes
    attention = d * spec.q_dim + 4 * spec.n_heads  # its output + fp32 logsumexp per head
    block_input = d * spec.d_model
    if mode == "full":
        return block_input
    if mode in ("selective", "selective-op"):
        outs = sum(lin.out_features for lin in saved_matmuls(spec, mode))
        return block_input + attention + d * outs
    if mode != "none":
        raise ValueError(f"unknown activation mode {mode!r}; allowed: {', '.join(AC_MODES)}")
    lins = block_linears(spec)
    # Each distinct matmul input once (q/k/v share one, gate/up another); o's input is the
    # attention output, counted with the attention.
    inputs = {lin.reads: lin.in_features for lin in lins if lin.reads != "attention"}
    norms = sum(_norm_saved_per_token(n, fused_norm) for n in block_norms(spec))
    qkv = d * (spec.q_dim + 2 * spec.kv_dim)  # the attention kernel's inputs (after RoPE)
    swiglu = 3 * d * spec.ffn_dim  # gate output, SiLU(gate), up output
    return norms + d * sum(inputs.values()) + qkv + attention + swiglu


def document_mask_bytes(
    spec: ModelSpec,
    micro_batch: int,
    seq_len: int,
    mode: str,
    dtype_bytes: int = 2,
    q_len: int | None = None,
    mask_rows: int | None = None,
) -> int:
    """Bytes packed samples add to what the blocks keep (fine-tuning rows).

    The boolean (b, 1, s, s) block-diagonal mask is made once per forward; with checkpointing it
    is each block's saved input (one storage); without, each block's attention keeps its own bf16
    additive copy instead, and the K/V heads it saves are expanded to all query heads (a masked
    SDPA with GQA would fall back to the math kernel). Measured: tests/test_activation_memory.py.
    `q_len`: the queries of this rank under context parallelism (the mask is q_len x seq_len);
    `mask_rows`: 1 for a mask every row shares (causal by position, broadcast), else micro_batch.
    """
    rows = micro_batch if mask_rows is None else mask_rows
    per = rows * (seq_len if q_len is None else q_len) * seq_len
    if mode != "none":
        return per
    kv_growth = 2 * dtype_bytes * (spec.q_dim - spec.kv_dim) * micro_batch * seq_len
    return spec.n_layers * (2 * per + kv_growth)


def recompute_flops_per_token(spec: ModelSpec, seq_len: int, mode: str) -> tuple[float, float]:
    """(linear, attention) FLOPs per token that checkpointing redoes in backward, all blocks.

    full: the whole forward of every block (2 x block linears + the attention forward, a third of
    its 12·L·q_dim·s); selective-op: the forward of the matmuls it does not keep; selective and
    none: no matmul or attention FLOPs (selective's elementwise recompute is a time fraction).
    """
    L = spec.n_layers
    if mode == "full":
        return 2.0 * L * block_linear_params(spec), 4.0 * L * spec.q_dim * seq_len
    if mode == "selective-op":
        kept = set(saved_matmuls(spec, mode))
        redo = sum(
            lin.in_features * lin.out_features for lin in block_linears(spec) if lin not in kept
        )
        return 2.0 * L * redo, 0.0
    return 0.0, 0.0


# --- low precision -------------------------------------------------------------------------------


def lowp_convertible(in_features: int, out_features: int, precision: str) -> bool:
    """Whether a linear of this shape trains in `precision` (bf16: always)."""
    k = LOWP_DIVISOR.get(precision)
    return k is None or (in_features % k == 0 and out_features % k == 0)


def lowp_ineligible(spec: ModelSpec, precision: str) -> str | None:
    """Why `precision` cannot convert every block linear of `spec`, or None if it can."""
    if precision == "bf16":
        return None
    bad = [
        f"{lin.name} {lin.in_features}x{lin.out_features}"
        for lin in block_linears(spec)
        if not lowp_convertible(lin.in_features, lin.out_features, precision)
    ]
    k = LOWP_DIVISOR[precision]
    return f"{', '.join(bad)} not divisible by {k}" if bad else None
