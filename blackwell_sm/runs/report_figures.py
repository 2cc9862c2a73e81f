"""The report's figures (matplotlib, off-screen): one or several runs overlaid on each panel.

Panels: loss; tokens/s/GPU and MFU against the plan; peak memory; learning rate and gradient
norm; the timeline of saves, stops and resumes. Every axis names its quantity and unit. A
predicted range is clipped to what is possible (MFU <= 1, the tokens/s at MFU 1); an axis whose
measured and predicted figures differ by more than FAR_RATIO turns logarithmic and says so. A
single run keeps plain labels ("train loss"); overlaid runs add the run's label ("train loss:
before").
"""

from __future__ import annotations

import io
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from blackwell_sm.records import ValRecord
from blackwell_sm.runs.report_axes import (
    NORM_LOG_SPAN,
    WIDTH_IN,
    band,
    far_ratio,
    flat,
    legend,
    log_if_far,
    run_color,
    run_label,
    span,
    train_records,
)
from blackwell_sm.runs.report_timeline import timeline_figure

if TYPE_CHECKING:
    from blackwell_sm.runs.report import RunData

#: What a plan's `throughput.evidence` says its range rests on (planner/calibration.py).
EVIDENCE_WORDS = {
    "fitted": "step-time constants fitted to measured runs on this GPU",
    "carried": "step-time constants carried over from another GPU",
    "measured": "step-time constants timed on this machine",
    "calibrated": "a calibration profile of this GPU",
}


def range_label(run: RunData) -> str:
    t = run.plan.throughput
    low, high = t.tokens_per_s_per_gpu_range or (0.0, 0.0)
    p = t.tokens_per_s_per_gpu or 1.0
    words = EVIDENCE_WORDS.get(t.evidence or "", t.evidence or "unknown basis")
    return f"prediction's range -{1 - low / p:.0%}/+{high / p - 1:.0%} ({words})"


def loss_figure(runs: Sequence[RunData]) -> Any:
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    fig = Figure(figsize=(WIDTH_IN, 3.2), layout="constrained")
    ax = fig.add_subplot()
    for i, run in enumerate(runs):
        train = train_records(run)
        vals = [r for r in run.records if isinstance(r, ValRecord)]
        c = run_color(i, multi, "measured")
        ax.plot(
            [r.step for r in train],
            [r.loss for r in train],
            lw=1.2,
            color=c,
            label=run_label("train loss", run, multi),
        )
        if vals:
            ax.plot(
                [r.step for r in vals],
                [r.loss for r in vals],
                "o--",
                lw=1.0,
                color=c if multi else "C1",
                label=run_label("validation loss", run, multi),
            )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("loss", fontsize=10)
    ax.grid(alpha=0.3)
    legend(ax)
    return fig


def speed_figure(runs: Sequence[RunData]) -> Any:
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    x0, x1 = span(runs)
    fig = Figure(figsize=(WIDTH_IN, 5.8), layout="constrained")
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    tok_pairs, mfu_pairs = [], []
    for i, run in enumerate(runs):
        t, train = run.plan.throughput, train_records(run)
        steps = [r.step for r in train]
        c, pc = run_color(i, multi, "measured"), run_color(i, multi, "plan")
        tok = [r.tok_s_gpu for r in train]
        ax.plot(steps, tok, lw=1.2, color=c, label=run_label("measured tokens/s/GPU", run, multi))
        flat(
            ax,
            x0,
            x1,
            t.tokens_per_s_per_gpu,
            run_label("predicted tokens/s/GPU", run, multi),
            ls="--",
            color=pc,
        )
        at_peak = t.tokens_per_s_per_gpu / t.mfu if t.mfu > 0 else None  # tokens/s at MFU 1
        mfu = [r.mfu for r in train]
        ax2.plot(
            steps,
            mfu,
            lw=1.2,
            color=c if multi else "C2",
            label=run_label("measured MFU", run, multi),
        )
        flat(ax2, x0, x1, t.mfu, run_label("predicted MFU", run, multi), ls="--", color=pc)
        if t.tokens_per_s_per_gpu_range and t.tokens_per_s_per_gpu:
            lo, hi = t.tokens_per_s_per_gpu_range
            words = run_label(range_label(run), run, multi)
            band(ax, x0, x1, lo, hi, words, at_peak, pc)
            scale = t.mfu / t.tokens_per_s_per_gpu
            band(
                ax2,
                x0,
                x1,
                lo * scale,
                hi * scale,
                run_label("prediction's range", run, multi),
                1.0,
                pc,
            )
        tok_pairs.append((tok, t.tokens_per_s_per_gpu))
        mfu_pairs.append((mfu, t.mfu))
    ax.set_ylabel("tokens/s per GPU")
    log_if_far(ax, tok_pairs, "speed against the plan")
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("MFU (fraction of dense BF16 peak)")
    log_if_far(ax2, mfu_pairs, "model FLOPs utilisation")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        legend(a)
    return fig


