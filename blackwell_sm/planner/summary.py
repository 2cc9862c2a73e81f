"""The plan as a person reads it in ten seconds: a headline (instances, hours, cost with its range,
$ per billion tokens), the configuration, memory and the top three runner-ups. One source for
`bsm plan`'s default output and, in notebooks, `Plan.summary()`, `_repr_pretty_` and
`_repr_html_` (the same sections as HTML tables). The table helpers (`text_block`, `html_block`)
also render the job handle's status and progress.

Part of the Plan's layer: pydantic-free, reads only the Plan's fields.
"""

from __future__ import annotations

import html
import textwrap
from typing import TYPE_CHECKING, NamedTuple

from blackwell_sm.planner.batch import batch_text
from blackwell_sm.planner.units import count_text, hours_text, usd_text
from blackwell_sm.spec.job import MAX_RUNTIME_HOURS

if TYPE_CHECKING:
    from blackwell_sm.planner.plan import Alternative, Plan

WIDTH = 80
#: The most lines the summary takes (`bsm plan`'s default view, tested).
MAX_LINES = 30
RUNNER_UPS = 3
#: Warnings that change what the user should do (quota, batch rounding, jobs, fit, deadline):
#: the summary prints them in full, the others are counted and shown by -v.
DECISIVE = frozenset(
    {
        "quota_instances_per_job",
        "scale_beyond_search",
        "batch_rounded",
        "over_max_runtime",
        "jobs_at_slow_end",
        "over_deadline",
        "misses_deadline",
        "no_fit",
        "no_count_fits",
        "no_count_meets_deadline",
        "memory_high",
    }
)
KEY_WIDTH = 12
#: How `bsm plan` shows what the summary leaves out.
MORE_HINT = "bsm plan -v"


class Section(NamedTuple):
    """A titled table of (key, value) rows."""

    title: str
    rows: list[tuple[str, str]]


def status_text(p: Plan) -> str:
    """fits / does NOT fit / misses the deadline / takes longer than one job."""
    m, r = p.memory_gib, p.run
    if not p.feasible:
        usable = m.usable if m.usable is not None else m.limit
        return "misses the deadline" if m.total <= usable else "does NOT fit"
    if r.jobs > 1:  # never a bare "fits" for a run that outlives one job (hours: the time row)
        verb = "takes" if r.hours > MAX_RUNTIME_HOURS else "may take"
        return f"fits in memory, but {verb} {r.jobs} 28-day SageMaker jobs"
    return "fits"


def headline(p: Plan) -> str:
    """`llama-3.1-70b (70.55B params) on 1 x ml.p6-b200.48xlarge: fits`."""
    i = p.instance
    return f"{p.model.name} ({count_text(p.model.n_params)} params) on {i.count} x {i.type}: " + (
        status_text(p)
    )


def run_rows(p: Plan) -> list[tuple[str, str]]:
    """Instances, hours, cost with its range and $ per billion tokens, tokens and steps."""
    i, r = p.instance, p.run
    rows = [("instances", f"{i.count} x {i.type} ({i.count * i.gpus_per_instance} x {i.gpu})")]
    time = hours_text(r.hours)
    if r.hours_range:
        lo, hi = (hours_text(h) if h <= 48 else f"{h:,.0f} h" for h in r.hours_range)
        time += f", range {lo} to {hi}"
    rows.append(("time", time))
    tokens = f"{count_text(r.tokens)} in {r.steps:,} step{'s' if r.steps != 1 else ''}"
    if r.cost_usd is None:
        rows.append(("cost", "n/a (no price: a local run)"))
    else:
        cost, rng = usd_text(r.cost_usd), r.cost_usd_range
        if rng:
            cost += f" (range {usd_text(rng[0])} to {usd_text(rng[1])})"
        rows.append(("cost", cost))
        per_b = r.cost_usd / (r.tokens / 1e9) if r.tokens else 0.0
        tokens += f"; {usd_text(per_b)} per billion tokens"
    rows.append(("tokens", tokens))
    rows.append(speed_row(p))
    rows += objective_rows(p)
    cal = p.calibration
    if cal is not None:
        changed = f"{len(cal.changed)} constant{'s' if len(cal.changed) != 1 else ''} changed"
        rows.append(("calibration", f"{cal.name} ({cal.profile}, {cal.origin}): {changed}"))
    return rows


