"""The plan front door: one decider for "which plan" and "which traced plan", called by
`bsm plan` (cli/plan.py, which only parses and renders) and by `blackwell_sm.plan()`.

`decide` makes what both print or return (a Plan, a plan per instance preference, or a plan and
its trace) and refuses what neither may do; `require_feasible` raises the one error for a plan
that cannot run. The container's `train/` is imported only inside `trace_plan`, when asked.
"""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, overload

from blackwell_sm.api.spec_input import (
    Optimize,
    check_flag_conflicts,
    check_override_keys,
    flag_overrides,
    read_spec,
)
from blackwell_sm.errors import InfeasiblePlanError, PlanWarning, SpecError
from blackwell_sm.planner import pipeline
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PreferencePlans, plan_preferences
from blackwell_sm.planner.trace_check import TraceCheck, TracedPlan
from blackwell_sm.planner.units import hours_text
from blackwell_sm.spec import RunSpec

if TYPE_CHECKING:
    from blackwell_sm.hardware import InstanceType
    from blackwell_sm.planner.profile import AppliedProfile

__all__ = ["decide", "infeasible_error", "plan", "require_feasible", "trace_plan", "traced_plan"]

PlanResult = Plan | PreferencePlans | TracedPlan
SpecInput = RunSpec | str | Path | dict[str, Any]


def decide(
    spec: RunSpec,
    *,
    calibration: AppliedProfile | None = None,
    instance: InstanceType | None = None,
    trace: bool = False,
) -> PlanResult:
    """The plan(s) for `spec`, infeasible ones included: a PreferencePlans for a spec with
    `compute.instance_preferences` (no `instance`), a TracedPlan with `trace` (any plan, so the
    trace of one that does not fit is shown too), else a Plan. A local `training.init_from` is
    checked against the model first; `trace` of a spec with preferences is refused (exit 2)."""
    from blackwell_sm.spec.hf_files import check_init_from

    check_init_from(spec)  # a local init_from's headers against the model, before planning
    if spec.compute.instance_preferences and instance is None:
        if trace:
            raise SpecError(
                "--trace traces one plan; this spec has compute.instance_preferences",
                field="--trace",
                hint="trace one preference's plan: a copy of the spec without "
                "compute.instance_preferences, with that preference's compute.instance_type "
                "and instance_count",
            )
        return plan_preferences(spec, calibration)
    p = pipeline.make_plan(spec, instance=instance, calibration=calibration)
    return TracedPlan(plan=p, trace=trace_plan(p)) if trace else p


def infeasible_error(p: Plan, trace: TraceCheck | None = None) -> InfeasiblePlanError:
    """The error for a plan that does not fit or misses the deadline: why, the advice as its
    hint, the plan itself (and its trace, when one was run): the CLI's exit 3, `plan()`'s
    exception."""
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
    return InfeasiblePlanError(msg, plan=p, hint="; ".join(p.advice) or None, trace=trace)


def require_feasible(result: PlanResult) -> None:
    """Raise the one error (exit 3) for a result that cannot run; return for one that can."""
    if isinstance(result, PreferencePlans):
        result.require_feasible()
    elif isinstance(result, TracedPlan):
        if not result.plan.feasible:
            raise infeasible_error(result.plan, result.trace)
    elif not result.feasible:
        raise infeasible_error(result)


def spec_for(
    spec: SpecInput,
    flags: dict[str, Any],
    overrides: dict[str, Any],
    *,
    cli: bool = False,
) -> RunSpec:
    """`spec` read, with the common flags (`flags`: keyword -> value, None = not given) and the
    `--set` overrides applied, after the refusals both front doors share."""
    from blackwell_sm.spec import with_overrides

    check_flag_conflicts(flags, overrides, cli=cli)
    if not cli:
        check_override_keys(overrides)
    rs = read_spec(spec)
    given = {k: v for k, v in flags.items() if k not in ("model", "calibration")}
    changes = {**flag_overrides(**given), **overrides}
    return with_overrides(rs, changes) if changes else rs


@overload
def plan(
    spec: SpecInput,
    *,
    allow_infeasible: bool = ...,
    trace: Literal[False] = ...,
    instance_type: str | None = ...,
    instance_count: int | Literal["auto"] | None = ...,
    seq_len: int | None = ...,
    global_batch_tokens: int | None = ...,
    total_tokens: float | None = ...,
    optimize: Optimize | None = ...,
    calibration: str | Path | AppliedProfile | None = ...,
    instance: InstanceType | None = ...,
    **overrides: Any,
) -> Plan | PreferencePlans: ...


