"""The fake-tensor trace's peak beside each GPU-check run's measured peak (issue 24's instrument,
checked by issue 22).

The trace (`blackwell_sm/train/trace.py`) runs the plan's step on fake tensors with a fake
process group. On the GPU machine it traces on the *cuda* device (fake tensors still: no GPU
memory is used), so the traced step has the run's own form (fused norms, block masks, the CUDA
loss policy) and `torch.cuda.max_memory_allocated` is held to it (both count the tensors the
allocator hands out). A CPU trace would not do: its form differs (unfused norms, dense masks), by
15 GiB for the 1B checkpointing run on an H200. Under --cpu-dry the tiny runs trace on the CPU.
The trace is eager bf16: a run that compiles or trains in fp8 gets no trace goal.
"""

from __future__ import annotations

import time
from typing import Any

GIB = 1024**3


def traced_as_run(plan: Any) -> bool:
    """The trace runs eager bf16 (train/trace.py): only such a run's peak is held to it."""
    return not plan.config.compile and plan.config.precision == "bf16"


def traced_for(plan: Any, *, dry: bool) -> dict[str, Any]:
    """The traced peak to print beside a run's measurement, traced now on the run's device;
    `peak_gib` None (no goal) with the reason when there is none."""
    if not traced_as_run(plan):
        return {
            "peak_gib": None,
            "why": "the run compiles or trains in fp8; the trace is eager bf16",
        }
    from blackwell_sm.train.trace import traced_peak_bytes

    # On the GPU the run's own kernels: the GPU form; on CPU the run is the CPU form.
    device, form = ("cpu", "cpu") if dry else ("cuda", "gpu")
    t0 = time.perf_counter()
    try:
        peak = traced_peak_bytes(plan, warmup=False, device=device, form=form)
    except Exception as e:  # the trace is the instrument under test here: say why, go on
        return {"peak_gib": None, "why": f"the {device} trace failed: {type(e).__name__}: {e}"}
    return {
        "peak_gib": round(peak / GIB, 3),
        "source": f"traced now on fake {device} tensors",
        "form": form,
        "wall_s": round(time.perf_counter() - t0, 1),
    }
