"""`bsm plan`: choose and explain a training configuration (no AWS calls, no torch)."""

from __future__ import annotations

from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json
from blackwell_sm.errors import InfeasiblePlanError, SpecError
from blackwell_sm.planner.units import count_text, hours_text, seconds_text, usd_text


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
        _plan_preferences(spec, output, applied)
        return
    p = make_plan(spec, calibration=applied)
    if output != "json":
        render(p)
    elif p.feasible:
        emit_json(p)
    if not p.feasible:  # under --output json the error object carries the plan
        m = p.memory_gib
        usable = m.usable if m.usable is not None else m.limit
        if m.total <= usable:
            msg = (
                f"{p.model.name} on {p.instance.count} x {p.instance.type} takes "
                f"{hours_text(p.run.hours)}, past the deadline (compute.deadline_hours, or one "
                "SageMaker job's 28 days)"
            )
        else:
            msg = (
                f"{p.model.name} does not fit on {p.instance.count} x {p.instance.type}: the "
                f"best candidate needs {m.total:.1f} GiB per GPU of the usable {usable:.1f} GiB"
            )
        raise InfeasiblePlanError(msg, plan=p, hint="; ".join(p.advice) or None)


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


def render_preferences(plans: Any) -> None:
    """The preferences as one table, a row per instance type, in SageMaker's order."""
    from rich.table import Table

    from blackwell_sm.cli.output import out_console, text

    con = out_console()
    first = plans.primary
    con.print(
        text(
            (first.model.name, "bold"),
            f" ({count_text(first.model.n_params)} params): {len(plans.preferences)} instance "
            "preferences, each with its own plan (SageMaker starts on the first with capacity)",
        )
    )
    table = Table(title="instance preferences", title_justify="left")
    for col in ("#", "instances", "capacity", "fits", "GiB/GPU", "config", "tok/s/GPU", "hours",
                "cost", "plan file"):  # fmt: skip
        table.add_column(col)
    for pp in plans.preferences:
        p, c = pp.plan, pp.plan.config
        cost = "n/a" if p.run.cost_usd is None else usd_text(p.run.cost_usd)
        cells = [
            str(pp.index),
            f"{pp.instance_count} x {pp.instance_type}",
            pp.training_plan.rsplit("/", 1)[-1] if pp.training_plan else "on-demand",
            "yes" if p.feasible else ("NO", "bold red"),
            f"{_gib(p.memory_gib.total)} / {_gib(p.memory_gib.usable or p.memory_gib.limit)}",
            f"{c.precision} shard {c.shard_degree}x{c.replicate_degree} mb {c.micro_batch_size}"
            f" ga {c.grad_accum_steps} ac {c.activation_checkpointing}",
            f"{p.throughput.tokens_per_s_per_gpu:,.0f}",
            hours_text(p.run.hours),
            cost,
            pp.plan_file,
        ]
        table.add_row(*(text(cell) for cell in cells))  # literal: plan names are user text
    con.print(table)
    for pp in plans.preferences:
        for title, items, style in (("warnings", pp.plan.warnings, "yellow"),
                                    ("to make it fit", pp.plan.advice, "bold")):  # fmt: skip
            for item in items:
                con.print(text((f"[{pp.index}] {title}: ", "bold"), (item, style)))


def _gib(x: float) -> str:
    return f"{x:,.1f}"


