"""A plan per instance preference (`compute.instance_preferences`), made by `make_plan` each.

SageMaker starts a job with `ResourceConfig.InstancePreferences` on the first type with
capacity, so each type needs a plan of its own: a plan made for 8 x B200 at 179 GiB does not fit
8 x H100 at 80 GiB. Each preference is planned as if it were the spec's only capacity (its own
type, count, training plan and price; the spec's deadline), by the planner's public entry.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field, model_validator

from blackwell_sm.errors import InfeasiblePlanError, SpecError
from blackwell_sm.opt_ml import plan_file_for
from blackwell_sm.planner.pipeline import make_plan
from blackwell_sm.planner.plan import Plan
from blackwell_sm.spec import ComputeSpec, InstancePreference, RunSpec

if TYPE_CHECKING:
    from blackwell_sm.planner.profile import AppliedProfile


class PreferencePlan(BaseModel):
    """One preference as planned: what the request lists and the plan the container runs."""

    model_config = ConfigDict(extra="forbid")

    index: int = Field(description="Position in compute.instance_preferences (0 = first).")
    instance_type: str = Field(description="The preference's instance type.")
    instance_count: int = Field(description="The planned count ('auto' resolved).")
    training_plan: str | None = Field(description="The preference's plan ARN or name, if any.")
    plan_file: str = Field(description="Where the code bundle carries this plan.")
    plan: Plan = Field(description="The plan for this preference's instances.")


class PreferencePlans(BaseModel):
    """`bsm plan --output json` for a spec with instance preferences: a plan per type."""

    model_config = ConfigDict(extra="forbid")

    preferences: list[PreferencePlan] = Field(description="A plan per preference, in order.")

    @property
    def feasible(self) -> bool:
        return all(p.plan.feasible for p in self.preferences)

    @property
    def primary(self) -> Plan:
        """The first preference's plan (the one SageMaker tries first)."""
        return self.preferences[0].plan

    @property
    def plans(self) -> list[Plan]:
        return [p.plan for p in self.preferences]

    def require_feasible(self) -> None:
        """InfeasiblePlanError (exit 3) naming every preference that cannot fit, and why."""
        bad = [p for p in self.preferences if not p.plan.feasible]
        if not bad:
            return
        reasons = "; ".join(
            f"instance_preferences[{p.index}] {p.instance_count} x {p.instance_type}: the best "
            f"candidate needs {p.plan.memory_gib.total:.1f} GiB per GPU of "
            f"{p.plan.memory_gib.limit:.1f} GiB"
            for p in bad
        )
        advice = [
            a.replace("compute.", f"compute.instance_preferences[{p.index}].")
            for p in bad
            for a in p.plan.advice[:1]
        ]
        raise InfeasiblePlanError(
            f"{len(bad)} of {len(self.preferences)} instance preferences cannot fit: {reasons}",
            plan=bad[0].plan,
            hint="drop "
            + ", ".join(f"compute.instance_preferences[{p.index}]" for p in bad)
            + " (SageMaker would start the job there and it would not run), or change it"
            + (f"; {'; '.join(advice)}" if advice else ""),
        )