def config_rows(p: Plan) -> list[tuple[str, str]]:
    """Layout, batch and the numeric choices, in words."""
    c = p.config
    layout = f"shard {c.shard_degree} x replicate {c.replicate_degree}"
    if c.cp_degree > 1:
        layout += f", context parallel {c.cp_degree}"
    batch = (
        f"{batch_text(c.micro_batch_size, c.grad_accum_steps, c.data_parallel_size)} of "
        f"{c.seq_len:,}"
    )
    knobs = (
        f"{c.precision}; checkpointing {c.activation_checkpointing}; compile "
        f"{'on' if c.compile else 'off'}; reshard {'on' if c.reshard_after_forward else 'off'}"
        + ("; offload on (state in host memory)" if c.offload else "")
    )
    return [("layout", layout), ("batch", batch), ("precision", knobs)]


def _state_kind(p: Plan) -> str:
    """What the model state holds: a LoRA plan's base is frozen bf16, its adapters train."""
    if p.spec.training.peft is not None:
        return "frozen bf16 base; fp32 adapters, grads, AdamW states"
    return "fp32 params, grads, AdamW states"


def memory_rows(p: Plan) -> list[tuple[str, str]]:
    """The total against the usable limit, and the terms in three groups."""
    m = p.memory_gib
    usable = m.usable if m.usable is not None else m.limit
    state = m.params_fp32 + m.grads_fp32 + m.optimizer_states
    gathered = m.params_unsharded + m.grads_unsharded + m.fp8_extras
    return [
        ("total", f"{m.total:,.1f} of {usable:,.1f} GiB usable ({m.total / usable:.0%})"),
        (
            "model state",
            f"{state:,.1f} GiB ({_state_kind(p)}; sharded)"
            + ("; offloaded: in host memory" if p.config.offload else ""),
        ),
        ("activations", f"{m.activations:,.1f} GiB, logits and loss {m.logits_and_loss:,.1f}"),
        ("other", f"{gathered:,.1f} GiB gathered blocks, {m.overhead:,.1f} runtime"),
    ]


def objective_rows(p: Plan) -> list[tuple[str, str]]:
    """What chose the configuration (`--optimize`), and what the other objective would pick."""
    other = p.other_objective
    if other is None:
        return []
    if other.same_as_plan:  # nothing to choose between: said by -v
        return []
    cost = "" if other.cost_usd is None else f", {usd_text(other.cost_usd)}"
    n = other.instance_count
    pick = f"{n} instance{'s' if n != 1 else ''}, {hours_text(other.hours)}{cost}"
    return [
        (
            "objective",
            f"{p.objective}; {flat_text(p)}--optimize {other.objective} would pick {pick}",
        )
    ]


def flat_text(p: Plan) -> str:
    """`cost is flat across 1-46 instances (...); ` when the other objective's pick costs within
    this plan's cost range (a tie, which fewer nodes win under --optimize cost), else ''."""
    other, rng = p.other_objective, p.run.cost_usd_range
    if other is None or other.cost_usd is None or not rng or not rng[0] <= other.cost_usd <= rng[1]:
        return ""
    lo, hi = sorted((p.instance.count, other.instance_count))
    return f"cost is flat across {lo}-{hi} instances (within the cost range); "


def speed_row(p: Plan) -> tuple[str, str]:
    t = p.throughput
    rng = t.tokens_per_s_per_gpu_range
    speed = f"{t.tokens_per_s_per_gpu:,.0f} tokens/s/GPU"
    if rng:
        speed += f" (range {rng[0]:,.0f} to {rng[1]:,.0f})"
    return ("speed", f"{speed}, MFU {t.mfu:.1%}")


def _ranked(p: Plan) -> list[Alternative]:
    """The runner-ups, those that fit first (the planner's order within each)."""
    return sorted(p.alternatives, key=lambda a: not a.feasible)


def runner_up_rows(p: Plan) -> list[tuple[str, str]]:
    """The top three runner-ups, each with why it lost."""
    top = _ranked(p)[:RUNNER_UPS]
    return [(f"#{n}", f"{a.why_not}; {a.memory_total_gib:,.1f} GiB") for n, a in enumerate(top, 1)]


def decisive(p: Plan) -> list[str]:
    """The plan's warnings that change what the user should do (`DECISIVE`), in order."""
    return [n.text for n in p.notes if n.kind == "warning" and n.code in DECISIVE]


def sections(p: Plan, runner_ups: int = RUNNER_UPS) -> list[Section]:
    """The summary's sections (the headline is `headline(p)`), with `runner_ups` runner-ups."""
    out = [
        Section("run", run_rows(p)),
        Section("configuration", config_rows(p)),
        Section("memory per GPU", memory_rows(p)),
    ]
    if not p.feasible and p.advice:
        out.append(Section("to make it fit", [("-", a) for a in p.advice[:RUNNER_UPS]]))
    if p.alternatives and runner_ups:
        out.append(Section("runner-ups", runner_up_rows(p)[:runner_ups]))
    return out