# long function: the plan output, section by section (to be shortened: issue 21 item 3)
def render(p: Any) -> None:
    """The plan as rich tables on stdout (people); JSON has the same facts for scripts.
    Nothing is cut: long values wrap, runner-ups are lines with the flags that select them."""
    from rich.table import Table

    from blackwell_sm.cli.output import out_console, text
    from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

    con = out_console()
    c, m, t, r = p.config, p.memory_gib, p.throughput, p.run
    status = ("fits", "green") if p.feasible else ("does NOT fit", "bold red")
    if not p.feasible and m.usable is not None and m.total <= m.usable:
        status = ("misses the deadline", "bold red")
    elif p.feasible and r.jobs > 1:
        # Never a bare "fits" for a run that outlives one job: the time is the headline too.
        longer = r.hours > MAX_RUNTIME_HOURS
        status = (
            f"fits in memory, but {'takes' if longer else 'may take'} "
            f"{hours_text(r.hours if longer else r.hours_range[1])}, longer than one 28-day "
            "SageMaker job (see warnings)",
            "bold yellow",
        )
    con.print(
        text(
            (p.model.name, "bold"),
            f" ({count_text(p.model.n_params)} params) on {p.instance.count} x "
            f"{p.instance.type} ({p.instance.gpus_per_instance} x {p.instance.gpu}): ",
            status,
        )
    )
    cfg = Table(title="configuration", show_header=False, title_justify="left")
    for k, v in c.model_dump().items():
        cfg.add_row(k, str(v).lower() if isinstance(v, bool) else str(v))
    mem = Table(title="memory per GPU (GiB)", title_justify="left")
    mem.add_column("term")
    mem.add_column("GiB", justify="right")
    for k, v in m.model_dump().items():
        if k in ("total", "limit", "usable", "allocator_reserved") or v is None:
            continue
        mem.add_row(k, _gib(v))
    mem.add_row(text(("total", "bold")), text((_gib(m.total), "bold")))
    if m.usable is not None:
        mem.add_row("usable", f"{_gib(m.usable)} ({m.total / m.usable:.0%} used)")
    mem.add_row("device", _gib(m.limit))
    con.print(cfg, mem)
    rng = t.tokens_per_s_per_gpu_range
    con.print(
        text(
            ("speed", "bold"),
            f": {t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
            + (f" (range {rng[0]:,.0f}-{rng[1]:,.0f}, constants {t.evidence})" if rng else "")
            + f", step {seconds_text(t.step_time_s)}, MFU {t.mfu:.1%}  ",
            (f"(MFU basis: {t.mfu_basis})", "dim"),
        )
    )
    if p.calibration is not None:
        cal = p.calibration
        what = ", ".join(
            f"{k} {_short(v['default'])} -> {_short(v['profile'])}" for k, v in cal.changed.items()
        )
        con.print(
            text(
                ("calibration", "bold"),
                f": {cal.profile} ({cal.origin}, {cal.name}, {cal.created}): "
                + (what or "no constant changed for this GPU"),
            )
        )
    if t.breakdown_s is not None:
        b = t.breakdown_s
        con.print(
            text(
                ("step", "bold"),
                f": compute {seconds_text(b.compute)}, recompute {seconds_text(b.recompute)}, "
                f"exposed communication {seconds_text(b.exposed_communication)}, optimizer "
                f"{seconds_text(b.optimizer)}",
            )
        )
    cost = "n/a (no price)" if r.cost_usd is None else usd_text(r.cost_usd)
    if r.cost_usd_range:
        cost += f" (range {usd_text(r.cost_usd_range[0])} to {usd_text(r.cost_usd_range[1])})"
    hours = hours_text(r.hours)
    if r.hours_range:
        hours += f" (range {hours_text(r.hours_range[0])} to {hours_text(r.hours_range[1])})"
    jobs = (
        f", {r.jobs} SageMaker jobs of at most 28 days at the range's slow end, each resuming "
        "from the checkpoints"
        if r.jobs > 1
        else ""
    )
    con.print(
        text(
            ("run", "bold"),
            f": {r.steps:,} steps, {count_text(r.tokens)} tokens, {hours}, cost {cost}{jobs}",
            (f" ({r.price_source})" if r.price_source else "", "dim"),
        )
    )
    for note in p.notes:
        if note.code == "objective":
            con.print(text(("objective", "bold"), f": {note.text.removeprefix('objective ')}"))
    if p.checkpoint is not None:
        k = p.checkpoint
        con.print(
            text(
                ("checkpoint", "bold"),
                f": {k.gib_per_save:,.1f} GiB per save (fp32 params + AdamW states, all ranks), "
                f"at most {k.max_gib_per_host:,.1f} GiB per host, ~{k.save_s:,.0f} s to write",
            )
        )
    if p.alternatives:
        con.print(text(("runner-ups", "bold"), " (select one with the --set flags shown):"))
        for a in p.alternatives:
            _, _, why = a.why_not.partition(": ")
            flags = " ".join(f"--set {f}" for f in a.set)
            con.print(
                text(
                    f"  - {flags}: {a.memory_total_gib:,.1f} GiB, "
                    f"{a.tokens_per_s_per_gpu:,.0f} tok/s/GPU, {hours_text(a.hours)}; ",
                    (why, "dim"),
                )
            )
    why = [n.text for n in p.notes if n.kind == "reason" and n.code != "objective"]
    for title, items, style in (
        ("why", why, "dim"),
        ("warnings", p.warnings, "yellow"),
        ("to make it fit", p.advice, "bold"),
    ):
        if items:
            con.print(text((title, "bold"), ":"))
            for item in items:
                con.print(text((f"  - {item}", style)))


def _short(v: Any) -> str:
    """A constant's value in a line: floats to 4 significant digits."""
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, list):
        return "[" + ", ".join(_short(x) for x in v) + "]"
    return str(v)