class PlanSet(BaseModel):
    """What the planner hands on, in one shape: a plan per capacity choice, the first the one
    SageMaker tries first. A spec without instance preferences gives one plan; the per-preference
    capacity (types, counts, training plans, plan files) rides along in `preferences`, read only
    by `job/capacity.py`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    plans: list[Plan] = Field(min_length=1, description="First = primary.")
    preferences: PreferencePlans | None = Field(
        None, description="The plan per compute.instance_preferences entry, when the spec has them."
    )

    @model_validator(mode="after")
    def _same_plans(self) -> PlanSet:
        if self.preferences is not None and self.preferences.plans != self.plans:
            raise ValueError("plans must be the preferences' plans, in order")
        return self

    @property
    def primary(self) -> Plan:
        return self.plans[0]

    @property
    def others(self) -> list[Plan]:
        """The plans after the primary one (empty without instance preferences)."""
        return self.plans[1:]

    @property
    def feasible(self) -> bool:
        return all(p.feasible for p in self.plans)

    def require_feasible(self) -> None:
        """InfeasiblePlanError (exit 3) when a plan cannot fit: naming each preference that
        cannot, or the one type and count."""
        if self.preferences is not None:
            self.preferences.require_feasible()
            return
        p = self.primary
        if not p.feasible:
            raise InfeasiblePlanError(
                f"no configuration of {p.model.name} fits {p.instance.count} x {p.instance.type}",
                plan=p,
                hint="; ".join(p.advice) or "see `bsm plan SPEC`",
            )


def as_plan_set(plan: Plan | PreferencePlans | PlanSet) -> PlanSet:
    """The one place where what `plan()` returns becomes the shape the job layer takes."""
    if isinstance(plan, PlanSet):
        return plan
    if isinstance(plan, PreferencePlans):
        return PlanSet(plans=plan.plans, preferences=plan)
    return PlanSet(plans=[plan])


def preference_spec(spec: RunSpec, pref: InstancePreference) -> RunSpec:
    """`spec` with `pref` as its only capacity (what the planner and the container see)."""
    compute = ComputeSpec(
        instance_type=pref.instance_type,
        instance_count=pref.instance_count,
        training_plan=pref.training_plan,
        price_per_hour=pref.price_per_hour,
        deadline_hours=spec.compute.deadline_hours,
        optimize=spec.compute.optimize,
        confirm_cost_usd=spec.compute.confirm_cost_usd,  # the plan's cost warning: the spec's
    )
    return spec.model_copy(update={"compute": compute})


def plan_preferences(spec: RunSpec, calibration: AppliedProfile | None = None) -> PreferencePlans:
    """Plan every entry of `spec.compute.instance_preferences` (pure; infeasible ones included,
    `require_feasible` refuses them). SpecErrors name the preference's field."""
    prefs = spec.compute.instance_preferences
    if not prefs:
        raise SpecError(
            "the spec has no compute.instance_preferences", field="compute.instance_preferences"
        )
    out = []
    for i, pref in enumerate(prefs):
        try:
            plan = make_plan(preference_spec(spec, pref), calibration=calibration)
        except SpecError as e:
            field = e.field or "compute"
            if field.startswith("compute."):
                field = f"compute.instance_preferences.{i}.{field.removeprefix('compute.')}"
            raise SpecError(
                f"instance_preferences[{i}] ({pref.instance_type}): {e.message}",
                field=field,
                hint=e.hint,
            ) from None
        out.append(
            PreferencePlan(
                index=i,
                instance_type=plan.instance.type,
                instance_count=plan.instance.count,
                training_plan=pref.training_plan,
                plan_file=plan_file_for(plan.instance.type),
                plan=plan,
            )
        )
    return PreferencePlans(preferences=out)


def plan_set(spec: RunSpec, calibration: AppliedProfile | None = None) -> PlanSet:
    """The spec's plans in one shape: a plan per instance preference, or its one plan (pure;
    infeasible plans included: `PlanSet.feasible`)."""
    if spec.compute.instance_preferences:
        return as_plan_set(plan_preferences(spec, calibration))
    return as_plan_set(make_plan(spec, calibration=calibration))


def plan_for_type(
    spec: RunSpec, instance_type: str | None, calibration: AppliedProfile | None = None
) -> Plan:
    """The plan of `spec` on `instance_type`: with instance preferences, that preference's plan
    (a spec with preferences has no single plan: `instance_type` must name one); without, the
    spec's own plan (`instance_type` ignored, as the caller's flags already override the spec)."""
    prefs = spec.compute.instance_preferences
    if not prefs:
        return make_plan(spec, calibration=calibration)
    types = ", ".join(p.instance_type for p in prefs)
    for pref in prefs:
        if pref.instance_type == instance_type:
            return make_plan(preference_spec(spec, pref), calibration=calibration)
    raise SpecError(
        f"the spec has instance preferences ({types}) and each has its own plan: "
        + (f"{instance_type} is not one of them" if instance_type else "name one"),
        field="--instance-type",
        hint="pass --instance-type with one of the preference's types",
    )
