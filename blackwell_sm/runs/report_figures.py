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
import statistics
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from blackwell_sm.records import SaveRecord, StartRecord, StopRecord, TrainRecord, ValRecord
from blackwell_sm.records import segments as launches

if TYPE_CHECKING:
    from blackwell_sm.runs.report import RunData

#: Measured over predicted beyond which (or below 1/FAR_RATIO) an axis turns logarithmic.
FAR_RATIO = 3.0
#: A gradient norm axis turns logarithmic when its largest value is this many times its smallest.
NORM_LOG_SPAN = 30.0
#: What a plan's `throughput.evidence` says its range rests on (planner/calibration.py).
EVIDENCE_WORDS = {
    "fitted": "step-time constants fitted to measured runs on this GPU",
    "carried": "step-time constants carried over from another GPU",
    "measured": "step-time constants timed on this machine",
    "calibrated": "a calibration profile of this GPU",
}
LEGEND_CHARS = 34  # a legend line's width: the plot keeps about two thirds of the figure
WIDTH_IN = 9.0  # 648 pt: fits the page's 980 px column, and scales down with it


def _label(base: str, run: RunData, multi: bool) -> str:
    return f"{base}: {run.label}" if multi else base


def _color(i: int, multi: bool, role: str) -> str:
    """Single run: measured C0/C2, the plan in C3. Overlaid runs: one colour per run."""
    if multi:
        return f"C{i % 10}"
    return {"measured": "C0", "mfu": "C2", "plan": "C3"}[role]


def _train(run: RunData) -> list[TrainRecord]:
    return [r for r in run.records if isinstance(r, TrainRecord)]


def _span(runs: Sequence[RunData]) -> tuple[float, float]:
    steps = [r.step for run in runs for r in _train(run)]
    return (min(steps), max(steps)) if steps else (0.0, 1.0)


def _above(handle: Any, top: float) -> bool:
    """A line wholly above the view (a far usable limit): the legend leaves it out."""
    ys = getattr(handle, "get_ydata", lambda: [])()
    return len(ys) > 0 and min(float(y) for y in ys) > top


def _legend(ax: Any) -> None:
    """Outside the plot, on its right (it never covers data), long labels wrapped so that the
    plot keeps its width."""
    handles, labels = ax.get_legend_handles_labels()
    top = ax.get_ylim()[1]
    shown = [(h, lab) for h, lab in zip(handles, labels, strict=True) if not _above(h, top)]
    handles, labels = [h for h, _ in shown], [lab for _, lab in shown]
    if handles:
        wrapped = [textwrap.fill(lab, LEGEND_CHARS, subsequent_indent="  ") for lab in labels]
        ax.legend(handles, wrapped, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
                  borderaxespad=0.0)  # fmt: skip


def far_ratio(measured: Sequence[float], predicted: float | None) -> float | None:
    """Median measured over predicted when beyond FAR_RATIO either way, else None."""
    if not measured or not predicted or predicted <= 0:
        return None
    med = statistics.median(measured)
    ratio = med / predicted
    return ratio if med > 0 and (ratio > FAR_RATIO or ratio < 1 / FAR_RATIO) else None


def _scale(ax: Any, pairs: list[tuple[list[float], float | None]], title: str) -> None:
    """A log axis when any run's measured figures are far from its prediction."""
    ratios = [r for m, p in pairs if (r := far_ratio(m, p)) is not None]
    if ratios:
        worst = max(ratios, key=lambda r: max(r, 1 / r))
        ax.set_yscale("log")
        title += f"\n(log axis: measured is {worst:.3g}x the prediction)"
    ax.set_title(title, fontsize=10)


def _flat(ax: Any, x0: float, x1: float, y: float, label: str, **kw: Any) -> None:
    ax.plot([x0, x1], [y, y], label=label, **kw)


def _band(ax: Any, x0: float, x1: float, lo: float, hi: float, label: str, cap: float | None,
          color: str) -> None:  # fmt: skip
    """The prediction's range, clipped to [0, cap]; the label says when it was clipped."""
    top = hi if cap is None else min(hi, cap)
    if cap is not None and hi > cap:
        label += " (clipped at what is possible)"
    ax.fill_between([x0, x1], [max(lo, 0.0)] * 2, [top] * 2, color=color, alpha=0.12,
                    label=label)  # fmt: skip


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
        train = _train(run)
        vals = [r for r in run.records if isinstance(r, ValRecord)]
        c = _color(i, multi, "measured")
        ax.plot([r.step for r in train], [r.loss for r in train], lw=1.2, color=c,
                label=_label("train loss", run, multi))  # fmt: skip
        if vals:
            ax.plot([r.step for r in vals], [r.loss for r in vals], "o--", lw=1.0,
                    color=c if multi else "C1", label=_label("validation loss", run, multi))  # fmt: skip
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy (nats/token)")
    ax.set_title("loss", fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax)
    return fig


