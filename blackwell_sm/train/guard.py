"""The NaN/Inf guard: a step whose loss or gradient norm is not finite changes nothing.

Such a step skips the optimizer step (the gradients are zeroed), is logged (a `[bsm]` line and a
`bad_step` record in metrics.jsonl) and counted; `training.max_bad_steps` of them in a row stop
the run with a clear failure. Weights are never saved unless finite (`all_finite`, before every
checkpoint save).

The cost: one host read of one scalar per step, no extra collective. The loss is all-reduced and
the grad norm comes out of the clip's reduction, so both are the same on every rank and every
rank takes the same decision from them alone. The read must happen before `optimizer.step()` to
skip it; it waits for the backward (which the step would wait for anyway) and stops the host from
queueing the optimizer and the next forward ahead of the GPU.

Test hook (test-only): `BSM_TEST_NAN_STEPS` = comma-separated 1-based step numbers, or `all`:
rank 0's loss of those steps is multiplied by NaN before the backward, as a bad batch would.
"""

from __future__ import annotations

import math
import os

import torch
import torch.distributed as dist
from torch import nn

from blackwell_sm.errors import BsmError
from blackwell_sm.opt_ml import ENV_TEST_NAN_STEPS
from blackwell_sm.train.metrics_log import MetricsLog, log


def _poisoned_steps() -> set[int] | str:
    raw = os.environ.get(ENV_TEST_NAN_STEPS, "").strip()
    if raw == "all":
        return "all"
    return {int(s) for s in raw.split(",") if s.strip()}


class NanGuard:
    """Counts non-finite steps in a row and decides, the same way on every rank, to skip."""

    def __init__(self, max_bad_steps: int, *, rank: int, metrics: MetricsLog, is_main: bool):
        self.max_bad_steps, self.rank, self.metrics, self.is_main = (
            max_bad_steps,
            rank,
            metrics,
            is_main,
        )
        self.in_row = 0
        self.total = 0
        self.last_ok = True
        self._poison = _poisoned_steps()

    def poison(self, loss: torch.Tensor, step: int) -> torch.Tensor:
        """Test hook: `loss` times NaN on rank 0 for the steps `BSM_TEST_NAN_STEPS` names."""
        if self.rank == 0 and self._poison and (self._poison == "all" or step + 1 in self._poison):
            return loss * math.nan
        return loss

    def step_ok(self, step: int, loss: torch.Tensor, grad_norm: torch.Tensor) -> bool:
        """True if 0-based `step` may update the weights; else log it, count it, and after
        `max_bad_steps` in a row raise a BsmError."""
        finite = bool(torch.isfinite(torch.stack([loss.float(), grad_norm.float()])).all())
        self.last_ok = finite
        if finite:
            self.in_row = 0
            return True
        self.in_row += 1
        self.total += 1
        loss_v, norm_v = float(loss), float(grad_norm)
        log(
            f"step {step + 1}: loss {loss_v} / grad norm {norm_v} is not finite; optimizer step "
            f"skipped ({self.in_row} in a row, max_bad_steps {self.max_bad_steps})",
            is_main=self.is_main,
        )
        self.metrics.bad_step(step + 1, loss=loss_v, grad_norm=norm_v, in_row=self.in_row)
        if self.in_row >= self.max_bad_steps:
            raise BsmError(
                f"{self.in_row} steps in a row (steps {step + 2 - self.in_row}..{step + 1}) had a "
                f"non-finite loss or gradient norm (last: loss {loss_v}, grad norm {norm_v}); "
                f"stopping at training.max_bad_steps {self.max_bad_steps}; no checkpoint was "
                "saved from them",
                hint="lower training.optimizer.lr, check the data for broken batches, or resume "
                "from the last checkpoint",
                field="training.max_bad_steps",
                code="non_finite",
            )
        return False


def all_finite(model: nn.Module, device: torch.device) -> bool:
    """Every parameter shard on every rank is finite (one all-reduce): checked before a save."""
    flags = [
        torch.isfinite(t).all()
        for t in (
            p.detach().to_local() if hasattr(p, "to_local") else p.detach()
            for p in model.parameters()
        )
        if t.numel()
    ]
    ok = torch.stack(flags).all().to(torch.int32) if flags else torch.ones((), dtype=torch.int32)
    ok = ok.to(device)
    if dist.is_initialized():
        dist.all_reduce(ok, op=dist.ReduceOp.MIN)
    return bool(ok)
