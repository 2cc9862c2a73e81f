"""Context parallelism built from public collectives, so it runs (and is tested) on gloo too.

PyTorch's `context_parallel` has no CPU path in torch 2.13, so this is the all-gather design of
the Llama 3 paper: every sequence is cut into 2 x cp equal chunks and CP rank r holds chunks r
and 2 x cp - 1 - r (`spec.long_context.cp_chunks`; under a causal mask every rank then does the
same attention work). Each rank embeds its own tokens, runs every linear on them alone, and in
each attention all-gathers the keys and values of the whole sequence over the CP group (small
with grouped-query attention); its queries attend to them under the mask built from global
positions and document ids (`train/attention.py`). The gather's backward is a reduce-scatter of
the key and value gradients. RoPE uses the global positions. Each rank's loss covers its own
targets; the loop's all-reduce over every rank sums them as without CP. The CP ranks are part of
FSDP's shard dimension (`train/distributed.py`): parameters are sharded over them too.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from blackwell_sm.spec.long_context import cp_chunks


@dataclass(frozen=True)
class CpGroup:
    """This rank's place in its context-parallel group."""

    degree: int
    rank: int
    group: Any = None  # the ProcessGroup (None only when degree is 1)

    @classmethod
    def from_mesh(cls, mesh) -> CpGroup:
        """The "cp" dimension of `train.distributed.build_cp_mesh`'s mesh."""
        sub = mesh["cp"]
        return cls(sub.size(), sub.get_local_rank(), sub.get_group())

    def positions(self, seq_len: int, device: torch.device | None = None) -> torch.Tensor:
        """Global positions of this rank's tokens, (seq_len / cp,): its two chunks in order."""
        return _positions(seq_len, self.degree, self.rank, device)

    def all_positions(self, seq_len: int, device: torch.device | None = None) -> torch.Tensor:
        """Global positions of a gathered sequence, (seq_len,): rank 0's tokens, rank 1's, ..."""
        return torch.cat([_positions(seq_len, self.degree, r, device) for r in range(self.degree)])

    def shard(self, x: torch.Tensor, seq_len: int, dim: int = 1) -> torch.Tensor:
        """This rank's tokens of `x` (whose `dim` runs over the seq_len positions)."""
        return x.index_select(dim, self.positions(seq_len, x.device))


def _positions(seq_len: int, cp: int, rank: int, device: torch.device | None) -> torch.Tensor:
    a, b = cp_chunks(seq_len, cp, rank)
    return torch.cat(
        [torch.arange(a.start, a.stop, device=device), torch.arange(b.start, b.stop, device=device)]
    )


class _GatherSequence(torch.autograd.Function):
    """All-gather along `dim` (rank order); backward: reduce-scatter (sum) of the gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dim: int, group, degree: int) -> torch.Tensor:
        ctx.dim, ctx.group, ctx.degree = dim, group, degree
        xs = x.movedim(dim, 0).contiguous()
        out = xs.new_empty((degree * xs.shape[0], *xs.shape[1:]))
        dist.all_gather_into_tensor(out, xs, group=group)
        return out.movedim(0, dim)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        gs = grad.movedim(ctx.dim, 0).contiguous()
        out = gs.new_empty((gs.shape[0] // ctx.degree, *gs.shape[1:]))
        reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
        reduce_scatter(out, gs, group=ctx.group)
        return out.movedim(0, ctx.dim), None, None, None


@torch.compiler.disable
def gather_sequence(x: torch.Tensor, cp: CpGroup, dim: int = 2) -> torch.Tensor:
    """The whole sequence of `x` (this rank holds its tokens along `dim`), in the gathered
    order `CpGroup.all_positions` describes."""
    return _GatherSequence.apply(x, dim, cp.group, cp.degree)
