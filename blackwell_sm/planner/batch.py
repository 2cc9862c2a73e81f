"""Batch arithmetic, the one home: data-parallel ranks are the GPUs over the ranks that share a
sequence (context parallel x tensor parallel), and the global batch is micro-batch x
accumulation x those ranks; `batch_text` says it in words. Part of the Plan's layer: the search's
candidates, the Plan's config and every sentence about a batch read these."""

from __future__ import annotations


def data_parallel_ranks(world: int, cp_degree: int = 1, tp_degree: int = 1) -> int:
    """Ranks that read different sequences: `world` GPUs over cp x tp (the ranks of one
    sequence)."""
    return world // (cp_degree * tp_degree)


def global_batch(micro_batch_size: int, grad_accum_steps: int, dp_ranks: int) -> int:
    """Sequences per optimizer step."""
    return micro_batch_size * grad_accum_steps * dp_ranks


def plural(n: int, word: str) -> str:
    """`1 sequence`, `1,024 sequences`."""
    return f"{n:,} {word}{'' if n == 1 else 's'}"


def batch_text(micro_batch_size: int, grad_accum_steps: int, dp_ranks: int) -> str:
    """`micro-batch 1 x accumulation 128 x 8 data-parallel ranks = 1,024 sequences`."""
    total = global_batch(micro_batch_size, grad_accum_steps, dp_ranks)
    ranks = plural(dp_ranks, "data-parallel rank")
    return (
        f"micro-batch {micro_batch_size} x accumulation {grad_accum_steps} x {ranks} = "
        f"{plural(total, 'sequence')}"
    )
