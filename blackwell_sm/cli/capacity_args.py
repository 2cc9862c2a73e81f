"""The capacity a `bsm plans` command searches for or buys: from its flags, or sized from a
spec's plan by the one decider (`api.capacity.need_for`, job/capacity_need.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from blackwell_sm.cli.submit import say
from blackwell_sm.errors import SpecError

if TYPE_CHECKING:
    from blackwell_sm.job.capacity_need import CapacityNeed


class Capacity(NamedTuple):
    """What to search for or buy, and (from a spec) the sizing its hours came from."""

    instance_type: str
    instance_count: int
    hours: float
    region: str | None
    need: CapacityNeed | None


def capacity_for(
    spec_path: str | None,
    instance_type: str | None,
    count: int | None,
    hours: float | None,
    region: str | None,
) -> Capacity:
    """The capacity from the flags, else from SPEC's plan (sized by job/capacity_need.py)."""
    need = None
    if spec_path is not None:
        from blackwell_sm.api.capacity import need_for
        from blackwell_sm.spec import load_spec

        spec = load_spec(spec_path)
        plan, sized = need_for(spec, instance_type)
        instance_type = instance_type or plan.instance.type
        count = count or plan.instance.count
        if hours is None:
            hours, need = float(sized.plan_hours), sized
            say(f"duration {need.describe()}")
        region = region or (spec.job.region if spec.job else None)
    missing = [
        flag for flag, v in (("--instance-type", instance_type), ("--hours", hours)) if v is None
    ]
    if missing or instance_type is None or hours is None:
        raise SpecError(
            f"give SPEC.yaml or {' and '.join(missing)}",
            field=missing[0],
            hint="e.g. --instance-type ml.p6-b200.48xlarge --count 2 --hours 72",
        )
    return Capacity(instance_type, count or 1, float(hours), region, need)
