"""The planner's entry points: `make_plan(spec)` (pure), `plan(...)` for notebooks, and
`pinned_plan(spec, config)` for a configuration the search would not choose (tests, benchmarks).

The search over one count is `search.py`, over counts `counts.py`; the words are `explain.py`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.hardware import InstanceType, get_instance
from blackwell_sm.opt_ml import is_local_run
from blackwell_sm.planner import calibration as C
from blackwell_sm.planner.assemble import assemble_plan
from blackwell_sm.planner.counts import choose_count, search_precisions
from blackwell_sm.planner.explain import (
    advice_for,
    alternatives,
    comm_bound,
    cp_reason,
    memory_relief,
    near_miss_advice,
    reasons_for,
)
from blackwell_sm.planner.memory import GIB
from blackwell_sm.planner.plan import (
    CalibrationRef,
    Plan,
)
from blackwell_sm.planner.precision import lowp_ineligible
from blackwell_sm.planner.profile import AppliedProfile, for_instance, profile_for
from blackwell_sm.planner.search import (
    MAX_INSTANCES,
    TRAINING_PLAN_COUNTS,
    Candidate,
    Context,
    Pins,
    check_pins,
    evaluate,
)
from blackwell_sm.planner.timing import scale_warnings, time_limit_notes
from blackwell_sm.spec import RunSpec
from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

DEFAULT_TOKENS_PER_PARAM = 20


def _pins(spec: RunSpec) -> Pins:
    tr, p = spec.training, spec.training.pins
    return Pins(
        shard_degree=p.shard_degree,
        replicate_degree=p.replicate_degree,
        micro_batch_size=p.micro_batch_size,
        grad_accum_steps=p.grad_accum_steps,
        precision=None if tr.precision == "auto" else tr.precision,
        activation_checkpointing=None
        if tr.activation_checkpointing == "auto"
        else tr.activation_checkpointing,
        compile=p.compile,
        reshard_after_forward=p.reshard_after_forward,
        cp_degree=p.cp_degree,
    )


def _context(
    spec: RunSpec, instance: InstanceType | None, applied: AppliedProfile | None = None
) -> tuple[Context, bool, list[str], CalibrationRef | None]:
    """(search context, is this a local run, warnings, the profile's record) for `spec` on
    `instance` or its own, with the calibration profile `applied` (if any)."""
    tr, comp, model = spec.training, spec.compute, spec.model
    local = instance is not None and is_local_run(instance.name)
    inst = instance or get_instance(comp.instance_type)
    inst, constants, changed = for_instance(applied and applied.profile, inst)
    ref = None
    warnings: list[str] = []
    if applied is not None:
        key, held = C.gpu_key(inst.gpu.name), applied.profile.gpus
        ref = CalibrationRef(
            profile=applied.path, name=applied.profile.name, created=applied.profile.created,
            origin=applied.origin, gpu=key if key in held else "",
            changed={k: {"default": a, "profile": b} for k, (a, b) in changed.items()},
            fitted=held[key].fitted_names() if key in held else [],
        )  # fmt: skip
        if key not in held:
            warnings.append(
                f"calibration profile {applied.path} has no entry for {inst.gpu.name} (it holds "
                f"{', '.join(held) or 'none'}): the default constants are used"
            )

    if tr.total_steps is None and tr.total_tokens is None:
        total_tokens = DEFAULT_TOKENS_PER_PARAM * model.n_params
        warnings.append(
            f"neither training.total_tokens nor total_steps is set: assuming "
            f"{DEFAULT_TOKENS_PER_PARAM} tokens per parameter ({total_tokens / 1e9:.1f}B tokens)"
        )
    else:
        total_tokens = tr.total_tokens
    price = None if local else (comp.price_per_hour or inst.price_per_hour)
    if not local and comp.price_per_hour is None and inst.price_source:
        warnings.append(f"price ${inst.price_per_hour}/h per instance: {inst.price_source}")
    ctx = Context(
        model, inst, tr.seq_len, tr.global_batch_sequences, total_tokens, tr.total_steps, price,
        packed=tr.task == "finetune", constants=constants, loss_impl=tr.loss_impl,
    )  # fmt: skip
    return ctx, local, warnings, ref


def make_plan(
    spec: RunSpec,
    *,
    instance: InstanceType | None = None,
    calibration: AppliedProfile | None = None,
) -> Plan:
    """Choose the configuration for `spec` and predict its memory, speed, time and cost.

    Pure given its inputs. Never raises for infeasibility: returns `feasible=False` with the
    candidate needing the least memory and `advice`. Raises SpecError for pins or capacity that
    cannot be honoured. `instance=None` uses `spec.compute.instance_type` and `instance_count`;
    a local instance (`hardware.local_instance`) is one machine. `calibration`: the profile to
    apply, loaded by the caller (`profile.profile_for(spec)` at the edges: the CLI, `plan()`,
    submit, run-local); None plans with calibration.py's constants. Reads nothing.
    """
    tr, comp, model = spec.training, spec.compute, spec.model
    if comp.instance_preferences and instance is None:  # never the default type in their place
        raise SpecError(
            "the spec has compute.instance_preferences: each type has its own plan "
            "(planner.preferences.plan_preferences, or bsm.plan(spec))",
            field="compute.instance_preferences",
        )
    ctx, local, warnings, cal_ref = _context(spec, instance, calibration)
    inst, price = ctx.instance, ctx.price_per_hour
    reasons: list[str] = []
    advice: list[str] = []
    pins = _pins(spec)

    plan_counts = comp.training_plan is not None and not local
    allowed = list(TRAINING_PLAN_COUNTS) if plan_counts else list(range(1, MAX_INSTANCES + 1))
    if local:
        if comp.instance_count not in (1, "auto"):
            warnings.append("local run: compute.instance_count is ignored (one machine)")
        count: int | str = 1
    else:
        count = comp.instance_count
    if isinstance(count, int) and plan_counts and count not in TRAINING_PLAN_COUNTS:
        raise SpecError(
            f"compute.instance_count {count} cannot be used with a training plan; allowed: "
            + ", ".join(map(str, TRAINING_PLAN_COUNTS)),
            field="compute.instance_count",
        )
    if pins.precision:
        check_pins(
            ctx,
            1 if count == "auto" else count,
            pins._replace(shard_degree=None, replicate_degree=None),
        )
    # Time is a constraint: the user's deadline, else one SageMaker job's 28 days.
    deadline = comp.deadline_hours if comp.deadline_hours is not None else float(MAX_RUNTIME_HOURS)
    late = False
    if count == "auto":
        n, res, prec_reasons, notes = choose_count(ctx, pins, allowed, deadline)
        check_pins(ctx, n, pins)
        for note in notes:
            (warnings if note.startswith("no instance") else reasons).append(note)
        late = res.feasible and res.best.hours > deadline
    else:
        n = count
        check_pins(ctx, n, pins)
        res, prec_reasons = search_precisions(ctx, n, pins)
    if res.feasible and not local:
        more, tips = time_limit_notes(ctx, pins, allowed, res.best, deadline, comp.deadline_hours)
        warnings.extend(more)
        if late:
            advice.extend(tips)

    best = res.best
    c = best.cand
    limit = inst.gpu.memory_gib
    reasons.extend(reasons_for(best, ctx, pins))
    why_cp = cp_reason(res.evaluated, best, ctx, pins)
    if why_cp:
        reasons.append(why_cp)
    if pins.precision:
        reasons.append(f"precision {c.precision} (pinned)")
        why = lowp_ineligible(model, c.precision)
        if why:
            warnings.append(f"precision {c.precision}: {why}; those linears stay bf16")
    else:
        reasons.extend(f"precision: {r}" for r in prec_reasons)
        if not any(r.startswith(("chose", "kept")) for r in prec_reasons):
            reasons.append(f"precision {c.precision}")
    if c.global_batch_seqs != tr.global_batch_sequences:
        warnings.append(
            f"global batch is {c.global_batch_seqs} sequences, not the {tr.global_batch_sequences} "
            f"asked: {c.world} GPUs x micro_batch_size {c.micro_batch_size} x grad_accum_steps "
            f"{c.grad_accum_steps}"
        )
    usable = limit * (1.0 - C.MEMORY_HEADROOM)
    if res.note:
        reasons.append(res.note)
    if best.fits and best.mem.total > 0.9 * limit * GIB:
        relief = memory_relief(res.evaluated, best, ctx)
        warnings.append(
            f"predicted memory {best.memory_gib:.1f} GiB is above 90% of {limit:.1f} GiB"
            + (f"; {relief}" if relief else "")
        )
    if res.feasible:
        advice.extend(near_miss_advice(res.evaluated, best, ctx))
        bound = comm_bound(best, ctx)
        if bound:
            warnings.append(bound)

    if not res.feasible:
        advice[:0] = advice_for(ctx, c.instance_count, pins, best, allowed)
        warnings.append(
            f"no configuration fits: the best candidate needs {best.memory_gib:.1f} GiB per GPU, "
            f"the usable limit is {usable:.1f} GiB ({limit:.1f} GiB less "
            f"{C.MEMORY_HEADROOM:.0%} headroom)"
        )
    if not local:
        warnings.extend(scale_warnings(c.instance_count))

    alts = alternatives(res.evaluated, best, ctx, pins, count_auto=count == "auto")
    return assemble_plan(spec, inst, best, res.feasible and not late, alts, price, local,
                     warnings=warnings, reasons=reasons, advice=advice,
                     constants=ctx.constants, calibration=cal_ref)  # fmt: skip


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
    ctx, local, warnings, cal_ref = _context(spec, instance, calibration)
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
    return assemble_plan(spec, ctx.instance, e, e.fits, [], ctx.price_per_hour, local,
                     warnings=warnings, reasons=["pinned configuration (not searched)"],
                     advice=[], constants=ctx.constants, calibration=cal_ref)  # fmt: skip


def plan(spec: RunSpec | str | Path | dict[str, Any], **overrides: Any) -> Plan:
    """Notebook entry: a RunSpec, a YAML path, a mapping, or a preset name; `overrides` are
    `--set` style keys (plan config keys or dotted spec paths), e.g. `plan("llama-3.1-8b",
    seq_len=8192, precision="bf16")`. `instance=` takes an InstanceType (e.g. local_instance);
    `calibration=` a profile path (docs/calibration.md).
    A spec with `compute.instance_preferences` gives a PreferencePlans: a plan per type."""
    from blackwell_sm.spec import load_spec, parse_spec, with_overrides
    from blackwell_sm.spec.presets import PRESETS

    instance = overrides.pop("instance", None)
    cal = overrides.pop("calibration", None)  # a profile path, or an AppliedProfile
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
        from blackwell_sm.planner.preferences import plan_preferences

        # a plan per preference
        return plan_preferences(rs, calibration=applied)  # type: ignore[return-value]
    return make_plan(rs, instance=instance, calibration=applied)
