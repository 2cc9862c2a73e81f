"""`bsm plan`'s output for people: the summary (default, planner/summary.py), everything (`-v`),
and the instance preferences' table."""

from __future__ import annotations

from typing import Any

from blackwell_sm.planner.units import count_text, hours_text, seconds_text, usd_text


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
    for col in (
        "#",
        "instances",
        "capacity",
        "fits",
        "GiB/GPU",
        "config",
        "tok/s/GPU",
        "hours",
        "cost",
        "plan file",
    ):
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
        for title, items, style in (
            ("warnings", pp.plan.warnings, "yellow"),
            ("to make it fit", pp.plan.advice, "bold"),
        ):
            for item in items:
                con.print(text((f"[{pp.index}] {title}: ", "bold"), (item, style)))


def _gib(x: float) -> str:
    return f"{x:,.1f}"


# long function: the plan output, section by section (to be shortened: issue 21 item 3)
def render_summary(p: Any) -> None:
    """The plan in at most 30 lines of 80 columns (planner/summary.py, as a notebook shows it):
    headline, run, configuration, memory, top three runner-ups; -v for everything."""
    from blackwell_sm.cli.output import out_console, text
    from blackwell_sm.planner.summary import WIDTH, summary_text

    con = out_console()
    lines = summary_text(p, width=min(WIDTH, con.width)).splitlines()
    con.print(text((lines[0], "bold green" if p.feasible else "bold red")))
    for line in lines[1:]:
        con.print(text(line))


def render(p: Any) -> None:
    """The plan as rich tables on stdout (people); JSON has the same facts for scripts.
    Nothing is cut: long values wrap, runner-ups are lines with the flags that select them."""
    from rich.table import Table

    from blackwell_sm.cli.output import out_console, text
    from blackwell_sm.planner.summary import headline

    con = out_console()
    c, m, t, r = p.config, p.memory_gib, p.throughput, p.run
    style = (
        "bold green"
        if p.feasible and r.jobs == 1
        else "bold red"
        if not p.feasible
        else "bold yellow"
    )
    con.print(text((headline(p), style)))  # the status sentence's one home: planner/summary.py
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
    _render_rest(con, p)


def _render_rest(con: Any, p: Any) -> None:
    """The verbose plan after its run line: objective, checkpoint, every runner-up with its
    --set flags, reasons, warnings, advice."""
    from blackwell_sm.cli.output import text

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


def render_trace(traced: Any) -> None:
    """The traced step beside the prediction, term by term (`bsm plan --trace`)."""
    from rich.table import Table

    from blackwell_sm.cli.output import out_console, text

    con, t = out_console(), traced.trace
    con.print(
        text(
            ("traced peak per GPU: ", "bold"),
            f"{t.traced_gib:,.2f} GiB at the {t.peak_at} ({t.form} form, traced in "
            f"{t.trace['wall_s']:.0f} s); the plan prints {_gib(t.plan_total_gib)} GiB, "
            f"{t.plan_tracked_gib:,.2f} without its runtime and fragmentation allowance "
            f"({100 * t.plan_error:+.1f} % from the trace); the planner in the traced form "
            f"and precision predicts {t.predicted_gib:,.2f} GiB ({100 * t.error:+.1f} %)",
        )
    )
    table = Table(title="traced vs predicted (GiB per GPU)", title_justify="left")
    for col in ("term", "predicted", "traced", "what it is, what differs"):
        table.add_column(col)
    for r in t.rows:
        table.add_row(r.term, f"{r.predicted_gib:,.2f}", f"{r.traced_gib:,.2f}", text(r.why))
    con.print(table)
    for n in t.notes:
        con.print(text(("note: ", "bold"), n))
