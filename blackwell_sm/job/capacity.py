"""The capacity part of the request (pure): the training plan ARN of a single-type job, or
`ResourceConfig.InstancePreferences` for a spec with `compute.instance_preferences`.

The one module of the job layer that tells the two apart: the request builder, submit and the
SDK views take a `PlanSet` (planner/preferences.py) and ask this module for what differs
(`check_plan_set`, `capacity_for`, `plan_files`, `instance_types`).

The request lists the preferences in the spec's order, each with its planned count and, when it
has one, its training plan ARN. SageMaker starts the job on the first type with capacity. The
list excludes `InstanceType`, `InstanceCount`, `TrainingPlanArn`, `InstanceGroups`,
`InstancePlacementConfig` and managed spot training (`validate.preference_exclusions` checks
the request before any call).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from blackwell_sm.errors import InfeasiblePlanError, SpecError
from blackwell_sm.hardware import get_instance
from blackwell_sm.job.request_checks import check_plan_matches
from blackwell_sm.planner.preferences import PlanSet, PreferencePlans
from blackwell_sm.spec.compute import TRAINING_PLAN_ARN_RE
from blackwell_sm.spec.run import RunSpec


class Capacity(BaseModel):
    """What the request takes from the capacity: the head of ResourceConfig, the training plan
    (resolved or not) and the `bsm:training-plan` tag."""

    model_config = ConfigDict(extra="forbid")

    resource: dict[str, Any] = Field(
        description="InstanceType and InstanceCount, or InstancePreferences."
    )
    training_plan_arn: str | None = None
    unresolved_training_plan: str | None = None
    unresolved_preference_plans: list[str] = Field(default_factory=list)
    plan_tag: str | None = Field(None, description="The bsm:training-plan tag's value, if any.")


def check_plan_set(spec: RunSpec, plans: PlanSet) -> None:
    """The plans were made for this spec's capacity (its type and count, or each preference)."""
    if plans.preferences is not None:
        check_preference_plans(spec, plans.preferences)
    elif spec.compute.instance_preferences:
        raise SpecError(
            "the spec has compute.instance_preferences: build the job from a plan per "
            "preference (planner.preferences.plan_preferences(spec)), not one plan",
            field="compute.instance_preferences",
        )
    else:
        check_plan_matches(spec, plans.primary)


def capacity_for(
    spec: RunSpec,
    plans: PlanSet,
    region: str,
    *,
    training_plan_arn: str | None,
    preference_arns: dict[int, str] | None,
    warnings: list[str],
) -> Capacity:
    """The capacity members of the request for `plans` (ARNs checked against `region`)."""
    if plans.preferences is not None:
        entries, unresolved = preference_entries(
            plans.preferences, region, preference_arns, warnings
        )
        refs = [
            pp.training_plan.rsplit("/", 1)[-1]
            for pp in plans.preferences.preferences
            if pp.training_plan
        ]
        return Capacity(
            resource={"InstancePreferences": entries},
            unresolved_preference_plans=unresolved,
            plan_tag=" ".join(refs)[:256] or None,
        )
    plan = plans.primary
    arn, name = resolve_training_plan_arn(spec, region, training_plan_arn, warnings)
    ref = arn or (None if name == "auto" else name)
    return Capacity(
        resource={"InstanceType": plan.instance.type, "InstanceCount": plan.instance.count},
        training_plan_arn=arn,
        unresolved_training_plan=name,
        plan_tag=ref.rsplit("/", 1)[-1] if ref else None,
    )


def refuse_preferences(spec: RunSpec, view: str) -> None:
    """SpecError for a spec with instance preferences where `view` (an SDK view) takes one
    type: the bundle's plan per type is built only by `bsm submit`."""
    if spec.compute.instance_preferences:
        raise SpecError(
            f"{view} does not map compute.instance_preferences: the SDK passes the list "
            "through, but the bundle's plan per type is built only by `bsm submit`",
            field="compute.instance_preferences",
            hint="submit with `bsm submit SPEC` (blackwell_sm.submit), or use one instance_type",
        )


def spec_instance_types(spec: RunSpec) -> list[str]:
    """Every type a job of `spec` may start on, from the spec alone (the caller's IAM policy)."""
    prefs = spec.compute.instance_preferences
    if prefs:
        return [p.instance_type for p in prefs]
    return [spec.compute.instance_type]


def instance_types(plans: PlanSet) -> list[str]:
    """Every type the job may start on, in order."""
    return [p.instance.type for p in plans.plans]


