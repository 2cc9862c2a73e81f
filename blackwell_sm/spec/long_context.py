"""Long sequences in one home: the loss's row chunks, the attention mask's form, and how context
parallelism cuts a sequence. Pure Python: the planner's memory terms and the trainer read the
same numbers from here (`tests/test_long_context.py` holds them against the real code).

- The loss (`train/loss.py`): PyTorch's `linear_cross_entropy` over chunks of `loss_chunk_rows`
  rows, so the (tokens x vocab) logits never exist whole; `chunked_loss_bytes` is what it holds
  at its peak, `LOSS_BYTES_PER_LOGIT_FULL` the plain path's cost per logit.
- The attention mask (`train/attention.py`): `mask_kind` says causal (SDPA's own), dense (a
  boolean (b, 1, q, kv) mask) or block (FlexAttention's block-sparse mask, never q x kv).
- Context parallelism (`train/context_parallel.py`): `cp_chunks` says which two of the 2 x cp
  equal chunks of a sequence each rank holds (rank r: chunks r and 2 x cp - 1 - r).
"""

from __future__ import annotations

from typing import Literal

LossImpl = Literal["chunked", "full-logits"]
MaskKind = Literal["causal", "dense", "block"]

#: Logits one chunk of the chunked loss holds: 2**27 (512 MiB in fp32). Small enough to be
#: negligible beside a long sequence's activations, large enough that each chunk's matmul
#: (rows x d_model x vocab) keeps a GPU busy (1,024 rows at Llama 3's 128,256 vocabulary).
LOSS_CHUNK_LOGITS = 1 << 27

#: Bytes per logit of the plain path (`full-logits`): cross_entropy(logits.float()) holds, at
#: the start of backward, the fp32 log-softmax saved for backward, the fp32 gradient flowing in
#: and the fp32 gradient it produces (the bf16 logits are freed before). Derived from the code.
LOSS_BYTES_PER_LOGIT_FULL = 12

#: A dense (b, 1, q, kv) boolean mask is built up to this many elements (64 MiB); above it the
#: mask is FlexAttention's block mask (128 x 128 blocks, a few bytes per block), which never
#: builds q x kv. At seq 8,192 a packed row's dense mask is exactly this size.
DENSE_MASK_MAX_ELEMENTS = 1 << 26


def loss_chunk_rows(vocab_size: int, n_rows: int) -> int:
    """Rows per chunk of the chunked loss: the largest power of two whose logits stay within
    LOSS_CHUNK_LOGITS, at most the rows there are (at least 1)."""
    rows = 1 << max(0, (LOSS_CHUNK_LOGITS // max(1, vocab_size)).bit_length() - 1)
    return max(1, min(rows, n_rows))


def chunked_loss_bytes(
    vocab_size: int,
    d_model: int,
    n_rows: int,
    *,
    kind: str = "cuda",
    dtype_bytes: int = 2,
    rows: int | None = None,
) -> float:
    """Bytes the chunked loss holds at its peak (its backward), beyond the head's input and the
    head's weight gradient (the `activations` and `grads_unsharded` terms count those).

    CUDA (`acc_policy="compact"`, bf16 in, fp32 accumulation; read from torch 2.13's
    `linear_cross_entropy` source, to be measured on a GPU): a chunk's fp32 logits and their
    bf16 copy (6 B per logit), the chunk's fp32 input and gathered target rows, and the gradient
    of the head's input. CPU (`acc_policy="accurate"`; measured to the byte by
    tests/test_long_context.py): fp32 logits, fp32 input gradient, a (vocab x d) fp32 scratch,
    and in bf16 also the weight's fp32 copy and two fp32 temporaries of the bf16 gradient update.
    Both: per-row targets, weights and mask (16 B).
    """
    c = rows or loss_chunk_rows(vocab_size, n_rows)
    v, h, n = vocab_size, d_model, n_rows
    if kind == "cpu":
        weight = v * h * (4 if dtype_bytes == 4 else 16)
        return float(c * v * 4 + n * h * 4 + weight + c * h * 4 + n * 16)
    return float(c * v * 6 + c * h * 6 + n * h * dtype_bytes + n * 16)


def loss_kernel_temp_bytes(
    vocab_size: int, d_model: int, *, kind: str = "cuda", dtype_bytes: int = 2
) -> float:
    """The part of `chunked_loss_bytes` that lives inside one operator: on CPU in bf16, the two
    fp32 temporaries of the head weight's gradient update (8 B per weight element). The CPU
    allocator sees them; PyTorch's memory tracker, which watches operators from outside, cannot
    (measured: docs/planner.md "Tracing the real loop")."""
    if kind != "cpu" or dtype_bytes == 4:
        return 0.0
    return float(vocab_size * d_model * 8)


def loss_bytes(
    impl: str, vocab_size: int, d_model: int, n_rows: int, *, kind: str = "cuda"
) -> float:
    """The `logits_and_loss` term for `n_rows` tokens on one GPU under loss `impl`."""
    if impl == "full-logits":
        return float(n_rows * vocab_size * LOSS_BYTES_PER_LOGIT_FULL)
    return chunked_loss_bytes(vocab_size, d_model, n_rows, kind=kind)


def mask_kind(
    *,
    packed: bool,
    cp_degree: int,
    micro_batch: int,
    q_len: int,
    kv_len: int,
    device: str = "cuda",
    dense_max: int = DENSE_MASK_MAX_ELEMENTS,
) -> MaskKind:
    """How attention is masked: SDPA's own causal kernel when every token sees all earlier ones
    of its own sequence (no packing, the whole sequence on this rank), else a mask built from
    global positions and document ids: dense while b x q x kv <= `dense_max`, else block. On
    CPU always dense: torch 2.13's FlexAttention has no backward there."""
    if not packed and cp_degree == 1:
        return "causal"
    if device == "cpu" or micro_batch * q_len * kv_len <= dense_max:
        return "dense"
    return "block"


def cp_chunks(seq_len: int, cp_degree: int, rank: int) -> tuple[range, range]:
    """The two position ranges context-parallel `rank` holds: chunks rank and 2 x cp - 1 - rank
    of 2 x cp equal chunks (under a causal mask every rank then does the same attention work)."""
    if seq_len % (2 * cp_degree):
        raise ValueError(f"seq_len {seq_len} is not a multiple of 2 x cp_degree {cp_degree}")
    c = seq_len // (2 * cp_degree)
    a, b = rank, 2 * cp_degree - 1 - rank
    return range(a * c, (a + 1) * c), range(b * c, (b + 1) * c)