def speed_figure(runs: Sequence[RunData]) -> Any:
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    x0, x1 = _span(runs)
    fig = Figure(figsize=(WIDTH_IN, 5.8), layout="constrained")
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    tok_pairs, mfu_pairs = [], []
    for i, run in enumerate(runs):
        t, train = run.plan.throughput, _train(run)
        steps = [r.step for r in train]
        c, pc = _color(i, multi, "measured"), _color(i, multi, "plan")
        tok = [r.tok_s_gpu for r in train]
        ax.plot(steps, tok, lw=1.2, color=c, label=_label("measured tokens/s/GPU", run, multi))
        _flat(ax, x0, x1, t.tokens_per_s_per_gpu, _label("predicted tokens/s/GPU", run, multi),
              ls="--", color=pc)  # fmt: skip
        at_peak = t.tokens_per_s_per_gpu / t.mfu if t.mfu > 0 else None  # tokens/s at MFU 1
        mfu = [r.mfu for r in train]
        ax2.plot(steps, mfu, lw=1.2, color=c if multi else "C2",
                 label=_label("measured MFU", run, multi))  # fmt: skip
        _flat(ax2, x0, x1, t.mfu, _label("predicted MFU", run, multi), ls="--", color=pc)
        if t.tokens_per_s_per_gpu_range and t.tokens_per_s_per_gpu:
            lo, hi = t.tokens_per_s_per_gpu_range
            words = _label(range_label(run), run, multi)
            _band(ax, x0, x1, lo, hi, words, at_peak, pc)
            scale = t.mfu / t.tokens_per_s_per_gpu
            _band(ax2, x0, x1, lo * scale, hi * scale, _label("prediction's range", run, multi),
                  1.0, pc)  # fmt: skip
        tok_pairs.append((tok, t.tokens_per_s_per_gpu))
        mfu_pairs.append((mfu, t.mfu))
    ax.set_ylabel("tokens/s per GPU")
    _scale(ax, tok_pairs, "speed against the plan")
    ax2.set_xlabel("optimizer step")
    ax2.set_ylabel("MFU (fraction of dense BF16 peak)")
    _scale(ax2, mfu_pairs, "model FLOPs utilisation")
    for a in (ax, ax2):
        a.grid(alpha=0.3)
        _legend(a)
    return fig


def memory_figure(runs: Sequence[RunData]) -> Any:
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    x0, x1 = _span(runs)
    fig = Figure(figsize=(WIDTH_IN, 3.4), layout="constrained")
    ax = fig.add_subplot()
    pairs, kinds, seen, usable = [], set(), [], []
    for i, run in enumerate(runs):
        m, train = run.plan.memory_gib, _train(run)
        c, pc = _color(i, multi, "measured"), _color(i, multi, "plan")
        mem = [r.mem_reserved_gib for r in train]
        run_kinds = {str(r.memory_kind) for r in train}
        kinds |= run_kinds
        ax.plot([r.step for r in train], mem, lw=1.2, color=c,
                label=_label("measured peak memory", run, multi))  # fmt: skip
        _flat(ax, x0, x1, m.total, _label("predicted total", run, multi), ls="--", color=pc)
        if m.allocator_reserved is not None and any(k.startswith("cuda") for k in run_kinds):
            _flat(ax, x0, x1, m.allocator_reserved,
                  _label("predicted allocator reserved", run, multi), ls=":", color=pc)  # fmt: skip
        if m.usable is not None:
            usable.append(m.usable)
        pairs.append((mem, m.total))
        seen += [*mem, m.total]
    far = any(far_ratio(mm, p) is not None for mm, p in pairs)
    above = []
    for u in sorted(set(usable)):
        _flat(ax, x0, x1, u, "usable limit", color="k", lw=1.0)
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
    _scale(ax, pairs, title)
    _legend(ax)
    return fig


def optimizer_figure(runs: Sequence[RunData]) -> Any:
    """Learning rate and gradient norm per logged step."""
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    x0, x1 = _span(runs)
    fig = Figure(figsize=(WIDTH_IN, 5.2), layout="constrained")
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    norms: list[float] = []
    for i, run in enumerate(runs):
        train, opt = _train(run), run.plan.spec.training.optimizer
        steps, c = [r.step for r in train], _color(i, multi, "measured")
        ax.plot(steps, [r.lr for r in train], lw=1.2, color=c,
                label=_label("learning rate", run, multi))  # fmt: skip
        _flat(ax, x0, x1, opt.lr, _label("peak lr (optimizer.lr)", run, multi), ls="--",
              color=_color(i, multi, "plan"))  # fmt: skip
        norm = [r.grad_norm for r in train]
        norms += norm
        ax2.plot(steps, norm, lw=1.2, color=c if multi else "C4",
                 label=_label("gradient norm", run, multi))  # fmt: skip
        if opt.grad_clip is not None:
            _flat(ax2, x0, x1, opt.grad_clip, _label("clip threshold (optimizer.grad_clip)",
                  run, multi), ls="--", color=_color(i, multi, "plan"))  # fmt: skip
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
        _legend(a)
    return fig


