"""Which plan this host runs: with instance preferences, the one for the hardware it woke up on.

A bundle made from `compute.instance_preferences` carries `plans/<instance-type>.json` beside
`plan.json`. SageMaker starts such a job on the first type with capacity, so the launcher picks:

1. `resourceconfig.json`'s `current_instance_type` (SageMaker writes it; the SageMaker SDK's own
   container driver reads it to set `SM_CURRENT_INSTANCE_TYPE`): the plan of that type;
2. else the GPUs the driver reports (model and count, e.g. 8 x "NVIDIA B200"): the one plan whose
   catalog GPU and GPUs per instance match.

No match, or more than one, is an error (`output/failure`): a plan made for other hardware is
never run. A bundle without `plans/` runs `plan.json` as before.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from blackwell_sm.errors import CapabilityError
from blackwell_sm.opt_ml import PLANS_DIR
from blackwell_sm.planner.plan import Plan

# (device name, count) of the visible GPUs, e.g. ("NVIDIA B200", 8); None when there are none.
GpuProbe = Callable[[], tuple[str, int] | None]


def cuda_gpus() -> tuple[str, int] | None:
    """The first CUDA device's name and the device count (torch imported only here)."""
    import torch

    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return None
    return torch.cuda.get_device_name(0), torch.cuda.device_count()


def gpu_matches(plan: Plan, name: str, count: int) -> bool:
    """The device `name` is the plan's GPU model ('B200' in 'NVIDIA B200', not in 'GB200') and
    the host has the plan's GPUs per instance."""
    model = plan.instance.gpu.split()[0]
    return count == plan.instance.gpus_per_instance and bool(
        re.search(rf"(?<![A-Za-z0-9]){re.escape(model)}(?![A-Za-z0-9])", name)
    )


def select_plan(
    plan_path: Path,
    current_instance_type: str | None,
    read: Callable[[Path], Plan],
    probe: GpuProbe = cuda_gpus,
) -> tuple[Path, str | None]:
    """(plan file to run, a note saying why) for this host; plan.json when there is no plans/."""
    plans_dir = plan_path.parent / PLANS_DIR
    if not plans_dir.is_dir():
        return plan_path, None
    files = sorted(plans_dir.glob("*.json"))
    types = [f.name.removesuffix(".json") for f in files]
    if current_instance_type is not None:
        chosen = plans_dir / f"{current_instance_type}.json"
        if chosen in files:
            return chosen, f"instance type {current_instance_type} (resourceconfig.json)"
        raise CapabilityError(
            f"this host is a {current_instance_type} (resourceconfig.json) but the bundle has "
            f"plans only for {', '.join(types)}; refusing to run a plan made for other hardware",
            hint="add this type to compute.instance_preferences, or drop it from the request",
        )
    gpus = probe()
    if gpus is None:
        raise CapabilityError(
            "resourceconfig.json has no current_instance_type and no CUDA device is visible: "
            f"cannot tell which of the plans for {', '.join(types)} this host can run",
        )
    name, count = gpus
    hits = [f for f in files if gpu_matches(read(f), name, count)]
    if len(hits) == 1:
        return hits[0], f"{count} x {name} (the GPUs the driver reports)"
    raise CapabilityError(
        f"this host has {count} x {name}; "
        + (
            f"the plans for {', '.join(h.name.removesuffix('.json') for h in hits)} all match it"
            if hits
            else f"none of the plans ({', '.join(types)}) is for that hardware"
        )
        + "; refusing to guess",
        hint="the instance type decides when resourceconfig.json names it",
    )
