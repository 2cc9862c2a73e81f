"""Matmul precision: bf16 (FSDP mixed precision only), fp8 (torchao float8), mxfp8 (torchao MX).

`check_precision` runs before anything is built and raises `CapabilityError` when the device or
the library cannot do what the plan asks. There is no fallback: a plan that says fp8 runs fp8.
"""

from __future__ import annotations

import torch
from torch import nn

from blackwell_sm.errors import CapabilityError
from blackwell_sm.spec import arch

# Compute capability each low precision needs: float8 tensor cores from Ada/Hopper (8.9),
# MX block-scaled formats from Blackwell (10.0).
MIN_CAPABILITY = {"fp8": (8, 9), "mxfp8": (10, 0)}


def check_precision(precision: str, device: torch.device) -> None:
    """Raise CapabilityError unless `device` and torchao can train in `precision`."""
    if precision == "bf16":
        return
    if precision not in MIN_CAPABILITY:
        raise CapabilityError(f"unknown precision {precision!r}; allowed: bf16, fp8, mxfp8")
    need = MIN_CAPABILITY[precision]
    need_s = f"{need[0]}.{need[1]}"
    gpu = "Blackwell (B200/B300)" if precision == "mxfp8" else "Hopper/Ada or newer (H100, B200)"
    if device.type != "cuda":
        raise CapabilityError(
            f"the plan asks for {precision} training but this worker runs on {device.type}: "
            f"{precision} needs a CUDA GPU with compute capability >= {need_s} ({gpu}); "
            "refusing to fall back to bf16",
            hint="re-plan with training.precision: bf16 for CPU or older GPUs",
        )
    cap = torch.cuda.get_device_capability(device)
    if cap < need:
        name = torch.cuda.get_device_name(device)
        raise CapabilityError(
            f"the plan asks for {precision} training but {name} has compute capability "
            f"{cap[0]}.{cap[1]}; {precision} needs >= {need_s} ({gpu}); refusing to fall back",
            hint="re-plan with training.precision: bf16, or run on a GPU that supports it",
        )
    try:
        if precision == "fp8":
            import torchao.float8
        else:
            import torchao.prototype.moe_training.config  # noqa: F401
    except ImportError as e:
        raise CapabilityError(
            f"the plan asks for {precision} training but torchao is not importable ({e})",
            hint="install torchao in the training image (pip install torchao)",
        ) from e


def lowp_filter(precision: str):
    """The linears to convert: not the output head, and both dims divisible as `arch.LOWP_DIVISOR`
    says for `precision` (16 for fp8, 32 for mxfp8: the same rule the planner checks)."""

    def keep(module: nn.Module, fqn: str) -> bool:
        if not isinstance(module, nn.Linear) or fqn.split(".")[-1] == "lm_head":
            return False
        return arch.lowp_convertible(module.in_features, module.out_features, precision)

    return keep


def convert_precision(model: nn.Module, precision: str) -> int:
    """Swap eligible linears for low-precision training ones; returns how many were converted."""
    if precision == "bf16":
        return 0
    _lowp_filter = lowp_filter(precision)
    eligible = sum(1 for fqn, m in model.named_modules() if _lowp_filter(m, fqn))
    if precision == "fp8":
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        # Tensorwise scaling with float8 all-gather: FSDP2 gathers fp8 weights (half the bytes).
        config = Float8LinearConfig(enable_fsdp_float8_all_gather=True)
        convert_to_float8_training(model, config=config, module_filter_fn=_lowp_filter)
    elif precision == "mxfp8":
        from torchao.prototype.moe_training.config import (
            MXFP8TrainingOpConfig,
            MXFP8TrainingRecipe,
        )
        from torchao.quantization import quantize_

        config = MXFP8TrainingOpConfig.from_recipe(MXFP8TrainingRecipe.MXFP8_RCEIL)
        quantize_(model, config=config, filter_fn=_lowp_filter)
    return eligible


def after_optimizer_step(model: nn.Module, precision: str) -> None:
    """fp8 with float8 all-gather: refresh all weight scales in one all-reduce."""
    if precision == "fp8":
        from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

        precompute_float8_dynamic_scale_for_fsdp(model)
