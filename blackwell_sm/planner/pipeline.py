"""The planner as one pipeline, each step a module, each visited once and in this order:

    frame      spec → Problem (context, pins, counts, deadline, objective)      frame.py
    candidates + evaluate, per instance count and precision (a Table)         search.py
    pick       configuration → precision → instance count, by the objective    pick.py
    explain    reasons, warnings, advice, runner-ups, the other objective      explain.py
    assemble   the Plan                                                        assemble.py

`make_plan` runs it; `pinned_plan` evaluates one given configuration with the same models
(no search). Pure given their inputs: no file or variable is read (the edges resolve the
calibration profile: `profile.profile_for`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import InstanceType
from blackwell_sm.planner.assemble import assemble_plan
from blackwell_sm.planner.explain import explain
from blackwell_sm.planner.frame import Pins, check_pins, context, frame
from blackwell_sm.planner.notes import reason
from blackwell_sm.planner.pick import choose
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.search import Candidate, evaluate
from blackwell_sm.planner.table import Table
from blackwell_sm.spec import RunSpec

if TYPE_CHECKING:
    from blackwell_sm.planner.profile import AppliedProfile


def make_plan(
    spec: RunSpec,
    *,
    instance: InstanceType | None = None,
    calibration: AppliedProfile | None = None,
) -> Plan:
    """Choose the configuration for `spec` and predict its memory, speed, time and cost.

    Never raises for infeasibility: returns `feasible=False` with the candidate needing the least
    memory and `advice`. Raises SpecError for pins, capacity or an objective that cannot be
    honoured. `instance=None` uses `spec.compute.instance_type` and `instance_count`; a local
    instance (`hardware.local_instance`) is one machine. `calibration`: the profile to apply,
    loaded by the caller (`profile.profile_for(spec)` at the edges); None plans with
    calibration.py's constants. The objective is `spec.compute.optimize`.
    """
    problem = frame(spec, instance, calibration)
    table = Table(problem.ctx, problem.pins)
    choice = choose(table, problem)
    words = explain(problem, choice)
    return assemble_plan(
        spec,
        problem.ctx.instance,
        choice.best,
        choice.feasible and not choice.late,
        words.alternatives,
        problem.ctx.price_per_hour,
        problem.local,
        notes=words.notes,
        constants=problem.ctx.constants,
        calibration=problem.calibration,
        objective=problem.objective,
        other=words.other,
    )


def pinned_plan(
    spec: RunSpec,
    config: dict[str, Any],
    *,
    instance: InstanceType | None = None,
    instance_count: int | None = None,
    calibration: AppliedProfile | None = None,
) -> Plan:
    """The plan for exactly `config` (PlanConfig keys but `seq_len`, which comes from the spec),
    predicted by the same models as `make_plan`, for tests and benchmarks that need a
    configuration the search would not choose. No search: no alternatives, no advice.

    `instance_count` defaults to the spec's (1 for a local instance or `auto`).
    """
    ctx, local, notes, cal_ref = context(spec, instance, calibration)
    if instance_count is None:
        n = spec.compute.instance_count
        instance_count = 1 if local or not isinstance(n, int) else n
    cand = Candidate(instance_count=instance_count, **config)
    world = instance_count * ctx.instance.gpus_per_instance
    if cand.world != world:
        raise SpecError(
            f"shard_degree x replicate_degree = {cand.world}, but {instance_count} x "
            f"{ctx.instance.gpus_per_instance} = {world} GPUs",
            field="config.shard_degree",
        )
    check_pins(
        ctx,
        instance_count,
        Pins(precision=cand.precision, cp_degree=cand.cp_degree, shard_degree=cand.shard_degree),
    )
    e = evaluate(ctx, cand)
    return assemble_plan(
        spec,
        ctx.instance,
        e,
        e.fits,
        [],
        ctx.price_per_hour,
        local,
        notes=[*notes, reason("pinned_config", "pinned configuration (not searched)")],
        constants=ctx.constants,
        calibration=cal_ref,
        objective=spec.compute.optimize,
    )