@overload
def plan(
    spec: SpecInput,
    *,
    allow_infeasible: bool = ...,
    trace: Literal[True],
    instance_type: str | None = ...,
    instance_count: int | Literal["auto"] | None = ...,
    seq_len: int | None = ...,
    global_batch_tokens: int | None = ...,
    total_tokens: float | None = ...,
    optimize: Optimize | None = ...,
    calibration: str | Path | AppliedProfile | None = ...,
    instance: InstanceType | None = ...,
    **overrides: Any,
) -> TracedPlan: ...


def plan(
    spec: SpecInput,
    *,
    allow_infeasible: bool = False,
    trace: bool = False,
    instance_type: str | None = None,
    instance_count: int | Literal["auto"] | None = None,
    seq_len: int | None = None,
    global_batch_tokens: int | None = None,
    total_tokens: float | None = None,
    optimize: Optimize | None = None,
    calibration: str | Path | AppliedProfile | None = None,
    instance: InstanceType | None = None,
    **overrides: Any,
) -> PlanResult:
    """Notebook entry, `bsm plan` as a function: a RunSpec, a YAML path, a mapping, or a preset
    name (`plan("llama-3.1-8b", seq_len=8192, total_tokens=20e9)`). The keywords are the CLI's
    flags; `overrides` are `--set` keys (plan config keys or dotted spec paths:
    `precision="bf16"`, `**{"training.optimizer.lr": 1e-4}`). `instance=` takes an InstanceType
    (e.g. local_instance); `calibration=` a profile path (docs/calibration.md).

    Returns a Plan, or a PreferencePlans for a spec with `compute.instance_preferences`
    (`as_plan_set` gives either as the job layer's shape). `trace=True` (the `[train]` extra:
    torch) returns a TracedPlan (`.plan`, `.trace`), and is refused for a spec with preferences,
    as `bsm plan --trace` refuses it. A plan that does not fit (or misses its deadline) raises
    InfeasiblePlanError (`err.plan`), unless `allow_infeasible=True`. Each plan warning is also
    issued with `warnings.warn` as a PlanWarning (its note's code on `.code`).
    """
    flags = {
        "instance_type": instance_type,
        "instance_count": instance_count,
        "seq_len": seq_len,
        "global_batch_tokens": global_batch_tokens,
        "total_tokens": None if total_tokens is None else int(total_tokens),
        "optimize": optimize,
    }
    return _plan(spec, flags, overrides, allow_infeasible, trace, calibration, instance)


def _plan(
    spec: SpecInput,
    flags: dict[str, Any],
    overrides: dict[str, Any],
    allow_infeasible: bool,
    trace: bool,
    calibration: str | Path | AppliedProfile | None,
    instance: InstanceType | None,
) -> PlanResult:
    """`plan()`'s body, shared with `traced_plan` (warnings point at their caller)."""
    from blackwell_sm.planner.profile import AppliedProfile, profile_for

    rs = spec_for(spec, flags, overrides)
    if isinstance(calibration, AppliedProfile):
        applied: AppliedProfile | None = calibration
    else:
        applied = profile_for(rs, calibration)
    result = decide(rs, calibration=applied, instance=instance, trace=trace)
    _warn(result)
    if not allow_infeasible:
        require_feasible(result)
    return result


def traced_plan(
    spec: SpecInput,
    *,
    allow_infeasible: bool = False,
    calibration: str | Path | AppliedProfile | None = None,
    instance: InstanceType | None = None,
    **keywords: Any,
) -> TracedPlan:
    """`plan(spec, trace=True, ...)`, typed: the plan and its traced step (the same keywords)."""
    names = ("instance_type", "instance_count", "seq_len", "global_batch_tokens", "optimize")
    flags: dict[str, Any] = {k: keywords.pop(k, None) for k in names}
    tokens = keywords.pop("total_tokens", None)
    flags["total_tokens"] = None if tokens is None else int(tokens)
    result = _plan(spec, flags, keywords, allow_infeasible, True, calibration, instance)
    assert isinstance(result, TracedPlan)
    return result


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


def _warn(result: PlanResult) -> None:
    """Each plan warning as a PlanWarning, pointing at the caller of `plan()`."""
    if isinstance(result, PreferencePlans):
        pairs = [
            (pp.plan, f"instance_preferences[{pp.index}] {pp.instance_type}: ")
            for pp in result.preferences
        ]
    else:
        pairs = [(result.plan if isinstance(result, TracedPlan) else result, "")]
    for p, prefix in pairs:
        for note in p.notes:
            if note.kind == "warning":
                # _warn, _plan, plan() or traced_plan(), then the caller
                warnings.warn(PlanWarning(prefix + note.text, code=note.code), stacklevel=4)
