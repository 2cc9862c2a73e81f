"""`bsm plan`: choose and explain a training configuration (no AWS calls, no torch)."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.api.spec_input import FLAGS
from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json
from blackwell_sm.errors import SpecError

#: Each flag and the spec paths a --set must not also set (api/spec_input.py FLAGS).
FLAG_PATHS: dict[str, tuple[str, ...]] = {f.cli: f.paths for f in FLAGS}


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
    from blackwell_sm.api.plan import decide, require_feasible, spec_for
    from blackwell_sm.planner.profile import profile_for

    count = _count(instance_count)
    if spec_path and model:
        raise SpecError("give a SPEC file or --model PRESET, not both", field="model")
    if not spec_path and not model:
        raise SpecError("give a SPEC file or --model PRESET", field="SPEC")
    sets_parsed = _parse_sets(sets)
    flags = {
        "model": model,
        "instance_type": instance_type,
        "instance_count": count,
        "seq_len": seq_len,
        "global_batch_tokens": global_batch_tokens,
        "total_tokens": total_tokens,
        "calibration": calibration,
        "optimize": optimize,
    }
    source: Any = spec_path or _preset(model or "")
    spec = spec_for(source, flags, sets_parsed, cli=True)
    result = decide(spec, calibration=profile_for(spec, calibration), trace=trace)
    if output == "json":
        if _feasible(result):  # else the error object carries the plan (and its trace)
            emit_json(result)
    else:
        render_result(result, verbose=verbose)
    require_feasible(result)


def _preset(name: str) -> Any:
    """`--model NAME` as a spec (an unknown name: did-you-mean, naming --model)."""
    from blackwell_sm.spec import parse_spec

    return parse_spec({"model": name}, source="--model")


def _feasible(result: Any) -> bool:
    """A Plan's or a PreferencePlans' `feasible`; a TracedPlan's plan's."""
    return bool(getattr(result, "plan", result).feasible)


def render_result(result: Any, *, verbose: bool = False) -> None:
    """What `api.plan.decide` returned, for people: a table of the instance preferences, or the
    plan (summary, or everything with `verbose`) and its trace when one was run."""
    from blackwell_sm.cli.plan_render import (
        render,
        render_preferences,
        render_summary,
        render_trace,
    )
    from blackwell_sm.planner.preferences import PreferencePlans
    from blackwell_sm.planner.trace_check import TracedPlan

    if isinstance(result, PreferencePlans):
        render_preferences(result)
        return
    p = result.plan if isinstance(result, TracedPlan) else result
    render(p) if verbose else render_summary(p)
    if isinstance(result, TracedPlan):
        render_trace(result)
