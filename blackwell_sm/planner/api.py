"""The planner's entry points: `plan(...)` for notebooks, and `make_plan(spec)` / `pinned_plan`
(the pipeline, `planner/pipeline.py`) re-exported here for callers that import them from the
planner's front door.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import Any, Literal, overload

from blackwell_sm.errors import InfeasiblePlanError, PlanWarning, SpecError
from blackwell_sm.planner.pipeline import make_plan, pinned_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PreferencePlans, plan_preferences
from blackwell_sm.planner.trace_check import TraceCheck, TracedPlan
from blackwell_sm.planner.units import hours_text
from blackwell_sm.spec import RunSpec

__all__ = ["infeasible_error", "make_plan", "pinned_plan", "plan", "trace_plan"]


def infeasible_error(p: Plan) -> InfeasiblePlanError:
    """The error for a plan that does not fit or misses the deadline: why, the advice as its
    hint, and the plan itself (the CLI's exit 3, `plan()`'s exception)."""
    m = p.memory_gib
    usable = m.usable if m.usable is not None else m.limit
    where = f"{p.model.name} on {p.instance.count} x {p.instance.type}"
    if m.total <= usable:
        msg = (
            f"{where} takes {hours_text(p.run.hours)}, past the deadline "
            "(compute.deadline_hours, or one SageMaker job's 28 days)"
        )
    else:
        msg = (
            f"{p.model.name} does not fit on {p.instance.count} x {p.instance.type}: the best "
            f"candidate needs {m.total:.1f} GiB per GPU of the usable {usable:.1f} GiB"
        )
    return InfeasiblePlanError(msg, plan=p, hint="; ".join(p.advice) or None)


@overload
def plan(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    allow_infeasible: bool = ...,
    trace: Literal[False] = ...,
    **overrides: Any,
) -> Plan | PreferencePlans: ...


@overload
def plan(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    allow_infeasible: bool = ...,
    trace: Literal[True],
    **overrides: Any,
) -> TracedPlan: ...


def plan(
    spec: RunSpec | str | Path | dict[str, Any],
    *,
    allow_infeasible: bool = False,
    trace: bool = False,
    **overrides: Any,
) -> Plan | PreferencePlans | TracedPlan:
    """Notebook entry: a RunSpec, a YAML path, a mapping, or a preset name; `overrides` are
    `--set` style keys (plan config keys or dotted spec paths), e.g. `plan("llama-3.1-8b",
    seq_len=8192, precision="bf16")`. `instance=` takes an InstanceType (e.g. local_instance);
    `calibration=` a profile path (docs/calibration.md); `optimize=` "time" (default) or "cost"
    (= compute.optimize). A spec with `compute.instance_preferences` gives a PreferencePlans: a
    plan per type; `as_plan_set(result)` (planner/preferences.py) gives either as the one shape
    the job layer takes.

    A plan that does not fit (or misses its deadline) raises InfeasiblePlanError carrying the
    plan (`err.plan`), unless `allow_infeasible=True`. Each plan warning is also issued with
    `warnings.warn` as a `PlanWarning` (its note's code on `.code`).

    `trace=True` (needs the `[train]` extra: torch) also runs the plan's real step on fake
    tensors (`trace_plan`) and returns a TracedPlan: `.plan`, and `.trace`, the prediction
    beside the traced peak term by term (docs/planner.md "Tracing the real loop").
    """
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
        plans = plan_preferences(rs, calibration=applied)
        for pp in plans.preferences:
            _warn(pp.plan, f"instance_preferences[{pp.index}] {pp.instance_type}: ")
        if not allow_infeasible:
            plans.require_feasible()
        return plans
    p = make_plan(rs, instance=instance, calibration=applied)
    _warn(p)
    if not p.feasible and not allow_infeasible:
        raise infeasible_error(p)
    return TracedPlan(plan=p, trace=trace_plan(p)) if trace else p


def trace_plan(p: Plan) -> TraceCheck:
    """`p`'s step traced at full size on fake tensors (blackwell_sm/train/trace.py: no GPU, no
    network), beside the planner's prediction in the traced form (planner/trace_check.py).
    Raises SpecError (exit 2) when torch, the `[train]` extra, is not installed."""
    from blackwell_sm.planner.trace_check import compare

    if importlib.util.find_spec("torch") is None:
        raise SpecError(
            "tracing a plan runs its training step on fake tensors and needs torch, which is "
            "not installed",
            field="--trace",
            hint="pip install 'blackwell-sm[train]' (torch, a few hundred MB), or plan "
            "without --trace",
        )
    from blackwell_sm.train.trace import trace_plan as run_trace  # lazy: torch

    return compare(p, run_trace(p).model_dump())


def _warn(p: Plan, prefix: str = "") -> None:
    """Each of the plan's warning notes as a PlanWarning (pointing at the caller of `plan()`)."""
    for note in p.notes:
        if note.kind == "warning":
            warnings.warn(PlanWarning(prefix + note.text, code=note.code), stacklevel=3)
