"""A job's status and progress as rows of (key, value): what `bsm status` prints, and what a
notebook shows for `TrainingJob.status()` and `.progress()` (`RowsRepr`: the same rows as text or
as an HTML table, through the plan summary's table helpers)."""

from __future__ import annotations

from typing import Any

from blackwell_sm.planner.summary import Section, html_block, text_block
from blackwell_sm.planner.units import hours_text


class RowsRepr:
    """IPython's plain and HTML displays from `_rows()`, under the title `_title()`."""

    def _title(self) -> str:
        raise NotImplementedError

    def _rows(self) -> list[tuple[str, str]]:
        raise NotImplementedError

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        if cycle:
            printer.text(f"{type(self).__name__}(...)")
            return
        printer.text("\n".join(text_block(self._title(), [Section("", self._rows())])))

    def _repr_html_(self) -> str:
        return html_block(self._title(), [Section("", self._rows())])


def _fmt_time(ts: Any) -> str:
    return ts.strftime("%Y-%m-%d %H:%M:%S %Z") if ts else "-"


def _capacity_rows(info: Any) -> list[tuple[str, str]]:
    """Instances and plan; with instance preferences, the list, SageMaker's choice and the
    bundle plan that runs on it."""
    if not info.instance_preferences:
        return [
            ("instances", f"{info.instance_count} x {info.instance_type}"),
            ("training plan", info.training_plan_arn or "- (on-demand capacity)"),
        ]
    prefs = ", ".join(
        f"{p.get('InstanceCount')} x {p.get('InstanceType')}"
        + (
            f" on {p['TrainingPlanArns'][0].rsplit('/', 1)[-1]}"
            if p.get("TrainingPlanArns")
            else ""
        )
        for p in info.instance_preferences
    )
    if info.selected_instance_type:
        selected = f"{info.selected_instance_count} x {info.selected_instance_type}"
        plan = info.selected_training_plan or "- (on-demand capacity)"
        runs = info.running_plan
    else:
        selected, plan, runs = "- (not chosen yet)", "-", "- (chosen when SageMaker picks a type)"
    return [
        ("preferences", prefs),
        ("selected", selected),
        ("training plan", plan),
        ("plan run", runs),
    ]


def status_rows(info: Any, region: str | None = None) -> list[tuple[str, str]]:
    """The rows `bsm status` prints for a job (JobInfo), and its notebook repr shows."""
    rows = [
        ("job", info.name),
        ("region", region or "-"),
        ("status", f"{info.status} / {info.secondary_status or '-'}"),
        ("message", info.status_message or "-"),
        *_capacity_rows(info),
        ("created", _fmt_time(info.creation_time)),
        ("started", _fmt_time(info.training_start_time)),
        ("ended", _fmt_time(info.training_end_time)),
        ("billable", hours_of(info.billable_seconds)),
        ("max runtime", hours_of(info.max_runtime_s)),
        ("model", info.model_artifacts or "-"),
    ]
    if info.failure_reason:
        rows.append(("failure", info.failure_reason))
        if info.failure_explanation:
            rows.append(("what to do", info.failure_explanation))
    rows += [(metric, f"{value:g}") for metric, value in sorted(info.final_metrics.items())]
    return rows


def _num(value: float | None, fmt: str = ",.1f") -> str:
    return "-" if value is None else format(value, fmt)


def _duration(seconds: float) -> str:
    """A countdown to the minute (an ETA); totals take `_hours`, as the plan shows them."""
    h, rest = divmod(round(seconds), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def hours_of(seconds: float | None) -> str:
    """A duration as the plan shows one (planner/units.py): hours, days over 48 h, minutes."""
    return "-" if not seconds else hours_text(seconds / 3600)


def _in_time(ok: bool | None, end: Any) -> str:
    if end is None:
        return "-"
    verdict = "" if ok is None else ("  (ends before it)" if ok else "  (the run ends AFTER it)")
    return _fmt_time(end) + verdict


def progress_rows(p: Any) -> list[tuple[str, str]]:
    """The progress rows of `bsm status`: the latest step, the check's measured against
    predicted, the ETA against the deadlines, the alerts."""
    if p.step is None and not p.check:
        return [("note", note) for note in p.notes] or [("status", p.status)]  # only why
    of = f" of {p.total_steps:,}" if p.total_steps else ""
    rows = [
        ("step", "-" if p.step is None else f"{p.step:,}{of}  at {_fmt_time(p.as_of)}"),
        ("tokens", _num(p.tokens, ",d")),
    ]
    speed = f"{_num(p.tokens_per_s_per_gpu)} tokens/s/GPU"
    if p.predicted_tokens_per_s_per_gpu is not None:
        rng = (
            f", range {_num(p.predicted_range[0])}-{_num(p.predicted_range[1])}"
            if p.predicted_range
            else ""
        )
        speed += f"  (predicted {_num(p.predicted_tokens_per_s_per_gpu)}{rng})"
    rows += [("speed", speed), ("mfu", _num(p.mfu, ".3f"))]
    mem = f"{_num(p.mem_reserved_gib, '.2f')} GiB peak reserved"
    if p.predicted_mem_high_gib is not None:
        mem += f"  (plan's range up to {p.predicted_mem_high_gib:.2f} GiB)"
    rows.append(("memory", mem))
    c = p.check
    if c:
        rows.append(
            (
                "check",
                f"step time {_num(c.get('check:step_time_s'), '.3f')} s = compute "
                f"{_num(c.get('check:compute_s'), '.3f')} s + exposed communication "
                f"{_num(c.get('check:exposed_comm_s'), '.3f')} s + other",
            )
        )
    eta = "-" if p.eta_s is None else f"{_duration(p.eta_s)} (ends {_fmt_time(p.projected_end)})"
    rows += [
        ("eta", eta),
        ("max runtime end", _in_time(p.ends_before_max_runtime, p.max_runtime_end)),
    ]
    if p.training_plan:
        rows.append(("plan end", _in_time(p.ends_before_plan_end, p.training_plan_end)))
    rows += [("alert", a) for a in p.alerts] + [("note", n) for n in p.notes]
    return rows
