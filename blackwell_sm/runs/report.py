"""`bsm report RUN_DIR|JOB`: one self-contained HTML file of a run, drawn with matplotlib (the
`[report]` extra, imported only here and only when a report is made).

It shows loss and validation loss over steps; tokens/s/GPU and MFU over steps against the plan's
prediction and its range; peak memory against the plan and the usable limit; checkpoint saves,
stops and resumes on the time axis; and a table of measured against predicted. The figures are
inline SVG; the arrays each figure plots, read back from its matplotlib lines, are embedded as
JSON (`<script id="bsm-plot-data">`) so that a program can check them against metrics.jsonl.
The run is read through `runs/read.py` (typed records: a malformed file is refused, naming it);
a run with no measured step is refused rather than drawn empty.
"""

from __future__ import annotations

import html
import io
import json
from pathlib import Path
from typing import Any, NamedTuple

from blackwell_sm.errors import BsmError, SpecError
from blackwell_sm.opt_ml import COMPLETE_MARKER, OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import Record, SaveRecord, StopRecord, Summary, TrainRecord, ValRecord
from blackwell_sm.records import segments as launches
from blackwell_sm.runs.read import RunFiles, read_run

PLOT_DATA_ID = "bsm-plot-data"


class RunData(NamedTuple):
    """What a report is drawn from."""

    source: str
    plan: Plan
    summary: Summary | None
    records: list[Record]
    saves: list[tuple[int, float]]  # (step, unix time) of complete checkpoints still on disk
    run: RunFiles


def _saves(run_dir: Path) -> list[tuple[int, float]]:
    out = []
    for d in sorted(OptMl(run_dir).checkpoints.glob("step-*")):
        marker = d / COMPLETE_MARKER
        if not marker.is_file():
            continue
        try:
            meta = json.loads(marker.read_text())
            out.append((int(meta["step"]), float(meta["time"])))
        except (ValueError, KeyError, TypeError, OSError):
            continue
    return out


def load_run(source: str, aws: Any = None) -> RunData:
    """A run directory, or a job name (its plan, summary and records from S3, else its logs).
    A run that measured nothing (no summary figures, no logged step) is SpecError."""
    run = read_run(source, aws, field="RUN")
    if run.measured().tokens_per_s_per_gpu is None:
        raise SpecError(
            f"nothing was measured in {source}: no summary.json figures and no logged step "
            f"({len(run.records)} records)",
            field="RUN",
            hint="the run may still be starting or have died before its first logged step; "
            "`bsm status` or the run's output/failure says which",
            code="nothing_measured",
        )
    saves = _saves(Path(source)) if Path(source).is_dir() else []
    return RunData(run.source, run.plan, run.summary, run.records, saves, run)


def train_records(data: RunData) -> list[TrainRecord]:
    return [r for r in data.records if isinstance(r, TrainRecord)]


# ---------------------------------------------------------------------------------------------
# Measured against predicted
# ---------------------------------------------------------------------------------------------


class Comparison(NamedTuple):
    name: str
    unit: str
    measured: float | None
    predicted: float | None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.measured is None or not self.predicted:
            return None
        return self.measured / self.predicted


def comparisons(data: RunData) -> list[Comparison]:
    """The table's rows: the summary's measured figures (else the steady records' medians)."""
    plan, t = data.plan, data.plan.throughput
    meas = data.run.measured()
    kind = meas.memory_kind or ""
    cuda = kind.startswith("cuda")
    mem_pred = plan.predicted_memory_gib()
    lo, hi = t.tokens_per_s_per_gpu_range or (None, None)
    rng = f"range {lo:,.0f}-{hi:,.0f} ({t.evidence})" if lo is not None else ""
    return [
        Comparison("step time", "s", meas.step_time_s, t.step_time_s),
        Comparison("tokens/s/GPU", "", meas.tokens_per_s_per_gpu, t.tokens_per_s_per_gpu, rng),
        Comparison("MFU", "", meas.mfu, t.mfu, "against the dense BF16 peak"),
        Comparison("peak memory", "GiB", meas.peak_memory_reserved_gib, mem_pred,
                   "allocator reserved" if cuda else f"{kind or 'memory'} vs the plan's total"),
    ]  # fmt: skip


