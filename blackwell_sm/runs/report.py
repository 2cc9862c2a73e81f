"""`bsm report RUN [RUN...]`: one self-contained HTML file of one run, or of several overlaid (say
before and after calibration), drawn with matplotlib (the `[report]` extra, imported only here
and only when a report is made).

It shows loss and validation loss; tokens/s/GPU and MFU against the plan's prediction and its
range; peak memory against the plan and the usable limit; learning rate and gradient norm; the
checkpoint saves, stops and resumes of the log on a time axis; and, per run, a table of measured
against predicted (`runs/report_figures.py` draws the panels). The figures are inline SVG; the
arrays each figure plots, read back from its matplotlib lines, are embedded as JSON
(`<script id="bsm-plot-data">`) so that a program can check them against metrics.jsonl. Runs
are read through `runs/read.py` (typed records: a malformed file is refused, naming it); a run
with no measured step is refused rather than drawn empty.
"""

from __future__ import annotations

import html
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from blackwell_sm.errors import MissingExtraError, SpecError
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import Record, Summary, TrainRecord
from blackwell_sm.runs.read import RunFiles, read_run
from blackwell_sm.runs.report_figures import figures, plotted, svg

#: How `bsm report` names its runs argument in errors (its metavar).
RUN_FIELD = "RUN_DIR|JOB"

PLOT_DATA_ID = "bsm-plot-data"
MAX_RUNS = 10  # matplotlib's default colour cycle: one colour per run

#: In every report's head: an existing file without it is not a report, never overwritten.
REPORT_MARK = "<title>bsm report: "


class RunData(NamedTuple):
    """What a report is drawn from: one run, with the label its lines carry when overlaid."""

    source: str
    label: str
    plan: Plan
    summary: Summary | None
    records: list[Record]
    run: RunFiles


def load_run(source: str, aws: Any = None, *, label: str | None = None) -> RunData:
    """A run directory, or a job name (its plan, summary and records from S3, else its logs).
    A run that measured nothing (no summary figures, no logged step) is SpecError."""
    run = read_run(source, aws, field=RUN_FIELD)
    if run.measured().tokens_per_s_per_gpu is None:
        raise SpecError(
            f"nothing was measured in {source}: no summary.json figures and no logged step "
            f"({len(run.records)} records)",
            field=RUN_FIELD,
            hint="the run may still be starting or have died before its first logged step; "
            "`bsm status` or the run's output/failure says which",
            code="nothing_measured",
        )
    name = label or Path(source.rstrip("/")).name or source
    return RunData(run.source, name, run.plan, run.summary, run.records, run)


def run_labels(sources: Sequence[str]) -> list[str]:
    """Short, distinct labels: each source's last path part, longer where two would clash."""
    labels = [Path(s.rstrip("/")).name or s for s in sources]
    if len(set(labels)) == len(labels):
        return labels
    return (
        [s.rstrip("/") for s in sources]
        if len(set(sources)) == len(sources)
        else [f"{i + 1}: {s}" for i, s in enumerate(sources)]
    )


def load_runs(sources: Sequence[str], aws: Any = None) -> list[RunData]:
    if not sources:
        raise SpecError(
            "no run given", field=RUN_FIELD, hint="bsm report RUN_DIR|JOB [RUN_DIR|JOB...]"
        )
    if len(sources) > MAX_RUNS:
        raise SpecError(
            f"{len(sources)} runs given; a report overlays at most {MAX_RUNS}",
            field=RUN_FIELD,
            hint="compare fewer runs at a time",
        )
    return [
        load_run(s, aws, label=lab) for s, lab in zip(sources, run_labels(sources), strict=True)
    ]


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
    rng = f"predicted range {lo:,.0f}-{hi:,.0f}" if lo is not None else ""
    return [
        Comparison("step time", "s", meas.step_time_s, t.step_time_s, "median of steady steps"),
        Comparison(
            "tokens/s/GPU", "tokens/s", meas.tokens_per_s_per_gpu, t.tokens_per_s_per_gpu, rng
        ),
        Comparison("MFU", "fraction", meas.mfu, t.mfu, "of the dense BF16 peak"),
        Comparison(
            "peak memory",
            "GiB",
            meas.peak_memory_reserved_gib,
            mem_pred,
            "allocator reserved" if cuda else f"{kind or 'memory'} vs the plan's total",
        ),
    ]