def time_unit(span_s: float) -> tuple[str, float]:
    """Seconds for short runs, minutes up to 3 hours, hours beyond."""
    if span_s < 180:
        return "s", 1.0
    if span_s < 3 * 3600:
        return "min", 60.0
    return "h", 3600.0


def events(run: RunData) -> dict[str, list[tuple[float, int]]]:
    """(unix time, step) of each save, stop and resume, from the run's log: `save` and `stop`
    records; a launch that ended without a `stop` before another began (or a final status
    other than completed) as `ended`; each later launch's `start` (its `resumed_from_step`)."""
    out: dict[str, list[tuple[float, int]]] = {
        "checkpoint save": [], "stop": [], "launch ended (killed or failed)": [], "resume": [],
    }  # fmt: skip
    out["checkpoint save"] = [(r.time, r.step) for r in run.records if isinstance(r, SaveRecord)]
    segs = launches(run.records)
    for i, seg in enumerate(segs):
        timed = [r for r in seg if isinstance(r, TrainRecord) and r.time is not None]
        stops = [r for r in seg if isinstance(r, StopRecord)]
        start = next((r for r in seg if isinstance(r, StartRecord)), None)
        if start is not None and start.resumed_from_step is not None:
            out["resume"].append((start.time, start.resumed_from_step))
        elif i > 0 and timed and start is None:  # version 1: no start record
            out["resume"].append((timed[0].time or 0.0, timed[0].step))
        last = i == len(segs) - 1
        if stops:
            out["stop"].append((stops[-1].time, stops[-1].step))
        elif timed and (not last or (run.summary is not None and not run.summary.completed)):
            out["launch ended (killed or failed)"].append((timed[-1].time or 0.0, timed[-1].step))
    return {k: sorted(set(v)) for k, v in out.items()}


_EVENT_STYLE = {
    "checkpoint save": ("s", "C1"),
    "stop": ("X", "C3"),
    "launch ended (killed or failed)": ("x", "k"),
    "resume": ("^", "C2"),
}


def timeline_figure(runs: Sequence[RunData]) -> Any:
    from matplotlib.figure import Figure

    multi = len(runs) > 1
    starts = {run.label: min((t for r in run.records if (t := getattr(r, "time", None))
                              is not None), default=0.0) for run in runs}  # fmt: skip
    ends = [t - starts[run.label] for run in runs for r in run.records
            if (t := getattr(r, "time", None)) is not None]  # fmt: skip
    unit, div = time_unit(max(ends, default=0.0))
    fig = Figure(figsize=(WIDTH_IN, 3.4), layout="constrained")
    ax = fig.add_subplot()
    for i, run in enumerate(runs):
        t0 = starts[run.label]
        xs: list[float] = []
        ys: list[float] = []
        for seg in launches(run.records):  # a gap between launches: no line across a restart
            timed = [r for r in seg if isinstance(r, TrainRecord) and r.time is not None]
            if timed and xs:
                xs.append(math.nan)
                ys.append(math.nan)
            xs += [(r.time - t0) / div for r in timed if r.time is not None]
            ys += [r.step for r in timed]
        ax.plot(xs, ys, lw=1.2, color=_color(i, multi, "measured"),
                label=_label("step", run, multi))  # fmt: skip
        if not any(isinstance(r, SaveRecord) for r in run.records):
            ax.text(0.01, 0.95 - 0.07 * i, f"{run.label}: no save records in its log",
                    transform=ax.transAxes, va="top", fontsize=8)  # fmt: skip
        for name, pts in events(run).items():
            if not pts:
                continue
            mk, color = _EVENT_STYLE[name]
            color = _color(i, multi, "measured") if multi else color
            ax.plot([(p[0] - t0) / div for p in pts], [p[1] for p in pts], ls="none", marker=mk,
                    ms=8, color=color, label=_label(name, run, multi))  # fmt: skip
            for p in pts:
                ax.axvline((p[0] - t0) / div, color=color, alpha=0.25, lw=0.8)
    ax.set_xlabel(f"time since the run's first record ({unit})")
    ax.set_ylabel("optimizer step")
    ax.set_title("timeline: checkpoint saves, stops, resumes", fontsize=10)
    ax.grid(alpha=0.3)
    _legend(ax)
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
                pts = [(float(x), float(y)) for x, y in zip(line.get_xdata(), line.get_ydata(),
                                                             strict=True)]  # fmt: skip
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