def more_line(p: Plan, hint: str = MORE_HINT, runner_ups: int = RUNNER_UPS, shown: int = 0) -> str:
    """What the summary leaves out (`shown` warnings printed, `runner_ups` runner-ups), and how
    to see it."""
    counts = [(len(p.warnings) - shown, "more warning" if shown else "warning")]
    counts.append((len(p.reasons), "reason"))
    said = ", ".join(f"{n} {w}{'s' if n != 1 else ''}" for n, w in counts if n)
    extra = len(p.alternatives) - min(len(p.alternatives), runner_ups)
    if extra:
        said += f", {extra} more runner-up{'s' if extra != 1 else ''}"
    return f"{said.lstrip(', ')}: {hint}" if said else ""


def _wrap(text: str, width: int, first: str, rest: str) -> list[str]:
    """`text` in lines of `width` columns, never broken at a hyphen (model names, paths)."""
    return textwrap.wrap(
        text, width, initial_indent=first, subsequent_indent=rest, break_on_hyphens=False
    )


def text_block(title: str, secs: list[Section], width: int = WIDTH) -> list[str]:
    """`title`, then each section: its title and its rows, wrapped to `width` columns."""
    lines = _wrap(title, width, "", "  ") or [""]
    for s in secs:
        if s.title:
            lines.append(s.title)
        for key, value in s.rows:
            head = f"  {key:<{KEY_WIDTH}} "
            pad = " " * len(head)
            wrapped = _wrap(value, width, head, pad)
            lines += wrapped or [head.rstrip()]
    return lines


def detail_sections(p: Plan) -> list[Section]:
    """What the summary leaves out: warnings, reasons, advice, every runner-up with the `--set`
    flags that select it."""
    out = [
        Section(title, [("-", t) for t in items])
        for title, items in (("warnings", p.warnings), ("reasons", p.reasons), ("advice", p.advice))
        if items
    ]
    if p.alternatives:
        rows = [
            (f"#{n}", f"{a.why_not}; --set " + " --set ".join(a.set))
            for n, a in enumerate(_ranked(p), 1)
        ]
        out.append(Section("every runner-up (with its --set flags)", rows))
    return out


def summary_text(
    p: Plan, *, width: int = WIDTH, hint: str = MORE_HINT, verbose: bool = False
) -> str:
    """The summary as plain text, every line at most `width` columns: the sections, the
    decisive warnings in full, at most MAX_LINES lines (runner-ups give way first); `verbose`:
    with `detail_sections` after it and nothing left out."""
    if verbose:
        lines = text_block(headline(p), sections(p), width)
        return "\n".join(lines + text_block("", detail_sections(p), width)[1:])
    warns = decisive(p)
    for n_warn in range(len(warns), -1, -1):
        for n_alt in range(RUNNER_UPS, -1, -1):
            lines = text_block(headline(p), sections(p, n_alt), width)
            lines += _warning_lines(warns[:n_warn], width)
            more = more_line(p, hint, n_alt, n_warn)
            lines += _wrap(more, width, "", "") if more else []
            if len(lines) <= MAX_LINES:
                return "\n".join(lines)
    return "\n".join(lines)


def _warning_lines(warns: list[str], width: int) -> list[str]:
    """The decisive warnings, each a wrapped `- ` item under a title."""
    if not warns:
        return []
    out = ["warnings"]
    for w in warns:
        out += _wrap(w, width, "  - ", "    ")
    return out


def html_block(title: str, secs: list[Section], extra: list[Section] | None = None) -> str:
    """`title` and each section as an HTML table (everything escaped); `extra` sections go in a
    closed <details> element each."""

    def table(s: Section) -> str:
        rows = "".join(
            f"<tr><th style='text-align:left'>{html.escape(k)}</th>"
            f"<td style='text-align:left'>{html.escape(v)}</td></tr>"
            for k, v in s.rows
        )
        caption = (
            f"<caption style='text-align:left'><b>{html.escape(s.title)}</b></caption>"
            if s.title
            else ""
        )
        return f"<table>{caption}{rows}</table>"

    parts = [f"<div class='bsm'><p><b>{html.escape(title)}</b></p>"]
    parts += [table(s) for s in secs]
    for s in extra or []:
        head = f"<summary>{html.escape(s.title)} ({len(s.rows)})</summary>"
        parts.append(f"<details>{head}{table(s)}</details>")
    return "".join(parts) + "</div>"


def summary_html(p: Plan) -> str:
    """The summary as HTML tables; the details folded below it."""
    return html_block(headline(p), sections(p), detail_sections(p))