def _num(v: float) -> str:
    """A figure for people: thousands separated, 3-4 significant digits below 1,000."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.4g}"


def summary_line(data: RunData) -> str:
    """One line: measured against predicted speed and memory."""
    parts = []
    for c in comparisons(data):
        if c.name in ("tokens/s/GPU", "peak memory") and c.measured is not None and c.predicted:
            unit = " GiB" if c.unit == "GiB" else ""
            parts.append(
                f"{c.name} measured {_num(c.measured)}{unit} vs predicted {_num(c.predicted)}"
                f"{unit} (x{c.ratio:.2f})"
            )
    return "; ".join(parts) or "no measured steps"


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

_CSS = """body{font-family:system-ui,sans-serif;max-width:980px;margin:2em auto;padding:0 1em;
color:#222}h1{font-size:1.4em;overflow-wrap:anywhere}h2{font-size:1.15em}
table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:4px 10px;
text-align:right}th{background:#f4f4f4}td:first-child,th:first-child{text-align:left}
.fig{margin:1.5em 0}.fig svg{max-width:100%;height:auto}.dim{color:#777}p{overflow-wrap:anywhere}"""


def _fmt(v: float | None) -> str:
    return "-" if v is None else _num(v)


def _run_section(data: RunData, multi: bool) -> str:
    """A run's configuration, status and measured-against-predicted table."""
    e = html.escape
    plan, s = data.plan, data.summary
    c = plan.config
    rows = "".join(
        f"<tr><td>{e(x.name)}</td><td>{e(x.unit)}</td><td>{e(_fmt(x.measured))}</td>"
        f"<td>{e(_fmt(x.predicted))}</td>"
        f"<td>{'-' if x.ratio is None else f'{x.ratio:.2f}'}</td><td>{e(x.note)}</td></tr>"
        for x in comparisons(data)
    )
    status = s.status if s else "no summary (the run did not finish writing one)"
    cal = plan.calibration
    cal_line = (
        f"<p>calibration profile: {e(cal.profile)} ({e(cal.name)}, {e(cal.created)})</p>"
        if cal
        else ""
    )
    title = f"<h2>run {e(data.label)}: {e(data.source)}</h2>" if multi else ""
    return (
        f'<section class="run">{title}'
        f"<p>{e(plan.model.name)} on {plan.instance.count} x {e(plan.instance.type)} "
        f"({plan.instance.gpus_per_instance} x {e(plan.instance.gpu)}); shard {c.shard_degree} x "
        f"replicate {c.replicate_degree}, micro-batch {c.micro_batch_size} x accumulation "
        f"{c.grad_accum_steps}, seq {c.seq_len}, {e(c.precision)}, checkpointing "
        f"{e(c.activation_checkpointing)}, compile {c.compile}</p>"
        f"<p>status: {e(status)}; final step {e(str(s.final_step if s else '-'))} of "
        f"{plan.run.steps}; {e(summary_line(data))}</p>{cal_line}"
        f"<table><caption>measured against predicted{': ' + e(data.label) if multi else ''}"
        "</caption><tr><th>figure</th><th>unit</th><th>measured</th><th>predicted</th>"
        f"<th>measured / predicted</th><th>note</th></tr>{rows}</table></section>"
    )


def render_html(runs: Sequence[RunData], figs: dict[str, Any]) -> str:
    """The report as one HTML document (inline SVG, embedded plot data)."""
    e = html.escape
    multi = len(runs) > 1
    what = ", ".join(r.label for r in runs) if multi else runs[0].source
    head = f"<h1>blackwell_sm run report: {e(what)}</h1>"
    if multi:
        head += f"<p>{len(runs)} runs overlaid; each line's label ends with its run's.</p>"
    sections = "".join(_run_section(r, multi) for r in runs)
    body = "".join(f'<div class="fig" id="fig-{e(n)}">{svg(f)}</div>' for n, f in figs.items())
    data_json = json.dumps(plotted(figs), allow_nan=False).replace("</", "<\\/")
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{REPORT_MARK}{e(what)}</title><style>{_CSS}</style></head><body>"
        f"{head}{sections}{body}"
        f'<script type="application/json" id="{PLOT_DATA_ID}">{data_json}</script>'
        '<p class="dim">Made by bsm report. The plotted arrays are embedded above as JSON '
        f"(#{PLOT_DATA_ID}).</p></body></html>\n"
    )


class ReportResult(NamedTuple):
    path: Path
    summary: str


def default_out(sources: Sequence[str]) -> Path:
    """RUN_DIR/report.html or JOB-report.html for one run; compare-report.html for several."""
    if len(sources) > 1:
        return Path("compare-report.html")
    p = Path(sources[0])
    return p / "report.html" if p.is_dir() else Path(f"{sources[0]}-report.html")


def check_report_out(sources: Sequence[str], out: str | Path | None) -> Path:
    """The report's path (`out`, else `default_out`), checked: not a run's own file, not
    another file bsm report did not write (`output_place.check_file_output`)."""
    from blackwell_sm.output_place import check_file_output

    target = out if out is not None else default_out(sources)
    return check_file_output(target, sources, mark=REPORT_MARK, command="bsm report")


def write_report(
    source: str | Sequence[str], out: str | Path | None = None, *, aws: Any = None
) -> ReportResult:
    """Draw the report of `source` (a run, or several to overlay) and write it to `out`
    (default: `default_out`)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise MissingExtraError("matplotlib", "`bsm report`") from None
    sources = [source] if isinstance(source, str) else list(source)
    target = check_report_out(sources, out)  # before drawing; again below, right before writing
    runs = load_runs(sources, aws)
    doc = render_html(runs, figures(runs))
    from blackwell_sm.atomic_write import write_text  # atomic: a reader never sees half a file

    check_report_out(sources, target)
    path = write_text(target, doc, flag="--out")
    if len(runs) == 1:
        return ReportResult(path, summary_line(runs[0]))
    return ReportResult(path, " | ".join(f"{r.label}: {summary_line(r)}" for r in runs))


def read_plot_data(html_text: str) -> dict[str, Any]:
    """The plot data embedded in a report (for checks and tools)."""
    marker = f'id="{PLOT_DATA_ID}">'
    start = html_text.index(marker) + len(marker)
    end = html_text.index("</script>", start)
    return json.loads(html_text[start:end].replace("<\\/", "</"))
