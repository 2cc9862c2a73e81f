"""What every report panel shares (matplotlib, off-screen): labels and colours for one run or
several overlaid, the legend outside the plot, a predicted value as a flat line, a predicted range
as a band clipped to what is possible, and the log axis when measured and predicted are far apart.
"""

from __future__ import annotations

import statistics
import textwrap
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from blackwell_sm.records import TrainRecord

if TYPE_CHECKING:
    from blackwell_sm.runs.report import RunData

#: Measured over predicted beyond which (or below 1/FAR_RATIO) an axis turns logarithmic.
FAR_RATIO = 3.0
#: A gradient norm axis turns logarithmic when its largest value is this many times its smallest.
NORM_LOG_SPAN = 30.0
LEGEND_CHARS = 34  # a legend line's width: the plot keeps about two thirds of the figure
WIDTH_IN = 9.0  # 648 pt: fits the page's 980 px column, and scales down with it


def run_label(base: str, run: RunData, multi: bool) -> str:
    return f"{base}: {run.label}" if multi else base


def run_color(i: int, multi: bool, role: str) -> str:
    """Single run: measured C0/C2, the plan in C3. Overlaid runs: one colour per run."""
    if multi:
        return f"C{i % 10}"
    return {"measured": "C0", "mfu": "C2", "plan": "C3"}[role]


def train_records(run: RunData) -> list[TrainRecord]:
    return [r for r in run.records if isinstance(r, TrainRecord)]


def span(runs: Sequence[RunData]) -> tuple[float, float]:
    steps = [r.step for run in runs for r in train_records(run)]
    return (min(steps), max(steps)) if steps else (0.0, 1.0)


def above_view(handle: Any, top: float) -> bool:
    """A line wholly above the view (a far usable limit): the legend leaves it out."""
    ys: Any = getattr(handle, "get_ydata", lambda: [])()  # matplotlib's array
    return len(ys) > 0 and min(float(y) for y in ys) > top


def legend(ax: Any) -> None:
    """Outside the plot, on its right (it never covers data), long labels wrapped so that the
    plot keeps its width."""
    handles, labels = ax.get_legend_handles_labels()
    top = ax.get_ylim()[1]
    shown = [(h, lab) for h, lab in zip(handles, labels, strict=True) if not above_view(h, top)]
    handles, labels = [h for h, _ in shown], [lab for _, lab in shown]
    if handles:
        wrapped = [textwrap.fill(lab, LEGEND_CHARS, subsequent_indent="  ") for lab in labels]
        ax.legend(
            handles,
            wrapped,
            loc="upper left",
            bbox_to_anchor=(1.01, 1.0),
            fontsize=8,
            borderaxespad=0.0,
        )


def far_ratio(measured: Sequence[float], predicted: float | None) -> float | None:
    """Median measured over predicted when beyond FAR_RATIO either way, else None."""
    if not measured or not predicted or predicted <= 0:
        return None
    med = statistics.median(measured)
    ratio = med / predicted
    return ratio if med > 0 and (ratio > FAR_RATIO or ratio < 1 / FAR_RATIO) else None


def log_if_far(ax: Any, pairs: Sequence[tuple[list[float], float | None]], title: str) -> None:
    """A log axis when any run's measured figures are far from its prediction."""
    ratios = [r for m, p in pairs if (r := far_ratio(m, p)) is not None]
    if ratios:
        worst = max(ratios, key=lambda r: max(r, 1 / r))
        ax.set_yscale("log")
        title += f"\n(log axis: measured is {worst:.3g}x the prediction)"
    ax.set_title(title, fontsize=10)


def flat(ax: Any, x0: float, x1: float, y: float, label: str, **kw: Any) -> None:
    ax.plot([x0, x1], [y, y], label=label, **kw)


def band(
    ax: Any, x0: float, x1: float, lo: float, hi: float, label: str, cap: float | None, color: str
) -> None:
    """The prediction's range, clipped to [0, cap]; the label says when it was clipped."""
    top = hi if cap is None else min(hi, cap)
    if cap is not None and hi > cap:
        label += " (clipped at what is possible)"
    ax.fill_between([x0, x1], [max(lo, 0.0)] * 2, [top] * 2, color=color, alpha=0.12, label=label)
