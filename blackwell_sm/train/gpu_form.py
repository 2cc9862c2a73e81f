"""The GPU form of the model on any device: what the trace runs to see what a GPU holds.

On a GPU the model's norms are PyTorch's fused RMSNorm kernel (`aten._fused_rms_norm`: it keeps
its bf16 input and an fp32 rstd per row; the CPU's composite keeps fp32 copies), attention is a
fused kernel under the GPU's mask rule (SDPA's causal kernel, or FlexAttention's block mask past
`DENSE_MASK_MAX_ELEMENTS`; the CPU always builds a dense mask), and the chunked loss runs the
CUDA policy. `use_gpu_form(model)` switches a built `Transformer` to those kernels wherever its
tensors live: the norms call the fused op (it runs on the CPU too), attention calls the
kernel's stand-in (`train/gpu_kernels.py`), the loss its CUDA accumulation policy. The
CPU form (what `run-local` trains with) is the model as built.
"""

from __future__ import annotations

import torch
from torch import nn


class FusedRMSNorm(nn.RMSNorm):
    """nn.RMSNorm as CUDA's fused kernel keeps it (its input and an fp32 rstd per row), through
    that kernel's stand-in (`train/gpu_kernels.py`; the CPU's `_fused_rms_norm` is a composite)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        from blackwell_sm.train.gpu_kernels import rms_norm

        eps = self.eps if self.eps is not None else torch.finfo(x.dtype).eps
        return rms_norm(x, self.weight, eps)[0]


def use_gpu_form(model: nn.Module) -> nn.Module:
    """Switch `model` (a Transformer) to the GPU's kernels in place; returns it."""
    for m in model.modules():
        if type(m) is nn.RMSNorm:
            m.__class__ = FusedRMSNorm
    model.kernel_form = "cuda"
    return model