def check_preference_plans(spec: RunSpec, plans: PreferencePlans) -> None:
    """The plans were made from this spec's preferences, in order, and all fit."""
    prefs = spec.compute.instance_preferences or []
    if not prefs:
        raise SpecError(
            "a plan per instance preference was given, but the spec has no "
            "compute.instance_preferences",
            field="compute.instance_preferences",
        )
    got = [(p.instance_type, p.instance_count) for p in plans.preferences]
    want = [(p.instance_type, p.instance_count) for p in prefs]
    same = len(got) == len(want) and all(
        g[0] == w[0] and (w[1] == "auto" or g[1] == w[1]) for g, w in zip(got, want, strict=True)
    )
    if not same:
        raise SpecError(
            f"the plans are for {got} but compute.instance_preferences asks for {want}",
            field="compute.instance_preferences",
            hint="make the plans from this spec (planner.preferences.plan_preferences(spec))",
        )
    if not plans.feasible:
        try:
            plans.require_feasible()
        except InfeasiblePlanError as e:
            raise InfeasiblePlanError(
                "refusing to build a job for an infeasible preference: " + e.message,
                plan=e.plan,
                hint=e.hint,
            ) from None


def preference_entries(
    plans: PreferencePlans, region: str, arns: dict[int, str] | None, warnings: list[str]
) -> tuple[list[dict[str, Any]], list[str]]:
    """(InstancePreferences entries, '[i] NAME' for plan names not resolved to ARNs yet).

    `arns` maps a preference's index to the ARN the AWS layer resolved its plan name into.
    """
    arns = arns or {}
    entries: list[dict[str, Any]] = []
    unresolved: list[str] = []
    for pp in plans.preferences:
        field = f"compute.instance_preferences.{pp.index}.training_plan"
        entry: dict[str, Any] = {
            "InstanceType": pp.instance_type,
            "InstanceCount": pp.instance_count,
        }
        ref = pp.training_plan
        arn = arns.get(pp.index) or (ref if ref and ref.startswith("arn:") else None)
        if arn is None and ref is not None:
            unresolved.append(f"[{pp.index}] {ref}")
            warnings.append(
                f"{field} {ref!r} is not resolved to an ARN yet: this request has no "
                "TrainingPlanArns for it (submit resolves it before sending)"
            )
        if arn is not None:
            if not TRAINING_PLAN_ARN_RE.match(arn):
                raise SpecError(f"training plan ARN {arn!r} is malformed", field=field)
            if arn.split(":")[3] != region:
                raise SpecError(
                    f"training plan {arn} is in {arn.split(':')[3]} but the job runs in {region}",
                    field=field,
                    hint="a job can only use a training plan of its own region",
                )
            if not get_instance(pp.instance_type).supports_training_plans:
                raise SpecError(f"{pp.instance_type} cannot run on a training plan", field=field)
            entry["TrainingPlanArns"] = [arn]
        entries.append(entry)
    return entries, unresolved


def plan_files(plans: PlanSet) -> dict[str, str] | None:
    """Bundle path -> plan JSON, one per preference (`plans/<instance-type>.json`); None for a
    one-type job (its plan is the bundle's plan.json alone)."""
    if plans.preferences is None:
        return None
    return {pp.plan_file: pp.plan.to_json() for pp in plans.preferences.preferences}


def resolve_training_plan_arn(
    spec: RunSpec, region: str, training_plan_arn: str | None, warnings: list[str]
) -> tuple[str | None, str | None]:
    """(ARN to send, unresolved name/'auto')."""
    wanted = spec.compute.training_plan
    arn = training_plan_arn or (wanted if wanted and wanted.startswith("arn:") else None)
    unresolved = None
    if arn is None and wanted is not None:
        unresolved = wanted
        warnings.append(
            f"compute.training_plan {wanted!r} is not resolved to an ARN yet: this request has "
            "no TrainingPlanArn (submit resolves it before sending)"
        )
    if arn is not None:
        if not TRAINING_PLAN_ARN_RE.match(arn):
            raise SpecError(
                f"training plan ARN {arn!r} does not look like "
                "arn:aws:sagemaker:REGION:ACCOUNT:training-plan/NAME",
                field="compute.training_plan",
            )
        arn_region = arn.split(":")[3]
        if arn_region != region:
            raise SpecError(
                f"training plan {arn} is in {arn_region} but the job runs in {region}",
                field="compute.training_plan",
                hint="a job can only use a training plan of its own region",
            )
        if not get_instance(spec.compute.instance_type).supports_training_plans:
            raise SpecError(
                f"{spec.compute.instance_type} cannot run on a training plan",
                field="compute.training_plan",
            )
    return arn, unresolved