def _num(v: float) -> str:
    """A figure for people: thousands separated, 3-4 significant digits below 1,000."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def summary_line(data: RunData) -> str:
    """One line: measured against predicted speed and memory."""
    parts = []
    for c in comparisons(data):
        if c.name in ("tokens/s/GPU", "peak memory") and c.measured is not None and c.predicted:
            unit = f" {c.unit}" if c.unit else ""
            parts.append(
                f"{c.name} measured {_num(c.measured)}{unit} vs predicted {_num(c.predicted)}"
                f"{unit} (x{c.ratio:.2f})"
            )
    return "; ".join(parts) or "no measured steps"


# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def _flat(ax: Any, x0: float, x1: float, y: float, label: str, **kw: Any) -> None:
    ax.plot([x0, x1], [y, y], label=label, **kw)


def figures(data: RunData) -> dict[str, Any]:
    """The report's matplotlib Figures by name (drawn off-screen, nothing shown)."""
    from matplotlib.figure import Figure  # no pyplot: no global backend or figure registry

    t, m = data.plan.throughput, data.plan.memory_gib
    train = train_records(data)
    vals = [r for r in data.records if isinstance(r, ValRecord)]
    steps = [r.step for r in train]
    x0, x1 = (min(steps), max(steps)) if steps else (0, 1)
    figs: dict[str, Any] = {}

    fig = Figure(figsize=(8, 3.2))
    ax = fig.add_subplot()
    ax.plot(steps, [r.loss for r in train], label="train loss", lw=1.2)
    if vals:
        ax.plot([r.step for r in vals], [r.loss for r in vals], "o-",
                label="validation loss", lw=1.2)  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("loss")
    ax.legend(loc="upper right")
    ax.grid(alpha=0.3)
    figs["loss"] = fig

    fig = Figure(figsize=(8, 5.6))
    ax, ax2 = fig.subplots(2, 1, sharex=True)
    ax.plot(steps, [r.tok_s_gpu for r in train], label="measured tokens/s/GPU", lw=1.2)
    _flat(ax, x0, x1, t.tokens_per_s_per_gpu, "predicted tokens/s/GPU", ls="--", color="C3")
    if t.tokens_per_s_per_gpu_range:
        lo, hi = t.tokens_per_s_per_gpu_range
        ax.fill_between([x0, x1], [lo, lo], [hi, hi], color="C3", alpha=0.12,
                        label=f"predicted range ({t.evidence})")  # fmt: skip
    ax.set_ylabel("tokens/s/GPU")
    ax.set_title("speed against the plan")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    ax2.plot(steps, [r.mfu for r in train], label="measured MFU", lw=1.2, color="C2")
    _flat(ax2, x0, x1, t.mfu, "predicted MFU", ls="--", color="C3")
    if t.tokens_per_s_per_gpu_range and t.tokens_per_s_per_gpu:
        lo, hi = (v / t.tokens_per_s_per_gpu * t.mfu for v in t.tokens_per_s_per_gpu_range)
        ax2.fill_between([x0, x1], [lo, lo], [hi, hi], color="C3", alpha=0.12)
    ax2.set_xlabel("step")
    ax2.set_ylabel("MFU")
    ax2.legend(loc="lower right")
    ax2.grid(alpha=0.3)
    figs["speed"] = fig

    fig = Figure(figsize=(8, 3.2))
    ax = fig.add_subplot()
    kinds = {r.memory_kind for r in train}
    ax.plot(steps, [r.mem_reserved_gib for r in train], label="measured peak memory", lw=1.2)
    _flat(ax, x0, x1, m.total, "predicted total", ls="--", color="C3")
    if m.allocator_reserved is not None and any(str(k).startswith("cuda") for k in kinds):
        _flat(ax, x0, x1, m.allocator_reserved, "predicted allocator reserved", ls=":", color="C3")
    if m.usable is not None:
        _flat(ax, x0, x1, m.usable, "usable limit", color="k", lw=1.0)
        seen = [r.mem_reserved_gib for r in train] + [m.total]
        if m.usable > 2.5 * max(seen):  # far above: keep the run readable, say where it is
            ax.set_ylim(0, 1.3 * max(seen))
            ax.text(0.01, 0.95, f"usable limit {m.usable:,.1f} GiB (above the plot)",
                    transform=ax.transAxes, va="top", fontsize=9)  # fmt: skip
    ax.set_xlabel("step")
    ax.set_ylabel("GiB per GPU")
    ax.set_title(f"peak memory ({', '.join(sorted(map(str, kinds))) or 'none'})")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    figs["memory"] = fig

    fig = Figure(figsize=(8, 3.2))
    ax = fig.add_subplot()
    times = [t for r in data.records if (t := getattr(r, "time", None)) is not None]
    start = min(times, default=0.0)
    mins = lambda ts: (ts - start) / 60.0  # noqa: E731
    timed = [r for r in train if r.time is not None]
    ax.plot([mins(r.time) for r in timed], [r.step for r in timed], label="step", lw=1.2)
    events: dict[str, list[tuple[float, int]]] = {"checkpoint save": [], "stop": [], "resume": []}
    logged = [r for r in data.records if isinstance(r, SaveRecord)]
    # Saves from the log; a version 1 run (no save records): the checkpoints still on disk.
    for step, when in [(r.step, r.time) for r in logged] or data.saves:
        events["checkpoint save"].append((mins(when), step))
    segs = launches(data.records)
    for i, seg in enumerate(segs):
        steps_t = [r for r in seg if isinstance(r, TrainRecord) and r.time is not None]
        stops = [r for r in seg if isinstance(r, StopRecord)]
        if i > 0 and steps_t:
            events["resume"].append((mins(steps_t[0].time), steps_t[0].step))
        last = i == len(segs) - 1
        if stops:
            events["stop"].append((mins(stops[-1].time), stops[-1].step))
        elif steps_t and (not last or (data.summary is not None and not data.summary.completed)):
            events["stop"].append((mins(steps_t[-1].time), steps_t[-1].step))
    style = {"checkpoint save": ("s", "C1"), "stop": ("x", "C3"), "resume": ("^", "C2")}
    for label, pts in events.items():
        if pts:
            pts = sorted(set(pts))
            mk, color = style[label]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], ls="none", marker=mk, ms=8,
                    color=color, label=label)  # fmt: skip
            for p in pts:
                ax.axvline(p[0], color=color, alpha=0.25, lw=0.8)
    ax.set_xlabel("minutes since the first record")
    ax.set_ylabel("step")
    ax.set_title("timeline: checkpoint saves, stops, resumes")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    figs["timeline"] = fig
    for f in figs.values():
        f.tight_layout()
    return figs


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
                xs = [float(v) for v in line.get_xdata()]
                ys = [float(v) for v in line.get_ydata()]
                lines[label] = {"x": xs, "y": ys}
        out[name] = lines
    return out