def memory_figure(runs: Sequence[RunData]) -> Any:
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    x0, x1 = span(runs)
    fig = Figure(figsize=(WIDTH_IN, 3.4), layout="constrained")
    ax = fig.add_subplot()
    pairs, kinds, seen, usable = [], set(), [], []
    for i, run in enumerate(runs):
        m, train = run.plan.memory_gib, train_records(run)
        c, pc = run_color(i, multi, "measured"), run_color(i, multi, "plan")
        mem = [r.mem_reserved_gib for r in train]
        run_kinds = {str(r.memory_kind) for r in train}
        kinds |= run_kinds
        ax.plot(
            [r.step for r in train],
            mem,
            lw=1.2,
            color=c,
            label=run_label("measured peak memory", run, multi),
        )
        flat(ax, x0, x1, m.total, run_label("predicted total", run, multi), ls="--", color=pc)
        if m.allocator_reserved is not None and any(k.startswith("cuda") for k in run_kinds):
            flat(
                ax,
                x0,
                x1,
                m.allocator_reserved,
                run_label("predicted allocator reserved", run, multi),
                ls=":",
                color=pc,
            )
        if m.usable is not None:
            usable.append(m.usable)
        pairs.append((mem, m.total))
        seen += [*mem, m.total]
    far = any(far_ratio(mm, p) is not None for mm, p in pairs)
    above = []
    for u in sorted(set(usable)):
        flat(ax, x0, x1, u, "usable limit", color="k", lw=1.0)
        if not far and u > 2.5 * max(seen, default=u):  # far above: keep the run readable
            above.append(f"{u:,.1f}")
    if above:  # the limit's line is left above the view; the title says where it is
        ax.set_ylim(0, 1.3 * max(seen))
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("GiB per GPU")
    ax.grid(alpha=0.3)
    title = f"peak memory ({', '.join(sorted(kinds)) or 'none'})"
    if above:
        title += f"; usable limit {', '.join(above)} GiB, above the plot"
    log_if_far(ax, pairs, title)
    legend(ax)
    return fig


def optimizer_figure(runs: Sequence[RunData]) -> Any:
    """Learning rate and gradient norm per logged step."""
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    x0, x1 = span(runs)
    fig = Figure(figsize=(WIDTH_IN, 5.2), layout="constrained")
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    norms: list[float] = []
    for i, run in enumerate(runs):
        train, opt = train_records(run), run.plan.spec.training.optimizer
        steps, c = [r.step for r in train], run_color(i, multi, "measured")
        ax.plot(
            steps,
            [r.lr for r in train],
            lw=1.2,
            color=c,
            label=run_label("learning rate", run, multi),
        )
        flat(
            ax,
            x0,
            x1,
            opt.lr,
            run_label("peak lr (optimizer.lr)", run, multi),
            ls="--",
            color=run_color(i, multi, "plan"),
        )
        norm = [r.grad_norm for r in train]
        norms += norm
        ax2.plot(
            steps,
            norm,
            lw=1.2,
            color=c if multi else "C4",
            label=run_label("gradient norm", run, multi),
        )
        if opt.grad_clip is not None:
            flat(
                ax2,
                x0,
                x1,
                opt.grad_clip,
                run_label("clip threshold (optimizer.grad_clip)", run, multi),
                ls="--",
                color=run_color(i, multi, "plan"),
            )
    ax.set_ylabel("learning rate")
    ax.set_title("learning rate (warm-up, then the schedule's decay)", fontsize=10)
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("L2 norm (before clipping)")
    title = "gradient norm over all parameters"
    positive = [v for v in norms if v > 0]
    if positive and max(positive) > NORM_LOG_SPAN * min(positive):
        ax2.set_yscale("log")
        title += " (log axis)"
    ax2.set_title(title, fontsize=10)
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        legend(a)
    return fig


def figures(runs: Sequence[RunData]) -> dict[str, Any]:
    """The report's matplotlib Figures by name (drawn off-screen: no pyplot, nothing shown)."""
    return {
        "loss": loss_figure(runs),
        "speed": speed_figure(runs),
        "memory": memory_figure(runs),
        "optimizer": optimizer_figure(runs),
        "timeline": timeline_figure(runs),
    }


def plotted(figs: dict[str, Any]) -> dict[str, dict[str, dict[str, list[float]]]]:
    """{figure: {line label: {x, y}}}: the data of every labelled line, read from the figures."""
    out: dict[str, dict[str, dict[str, list[float]]]] = {}
    for name, fig in figs.items():
        lines: dict[str, dict[str, list[float]]] = {}
        for ax in fig.axes:
            for line in ax.get_lines():
                label = line.get_label()
                if label.startswith("_"):
                    continue
                pts = [
                    (float(x), float(y))
                    for x, y in zip(line.get_xdata(), line.get_ydata(), strict=True)
                ]
                pts = [p for p in pts if not (math.isnan(p[0]) or math.isnan(p[1]))]  # gaps
                lines[label] = {"x": [p[0] for p in pts], "y": [p[1] for p in pts]}
        out[name] = lines
    return out


def svg(fig: Any) -> str:
    """The figure as inline SVG, its words as <text> (searchable, selectable, read aloud)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.find("<svg") :]  # drop the XML prolog and DOCTYPE: inline in HTML
