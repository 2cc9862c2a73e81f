"""`bsm plan`: choose and explain a training configuration (no AWS calls, no torch)."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json
from blackwell_sm.cli.plan_render import render, render_preferences, render_summary, render_trace
from blackwell_sm.errors import SpecError


def _count(value: str | None) -> int | str | None:
    if value is None or value == "auto":
        return value
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise click.BadParameter(
            f"{value!r} is not a positive integer or 'auto'", param_hint="'--instance-count'"
        )
    return n


def _parse_sets(items: tuple[str, ...]) -> dict[str, Any]:
    """`--set KEY=VALUE` pairs; VALUE is a YAML 1.2 scalar read by the spec file's own rules."""
    from blackwell_sm.safe_load import parse_scalar
    from blackwell_sm.spec.run import override_path

    out: dict[str, Any] = {}
    seen: dict[str, str] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SpecError(f"--set takes KEY=VALUE, got {item!r}", field="--set")
        value = parse_scalar(raw, field=key) if raw.strip() else raw
        path = override_path(key)
        if path in seen and out[seen[path]] != value:
            raise SpecError(
                f"--set {seen[path]}={out[seen[path]]} and --set {key}={value} both set "
                f"{path}; give it once",
                field=path,
            )
        seen[path] = key
        out[key] = value
    return out


# Each flag and the spec paths a --set must not also set (nothing is resolved silently).
FLAG_PATHS: dict[str, tuple[str, ...]] = {
    "--model": ("model",),
    "--instance-type": ("compute.instance_type",),
    "--instance-count": ("compute.instance_count",),
    "--seq-len": ("training.seq_len",),
    "--global-batch-tokens": ("training.global_batch_tokens", "training.global_batch_seqs"),
    "--total-tokens": ("training.total_tokens", "training.total_steps"),
    "--calibration": ("compute.calibration",),
    "--optimize": ("compute.optimize",),
}


def check_flag_conflicts(flags: dict[str, Any], sets: dict[str, Any]) -> None:
    """Refuse a flag and a --set that set the same spec field, naming both (exit 2)."""
    from blackwell_sm.spec.run import override_path

    for flag, value in flags.items():
        if value is None:
            continue
        for key, set_value in sets.items():
            path = override_path(key)
            hit = next((p for p in FLAG_PATHS[flag] if path == p), None)
            if hit:
                raise SpecError(
                    f"{flag} {value} and --set {key}={set_value} both set {hit}; give one",
                    field=hit,
                    hint=f"drop {flag} or the --set {key}",
                )


