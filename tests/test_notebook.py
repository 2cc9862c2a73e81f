"""The notebook API (issue 21): the plan's summary and its HTML/pretty reprs (rendered and parsed),
`plan()` raising InfeasiblePlanError unless asked not to, plan warnings as `PlanWarning`, field
descriptions on every Plan model, and the job handle's status and progress reprs."""

from __future__ import annotations

import typing
import warnings
from datetime import UTC, datetime
from html.parser import HTMLParser

import pytest
from pydantic import BaseModel

import blackwell_sm as bsm
from blackwell_sm.aws.jobs import JobInfo
from blackwell_sm.aws.progress import Progress
from blackwell_sm.errors import BsmError, InfeasiblePlanError, PlanWarning
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.preferences import PreferencePlans

INFEASIBLE = {
    "seq_len": 131072,
    "precision": "bf16",
    "activation_checkpointing": "none",
    "compute.instance_count": 1,
    "training.total_tokens": 10**9,
    "training.pins.offload": False,  # the state on the GPUs (offload would halve the miss)
}


class Tables(HTMLParser):
    """Each <table> as {caption, rows: [[cell, ...]]}, the text outside tables, every tag."""

    def __init__(self) -> None:
        super().__init__()
        self.tables: list[dict] = []
        self.tags: list[str] = []
        self.text: list[str] = []
        self._cell: list[str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        self.tags.append(tag)
        if tag == "table":
            self.tables.append({"caption": "", "rows": []})
        elif tag == "tr":
            self.tables[-1]["rows"].append([])
        elif tag in ("th", "td"):
            self._cell = []
        elif tag == "caption":
            self._in = "caption"

    def handle_endtag(self, tag: str) -> None:
        if tag in ("th", "td") and self._cell is not None:
            self.tables[-1]["rows"][-1].append("".join(self._cell))
            self._cell = None
        elif tag == "caption":
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._cell.append(data)
        elif self._in == "caption":
            self.tables[-1]["caption"] += data
        else:
            self.text.append(data)


def parse(html: str) -> Tables:
    t = Tables()
    t.feed(html)
    t.close()
    return t


def quiet_plan(*args, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PlanWarning)
        return bsm.plan(*args, **kw)


@pytest.fixture(scope="module")
def plan70() -> Plan:
    p = quiet_plan("llama-3.1-70b", seq_len=4096, **{"training.total_tokens": 20 * 10**9})
    assert isinstance(p, Plan)
    return p


def test_the_html_repr_is_the_summary_as_tables(plan70):
    doc = parse(plan70._repr_html_())
    captions = [t["caption"] for t in doc.tables]
    assert captions[:3] == ["run", "configuration", "memory per GPU"]
    assert "runner-ups" in captions and "warnings" in captions and "reasons" in captions
    run = dict(r for r in doc.tables[0]["rows"])
    assert run["instances"].startswith(f"{plan70.instance.count} x ml.p6-b200.48xlarge")
    assert "per billion tokens" in run["tokens"] and "range" in run["cost"]
    config = dict(doc.tables[1]["rows"])
    assert config["precision"].startswith(plan70.config.precision)
    assert plan70.model.name in "".join(doc.text)  # the headline
    ups = next(t for t in doc.tables if t["caption"] == "runner-ups")["rows"]
    assert 1 <= len(ups) <= 3 and all(len(r) == 2 for r in ups)
    assert doc.tags.count("details") == sum(
        c in captions
        for c in ("warnings", "reasons", "advice", "every runner-up (with its --set flags)")
    )


def test_the_html_repr_escapes_what_it_shows(plan70):
    odd = plan70.model_copy(update={"model": plan70.model.model_copy(update={"name": "<i>x</i>&"})})
    doc = parse(odd._repr_html_())
    assert "i" not in doc.tags and "<i>x</i>&" in "".join(doc.text)


def test_the_pretty_repr_and_summary_fit_30_lines_of_80_columns(plan70):
    class Printer:  # IPython's RepresentationPrinter protocol: text()
        out = ""

        def text(self, s: str) -> None:
            self.out += s

    printer = Printer()
    plan70._repr_pretty_(printer, cycle=False)
    assert printer.out == plan70.summary()
    lines = printer.out.splitlines()
    assert len(lines) <= 30 and max(map(len, lines)) <= 80
    assert lines[0].startswith("llama-3.1-70b (70.55B params) on")
    assert "plan.summary(verbose=True)" in lines[-1]
    full = plan70.summary(verbose=True)
    flat = " ".join(full.split())  # wrapped at 80 columns
    assert "--set" in full and all(" ".join(w.split()) in flat for w in plan70.warnings)
    assert len(repr(plan70)) > len(printer.out)  # repr() stays the pydantic one, for debugging


def test_plan_raises_infeasible_plan_error_carrying_the_plan():
    with pytest.raises(InfeasiblePlanError) as info:
        quiet_plan("llama-3.1-70b", **INFEASIBLE)
    err = info.value
    assert isinstance(err, BsmError) and err.exit_code == 3
    assert isinstance(err.plan, Plan) and not err.plan.feasible
    assert "does not fit on 1 x ml.p6-b200.48xlarge" in err.message and err.hint
    p = quiet_plan("llama-3.1-70b", allow_infeasible=True, **INFEASIBLE)
    assert isinstance(p, Plan) and not p.feasible and p.memory_gib.total > 500
    assert "does NOT fit" in p.summary().splitlines()[0]
    assert "to make it fit" in [t["caption"] for t in parse(p._repr_html_()).tables]


def test_plan_warnings_are_plan_warnings():
    with pytest.warns(PlanWarning) as caught:
        p = bsm.plan("llama-3.1-8b")
    assert issubclass(PlanWarning, UserWarning) and not issubclass(PlanWarning, BsmError)
    assert [str(w.message) for w in caught if w.category is PlanWarning] == p.warnings
    assert {w.filename for w in caught if w.category is PlanWarning} == {__file__}  # the caller
    from blackwell_sm.planner.notes import NOTE_CODES

    codes = [w.message.code for w in caught if w.category is PlanWarning]
    assert codes == [n.code for n in p.notes if n.kind == "warning"] and set(codes) <= set(
        NOTE_CODES
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", PlanWarning)
        with pytest.raises(PlanWarning, match="tokens per parameter"):
            bsm.plan("llama-3.1-8b")


def test_preferences_give_preference_plans_and_raise_when_one_cannot_fit():
    spec = {
        "model": "llama-3.1-8b",
        "training": {"total_tokens": 10**9},
        "compute": {
            "instance_preferences": [
                {"instance_type": "ml.p6-b200.48xlarge", "instance_count": 1},
                {"instance_type": "ml.p5.48xlarge", "instance_count": 1},
            ]
        },
    }
    with pytest.warns(PlanWarning) as caught:
        plans = bsm.plan(spec)
    assert any(
        str(w.message).startswith("instance_preferences[1] ml.p5.48xlarge: ") for w in caught
    )
    assert isinstance(plans, PreferencePlans) and len(plans.preferences) == 2
    spec["model"] = "llama-3.1-70b"  # does not fit one p5 (8 x 80 GB)
    with pytest.raises(InfeasiblePlanError, match=r"instance_preferences\[1\]"):
        quiet_plan(spec)
    assert isinstance(quiet_plan(spec, allow_infeasible=True), PreferencePlans)


def _models(root: type[BaseModel]) -> set[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    todo = [root]
    while todo:
        m = todo.pop()
        if m in seen:
            continue
        seen.add(m)
        for f in m.model_fields.values():
            stack = [f.annotation]
            while stack:
                t = stack.pop()
                stack += typing.get_args(t)
                if isinstance(t, type) and issubclass(t, BaseModel):
                    todo.append(t)
    return seen


def test_every_plan_model_field_has_a_description():
    models = _models(Plan) | _models(PreferencePlans)
    assert {"Plan", "PlanConfig", "MemoryBreakdown", "Alternative", "TrainingSpec"} <= {
        m.__name__ for m in models
    }
    missing = [
        f"{m.__name__}.{n}" for m in models for n, f in m.model_fields.items() if not f.description
    ]
    assert missing == []


def test_the_job_status_and_progress_reprs_are_bsm_status_rows():
    t0 = datetime(2026, 12, 3, 10, 0, tzinfo=UTC)
    info = JobInfo(
        name="bsm-x-1",
        status="InProgress",
        secondary_status="Training",
        instance_type="ml.p6-b200.48xlarge",
        instance_count=2,
        training_start_time=t0,
        max_runtime_s=7200,
        failure_reason="<boom> & more",
    )
    doc = parse(info._repr_html_())
    rows = dict(doc.tables[0]["rows"])
    assert "bsm-x-1: InProgress / Training" in "".join(doc.text)
    assert rows["instances"] == "2 x ml.p6-b200.48xlarge" and rows["max runtime"] == "2.0 h"
    assert rows["failure"] == "<boom> & more" and "boom" not in doc.tags
    progress = Progress(
        job_name="bsm-x-1",
        status="InProgress",
        step=50,
        total_steps=100,
        tokens=50 * 4096,
        as_of=t0,
        tokens_per_s_per_gpu=1234.5,
        predicted_tokens_per_s_per_gpu=1300.0,
        eta_s=3600.0,
        alerts=["memory above the plan"],
    )
    rows = dict(parse(progress._repr_html_()).tables[0]["rows"])
    assert rows["step"].startswith("50 of 100") and "predicted 1,300.0" in rows["speed"]
    assert rows["eta"].startswith("1 h 00 min") and rows["alert"] == "memory above the plan"

    class Printer:
        out = ""

        def text(self, s: str) -> None:
            self.out += s

    printer = Printer()
    progress._repr_pretty_(printer, cycle=False)
    assert printer.out.splitlines()[0] == "bsm-x-1: progress (InProgress)"
    assert any(ln.split()[:2] == ["step", "50"] for ln in printer.out.splitlines())
    empty = Progress(job_name="j", status="Starting", notes=["no step logged yet"])
    assert dict(parse(empty._repr_html_()).tables[0]["rows"]) == {"note": "no step logged yet"}