def _svg(fig: Any) -> str:
    buf = io.StringIO()
    fig.savefig(buf, format="svg")
    text = buf.getvalue()
    return text[text.find("<svg") :]  # drop the XML prolog and DOCTYPE: inline in HTML


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;color:#222}
h1{font-size:1.4em}table{border-collapse:collapse;margin:1em 0}
td,th{border:1px solid #ccc;padding:4px 10px;text-align:right}th{background:#f4f4f4}
td:first-child,th:first-child{text-align:left}.fig{margin:1.5em 0}.dim{color:#777}"""


def _fmt(v: float | None, unit: str = "") -> str:
    if v is None:
        return "-"
    return _num(v) + (f" {unit}" if unit else "")


def render_html(data: RunData, figs: dict[str, Any]) -> str:
    """The report as one HTML document (inline SVG, embedded plot data)."""
    e = html.escape
    plan = data.plan
    c = plan.config
    rows = "".join(
        f"<tr><td>{e(x.name)}</td><td>{e(_fmt(x.measured, x.unit))}</td>"
        f"<td>{e(_fmt(x.predicted, x.unit))}</td>"
        f"<td>{'-' if x.ratio is None else f'{x.ratio:.2f}'}</td><td>{e(x.note)}</td></tr>"
        for x in comparisons(data)
    )
    s = data.summary
    status = s.status if s else "no summary (the run did not finish writing one)"
    cal = plan.calibration
    cal_line = (
        f"<p>calibration profile: {e(cal.profile)} ({e(cal.name)}, {e(cal.created)})</p>"
        if cal
        else ""
    )
    head = (
        f"<h1>blackwell_sm run report: {e(data.source)}</h1>"
        f"<p>{e(plan.model.name)} on {plan.instance.count} x {e(plan.instance.type)} "
        f"({plan.instance.gpus_per_instance} x {e(plan.instance.gpu)}); shard {c.shard_degree} x "
        f"replicate {c.replicate_degree}, micro-batch {c.micro_batch_size} x accumulation "
        f"{c.grad_accum_steps}, seq {c.seq_len}, {e(c.precision)}, checkpointing "
        f"{e(c.activation_checkpointing)}, compile {c.compile}</p>"
        f"<p>status: {e(status)}; final step {e(str(s.final_step if s else '-'))} of "
        f"{plan.run.steps}; {e(summary_line(data))}</p>{cal_line}"
    )
    table = (
        "<h2>measured against predicted</h2><table><tr><th>figure</th><th>measured</th>"
        f"<th>predicted</th><th>measured / predicted</th><th></th></tr>{rows}</table>"
    )
    body = "".join(f'<div class="fig" id="fig-{e(n)}">{_svg(f)}</div>' for n, f in figs.items())
    data_json = json.dumps(plotted(figs), allow_nan=False).replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        f"<title>bsm report: {e(data.source)}</title><style>{_CSS}</style></head><body>"
        f"{head}{table}{body}"
        f'<script type="application/json" id="{PLOT_DATA_ID}">{data_json}</script>'
        '<p class="dim">Made by bsm report. The plotted arrays are embedded above as JSON '
        f"(#{PLOT_DATA_ID}).</p></body></html>\n"
    )


class ReportResult(NamedTuple):
    path: Path
    summary: str


def write_report(source: str, out: str | Path | None = None, *, aws: Any = None) -> ReportResult:
    """Draw the report of `source` and write it to `out` (default RUN_DIR/report.html, or
    JOB-report.html for a job)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise BsmError(
            "bsm report needs matplotlib", hint="pip install 'blackwell-sm[report]'"
        ) from None
    data = load_run(source, aws)
    figs = figures(data)
    doc = render_html(data, figs)
    if out is None:
        p = Path(source)
        out = p / "report.html" if p.is_dir() else Path(f"{source}-report.html")
    from blackwell_sm.atomic_write import write_text  # atomic: a reader never sees half a file

    path = write_text(out, doc, flag="--out")
    return ReportResult(path, summary_line(data))


def read_plot_data(html_text: str) -> dict[str, Any]:
    """The plot data embedded in a report (for checks and tools)."""
    marker = f'id="{PLOT_DATA_ID}">'
    start = html_text.index(marker) + len(marker)
    end = html_text.index("</script>", start)
    return json.loads(html_text[start:end].replace("<\\/", "</"))
