"""The planner's entry points: `plan(...)` for notebooks, and `make_plan(spec)` / `pinned_plan`
(the pipeline, `planner/pipeline.py`) re-exported here for callers that import them from the
planner's front door.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.planner.pipeline import make_plan, pinned_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PreferencePlans, plan_preferences
from blackwell_sm.spec import RunSpec

__all__ = ["make_plan", "pinned_plan", "plan"]


def plan(spec: RunSpec | str | Path | dict[str, Any], **overrides: Any) -> Plan | PreferencePlans:
    """Notebook entry: a RunSpec, a YAML path, a mapping, or a preset name; `overrides` are
    `--set` style keys (plan config keys or dotted spec paths), e.g. `plan("llama-3.1-8b",
    seq_len=8192, precision="bf16")`. `instance=` takes an InstanceType (e.g. local_instance);
    `calibration=` a profile path (docs/calibration.md); `optimize=` "time" (default) or "cost"
    (= compute.optimize). A spec with `compute.instance_preferences` gives a PreferencePlans: a
    plan per type."""
    from blackwell_sm.planner.profile import AppliedProfile, profile_for
    from blackwell_sm.spec import load_spec, parse_spec, with_overrides
    from blackwell_sm.spec.presets import PRESETS

    instance = overrides.pop("instance", None)
    cal = overrides.pop("calibration", None)  # a profile path, or an AppliedProfile
    if "optimize" in overrides:
        overrides["compute.optimize"] = overrides.pop("optimize")
    if isinstance(spec, RunSpec):
        rs = spec
    elif isinstance(spec, dict):
        rs = parse_spec(spec)
    elif isinstance(spec, str) and spec in PRESETS:
        rs = parse_spec({"model": spec})
    elif isinstance(spec, (str, Path)):
        rs = load_spec(spec)
    else:
        raise SpecError(
            f"plan() takes a RunSpec, a path, a mapping or a preset name, not {type(spec).__name__}",
            field="spec",
        )
    if overrides:
        rs = with_overrides(rs, overrides)
    applied = cal if isinstance(cal, AppliedProfile) else profile_for(rs, cal)
    if rs.compute.instance_preferences and instance is None:
        return plan_preferences(rs, calibration=applied)
    return make_plan(rs, instance=instance, calibration=applied)
