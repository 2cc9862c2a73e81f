"""The report's timeline panel: each run's steps over time, with its checkpoint saves, stops,
launches that ended without a stop, and resumes, read from its records."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from blackwell_sm.records import SaveRecord, StartRecord, StopRecord, TrainRecord
from blackwell_sm.records import segments as launches
from blackwell_sm.runs.report_axes import WIDTH_IN, legend, run_color, run_label

if TYPE_CHECKING:
    from blackwell_sm.runs.report import RunData


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
        "checkpoint save": [],
        "stop": [],
        "launch ended (killed or failed)": [],
        "resume": [],
    }
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
    starts = {
        run.label: min(
            (t for r in run.records if (t := getattr(r, "time", None)) is not None), default=0.0
        )
        for run in runs
    }
    ends = [
        t - starts[run.label]
        for run in runs
        for r in run.records
        if (t := getattr(r, "time", None)) is not None
    ]
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
        ax.plot(
            xs,
            ys,
            lw=1.2,
            color=run_color(i, multi, "measured"),
            label=run_label("step", run, multi),
        )
        if not any(isinstance(r, SaveRecord) for r in run.records):
            ax.text(
                0.01,
                0.95 - 0.07 * i,
                f"{run.label}: no save records in its log",
                transform=ax.transAxes,
                va="top",
                fontsize=8,
            )
        for name, pts in events(run).items():
            if not pts:
                continue
            mk, color = _EVENT_STYLE[name]
            color = run_color(i, multi, "measured") if multi else color
            ax.plot(
                [(p[0] - t0) / div for p in pts],
                [p[1] for p in pts],
                ls="none",
                marker=mk,
                ms=8,
                color=color,
                label=run_label(name, run, multi),
            )
            for p in pts:
                ax.axvline((p[0] - t0) / div, color=color, alpha=0.25, lw=0.8)
    ax.set_xlabel(f"time since the run's first record ({unit})")
    ax.set_ylabel("optimizer step")
    ax.set_title("timeline: checkpoint saves, stops, resumes", fontsize=10)
    ax.grid(alpha=0.3)
    legend(ax)
    return fig