@click.command("plan")
@click.argument("spec_path", metavar="[SPEC]", required=False)
@click.option("--model", "model", metavar="PRESET", help="Plan a preset instead of a SPEC file.")
@click.option("--instance-type", metavar="TYPE", help="e.g. ml.p6-b200.48xlarge.")
@click.option("--instance-count", metavar="N|auto", help="Instances, or auto: the fewest that fit.")
@click.option("--seq-len", type=click.IntRange(min=1), help="Tokens per sequence.")
@click.option("--global-batch-tokens", type=click.IntRange(min=1), help="Tokens per step.")
@click.option("--total-tokens", type=click.IntRange(min=1), help="Tokens to train on.")
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Pin a config knob (shard_degree, micro_batch_size, precision, ...) or set a dotted "
    "spec path; VALUE is a YAML scalar.",
)
@click.option(
    "--calibration",
    metavar="FILE",
    help="Apply a calibration profile (bsm calibrate); overrides compute.calibration and "
    "$BSM_CALIBRATION.",
)
@click.option(
    "--optimize",
    type=click.Choice(["time", "cost"]),
    help="What instance_count auto optimizes (compute.optimize): time (default: the fewest "
    "instances that finish within the deadline) or cost (the cheapest count).",
)
@click.option(
    "--verbose", "-v", is_flag=True, help="Everything: every term, reason, warning, runner-up."
)
@click.option(
    "--trace",
    is_flag=True,
    help="Also run the plan's training step at full size on fake tensors (needs torch: the "
    "[train] extra; no GPU, no AWS) and show the traced peak per GPU beside the prediction.",
)
@OUTPUT_OPTION
def plan(
    spec_path: str | None,
    model: str | None,
    instance_type: str | None,
    instance_count: str | None,
    seq_len: int | None,
    global_batch_tokens: int | None,
    total_tokens: int | None,
    sets: tuple[str, ...],
    calibration: str | None,
    optimize: str | None,
    verbose: bool,
    trace: bool,
    output: str,
) -> None:
    """Choose shard degree, micro-batch, accumulation, checkpointing and precision for SPEC (or
    --model PRESET) and predict memory, speed, time and cost.

    Exit 2 on bad input, 3 when nothing fits (after printing the best candidate's prediction).
    """
    from blackwell_sm.planner.api import make_plan  # the front door (a test plants a fault there)
    from blackwell_sm.spec import load_spec, parse_spec, with_overrides

    count = _count(instance_count)
    if spec_path and model:
        raise SpecError("give a SPEC file or --model PRESET, not both", field="model")
    if not spec_path and not model:
        raise SpecError("give a SPEC file or --model PRESET", field="SPEC")
    sets_parsed = _parse_sets(sets)
    check_flag_conflicts(
        {
            "--model": model,
            "--instance-type": instance_type,
            "--instance-count": count,
            "--seq-len": seq_len,
            "--global-batch-tokens": global_batch_tokens,
            "--total-tokens": total_tokens,
            "--calibration": calibration,
            "--optimize": optimize,
        },
        sets_parsed,
    )
    spec = load_spec(spec_path) if spec_path else parse_spec({"model": model}, source="--model")
    overrides: dict[str, Any] = {}
    if instance_type:
        overrides["compute.instance_type"] = instance_type
    if count is not None:
        overrides["compute.instance_count"] = count
    if seq_len is not None:
        overrides["seq_len"] = seq_len
    if global_batch_tokens is not None:
        overrides["training.global_batch_tokens"] = global_batch_tokens
        overrides["training.global_batch_seqs"] = None
    if total_tokens is not None:
        overrides["training.total_tokens"] = total_tokens
        overrides["training.total_steps"] = None
    if optimize is not None:
        overrides["compute.optimize"] = optimize
    overrides.update(sets_parsed)
    if overrides:
        spec = with_overrides(spec, overrides)
    from blackwell_sm.planner.profile import profile_for
    from blackwell_sm.spec.hf_files import check_init_from

    check_init_from(spec)  # a local init_from's headers against the model, before planning

    applied = profile_for(spec, calibration)
    if spec.compute.instance_preferences:
        if trace:
            raise SpecError(
                "--trace traces one plan; this spec has compute.instance_preferences",
                field="--trace",
                hint="trace one preference's plan: bsm plan --instance-type TYPE --trace",
            )
        _plan_preferences(spec, output, applied)
        return
    p = make_plan(spec, calibration=applied)
    traced = _trace(p) if trace else None
    if output != "json":
        render(p) if verbose else render_summary(p)
        if traced is not None:
            render_trace(traced)
    elif p.feasible:
        emit_json(p if traced is None else traced)
    if not p.feasible:  # under --output json the error object carries the plan
        from blackwell_sm.planner.api import infeasible_error

        raise infeasible_error(p)


def _trace(p: Any) -> Any:
    """The plan with its traced step (planner/api.py `trace_plan`: exit 2 without torch)."""
    from blackwell_sm.planner.api import trace_plan
    from blackwell_sm.planner.trace_check import TracedPlan

    return TracedPlan(plan=p, trace=trace_plan(p))


def _plan_preferences(spec: Any, output: str, calibration: Any) -> None:
    """One plan per instance preference: a row each (or JSON with every plan); exit 3 if any
    preference cannot fit."""
    from blackwell_sm.planner.preferences import plan_preferences

    plans = plan_preferences(spec, calibration)
    if output == "json":
        if plans.feasible:
            emit_json(plans)
    else:
        render_preferences(plans)
    plans.require_feasible()
