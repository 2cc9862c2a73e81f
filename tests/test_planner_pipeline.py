"""The planner as a pipeline (issue 25): each step once and in order, the kept evaluations equal
to evaluating everything, the objective (issue 24), typed notes, seq_len once in the Plan
(schema 2), quota notes (issue 27) and the B200 speed prior's anchor rows."""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pytest
from cli_support import run

from blackwell_sm.api.plan import plan
from blackwell_sm.errors import SpecError
from blackwell_sm.launch.checks import check_plan
from blackwell_sm.planner import memory, pick, pipeline
from blackwell_sm.planner.api import make_plan
from blackwell_sm.planner.frame import frame
from blackwell_sm.planner.notes import NOTE_CODES, Note
from blackwell_sm.planner.plan import Plan
from blackwell_sm.planner.precision import choose_precision
from blackwell_sm.planner.search import candidates, evaluate, usable_bytes
from blackwell_sm.planner.shape import shape
from blackwell_sm.planner.table import Table
from blackwell_sm.runs.calibrate_sources import csv_row
from blackwell_sm.spec import PRESETS, parse_spec

ROOT = Path(__file__).resolve().parents[1]
PLANNER = ROOT / "blackwell_sm" / "planner"
#: The pipeline's modules in their order; a module may import only modules before it.
ORDER = [
    "notes",
    "plan",
    "frame",
    "search",
    "table",
    "precision",
    "pick",
    "alternatives",
    "timing",
    "explain",
    "assemble",
    "pipeline",
    "preferences",
    "api",
]


def test_no_pipeline_module_imports_a_later_one():
    for i, name in enumerate(ORDER):
        tree = ast.parse((PLANNER / f"{name}.py").read_text())
        imported = {
            node.module.rsplit(".", 1)[-1]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("blackwell_sm.planner.")
        }
        later = imported & set(ORDER[i + 1 :])
        assert not later, f"planner/{name}.py imports {later}, which come after it"


def test_make_plan_runs_each_step_once_in_order(monkeypatch):
    calls: list[str] = []
    for step in ("frame", "choose", "explain", "assemble_plan"):
        real = getattr(pipeline, step)

        def spy(*a, _real=real, _step=step, **k):
            calls.append(_step)
            return _real(*a, **k)

        monkeypatch.setattr(pipeline, step, spy)
    monkeypatch.setattr(pipeline, "Table", lambda *a: calls.append("table") or Table(*a))
    make_plan(parse_spec({"model": "llama-3.1-70b", "compute": {"instance_count": "auto"}}))
    assert calls == ["frame", "table", "choose", "explain", "assemble_plan"]


def _brute(table: Table, n: int) -> tuple[str, object] | None:
    """The choice on `n` from every candidate, evaluated without the table's shortcuts."""
    ctx, usable = table.ctx, usable_bytes(table.ctx.instance)
    bests = {}
    for p in table.precisions:
        ok = [e for e in (evaluate(ctx, c) for c in candidates(ctx, n, table.pins, (p,))) if e.fits]
        bests[p] = pick.best_of(ok, usable)[0] if ok else None
    precision = (
        table.pins.precision
        or choose_precision(ctx.model.spec, ctx.instance.gpu, bests, finetune=ctx.packed)[0]
    )
    best = bests[precision]
    return None if best is None else (precision, best.cand)


@pytest.mark.parametrize(
    "spec",
    [
        {"model": "llama-3.1-70b", "training": {"seq_len": 8192, "total_tokens": 2 * 10**10}},
        {"model": "llama-3.2-1b"},
        {"model": "llama-3.1-8b", "training": {"precision": "bf16", "global_batch_seqs": 100}},
        {"model": "qwen3-32b", "compute": {"instance_type": "ml.p5.48xlarge"}},
        {"model": "llama-3.1-8b", "training": {"seq_len": 131072}},  # context parallelism
        {"model": "qwen3-14b", "training": {"seq_len": 32768, "task": "finetune"}},  # + masks
    ],
    ids=["70b-8k", "1b", "8b-pinned", "32b-h100", "8b-128k-cp", "14b-32k-finetune-cp"],
)
def test_the_table_chooses_as_evaluating_everything_would(spec):
    problem = frame(parse_spec(spec), None, None)
    table = Table(problem.ctx, problem.pins)
    for n in (1, 2, 3, 8):
        got = pick.on_count(table, n)
        want = _brute(table, n)
        assert (None if got is None else (got.best.cand.precision, got.best.cand)) == want, n
        if got is not None:
            assert got.best == evaluate(problem.ctx, got.best.cand)  # same figures as evaluate


@pytest.mark.parametrize(
    "spec",
    [
        {"model": "llama-3.1-70b", "training": {"seq_len": 8192, "total_tokens": 2 * 10**10}},
        {"model": "llama-3.1-70b"},
        {"model": "llama-64b", "compute": {"instance_type": "ml.p5.48xlarge"}},
        {"model": "llama-3.1-8b", "training": {"pins": {"shard_degree": 8}}},
        {"model": "llama-3.2-3b", "training": {"pins": {"grad_accum_steps": 2}}},
        {"model": "llama-3.1-70b", "training": {"seq_len": 32768, "total_tokens": 10**10}},
        {"model": "llama-3.1-8b", "training": {"seq_len": 131072, "pins": {"cp_degree": 16}}},
    ],
    ids=[
        "70b-template",
        "70b-default",
        "64b-h100",
        "8b-hsdp-pinned",
        "3b-accum-pinned",
        "70b-32k-cp",
        "8b-cp16-pinned",
    ],
)
def test_the_cost_scan_is_exact(spec):
    """By cost over counts 1..16 equals choosing on every count and applying the rule by hand:
    a count wins only when cheaper than the low end of every smaller count's cost range."""
    compute = {**spec.get("compute", {}), "instance_count": "auto", "optimize": "cost"}
    spec = {**spec, "compute": compute}
    problem = frame(parse_spec(spec), None, None)
    counts = pick._Counts(Table(problem.ctx, problem.pins))
    allowed = list(range(1, 17))
    got = counts.by_cost(allowed, None)
    fresh = pick._Counts(Table(problem.ctx, problem.pins))
    want, floor = None, float("inf")  # a count wins only below every smaller one's range
    for n in allowed:
        cc = pick.on_count(fresh.table, n)
        if cc is not None:
            if cc.cost < floor:
                want = cc
            floor = min(floor, cc.cost / fresh.tie(cc))
    assert got is not None and (got.count, got.best.cand) == (want.count, want.best.cand)


def test_more_sharding_never_needs_more_memory():
    """`Table.any_within` answers a knob set from where its most sharded layout first fits:
    total memory must not grow with the shard degree (all else equal)."""
    for name in ("llama-3.2-1b", "llama-3.1-70b", "qwen3-32b"):
        sh = shape(PRESETS[name])
        for mode in ("none", "full"):
            for precision in ("bf16", "fp8", "mxfp8"):
                kw = dict(
                    replicate_degree=1,
                    micro_batch=1,
                    seq_len=8192,
                    precision=precision,
                    mode=mode,
                    reshard_after_forward=True,
                )
                totals = [
                    memory.memory_terms(sh, shard_degree=8 * n, **kw).total
                    for n in (1, 2, 3, 8, 64)
                ]
                assert totals == sorted(totals, reverse=True), (name, mode, precision)


def test_the_memory_cache_key_holds():
    """Table.memory keys HSDP layouts on (shard, replicas > 1): memory_terms must not depend on
    the replica count beyond that (if the memory model comes to, widen the key)."""
    sh = shape(PRESETS["llama-3.1-70b"])
    kw = dict(shard_degree=8, micro_batch=2, seq_len=4096, precision="fp8", mode="full")
    kw |= dict(reshard_after_forward=True)
    two = memory.memory_terms(sh, replicate_degree=2, **kw)
    for r in (3, 8, 64):
        assert memory.memory_terms(sh, replicate_degree=r, **kw) == two
    # ... nor on the micro-batches accumulated beyond one or more than one
    acc = memory.memory_terms(sh, replicate_degree=2, grad_accum=2, **kw)
    for ga in (3, 16):
        assert memory.memory_terms(sh, replicate_degree=2, grad_accum=ga, **kw) == acc


def _json_plan(*args: str) -> dict:
    code, out, err = run("plan", *args, "--output", "json")
    assert code == 0, err
    return json.loads(out)


def test_optimize_cost_picks_the_cheaper_count_and_says_what_time_would():
    """Issue 21's example: the 70B preset with instance_count auto."""
    args = ("--model", "llama-3.1-70b", "--instance-count", "auto")
    cheap, fast = _json_plan(*args, "--optimize", "cost"), _json_plan(*args, "--optimize", "time")
    assert cheap["objective"] == "cost" and fast["objective"] == "time"
    assert cheap["instance"]["count"] < fast["instance"]["count"]
    assert cheap["run"]["cost_usd"] < fast["run"]["cost_usd"]
    assert fast["run"]["hours"] <= 672 < cheap["run"]["hours"]
    for mine, other in ((cheap, fast), (fast, cheap)):
        pick_ = mine["other_objective"]
        assert pick_["objective"] == other["objective"] and not pick_["same_as_plan"]
        assert pick_["instance_count"] == other["instance"]["count"]
        assert pick_["cost_usd"] == pytest.approx(other["run"]["cost_usd"], rel=1e-6)
        [line] = [n["text"] for n in mine["notes"] if n["code"] == "objective"]
        assert f"would pick {other['instance']['count']} instance" in line
    assert any(n["code"] == "over_max_runtime" for n in cheap["notes"])  # several jobs: said


def test_a_fixed_count_has_one_answer_for_both_objectives():
    p = plan("llama-3.1-8b", optimize="cost")
    assert p.objective == "cost" and p.other_objective.same_as_plan
    assert p.config == plan("llama-3.1-8b").config


def test_a_user_deadline_binds_the_cost_objective():
    free = plan("llama-3.1-70b", optimize="cost", **{"compute.instance_count": "auto"})
    bound = plan(
        "llama-3.1-70b",
        optimize="cost",
        **{"compute.instance_count": "auto", "compute.deadline_hours": 2000},
    )
    assert free.run.hours > 2000 >= bound.run.hours
    assert bound.instance.count > free.instance.count and bound.feasible


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (["--model", "llama-3.1-8b", "--optimize", "fastest"], "--optimize"),
        (
            ["--model", "llama-3.1-8b", "--optimize", "cost", "--set", "compute.optimize=time"],
            "compute.optimize",
        ),
        (["--model", "llama-3.1-8b", "--set", "compute.optimize=cheap"], "compute.optimize"),
    ],
    ids=["bad-choice", "flag-and-set", "bad-set"],
)
def test_bad_objectives_exit_2_naming_the_field(args, field):
    code, out, err = run("plan", *args, "--output", "json")
    assert code == 2, err
    obj = json.loads(out)["error"]
    assert field in (obj.get("field") or "") + obj["message"]
    assert "Traceback" not in err


def test_a_spec_file_with_a_bad_objective_names_it(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("model: llama-3.1-8b\ncompute: {optimize: quick}\n")
    code, out, err = run("plan", str(spec), "--output", "json")
    assert code == 2 and json.loads(out)["error"]["field"] == "compute.optimize", err
    with pytest.raises(SpecError) as e:
        plan("llama-3.1-8b", optimize="quick")
    assert e.value.field == "compute.optimize"


def test_every_note_has_a_known_code_and_the_docs_list_every_code():
    docs = (ROOT / "docs" / "planner.md").read_text()
    assert all(f"`{code}`" in docs for code in NOTE_CODES)
    p = make_plan(parse_spec({"model": "llama-3.1-70b", "compute": {"instance_count": "auto"}}))
    assert p.notes and all(n.code in NOTE_CODES for n in p.notes)
    assert p.warnings == [n.text for n in p.notes if n.kind == "warning"]
    with pytest.raises(ValueError, match="unknown note code"):
        Note(kind="warning", code="made_up", text="x")


def test_the_launcher_reads_the_code_not_the_words():
    spec = parse_spec(
        {
            "model": "llama-3.2-1b",
            "training": {"global_batch_seqs": 100},
            "compute": {"instance_count": 3},
        }
    )
    p = make_plan(spec)
    reworded = [n.model_copy(update={"text": "reworded"}) for n in p.notes]
    check_plan(p.model_copy(update={"notes": reworded}), Path("plan.json"))  # still accepted


def test_seq_len_is_stored_once_and_read_back():
    p = make_plan(parse_spec({"model": "llama-3.2-1b", "training": {"seq_len": 2048}}))
    data = json.loads(p.to_json())
    assert data["schema_version"] == 2 and "seq_len" not in data["spec"]["training"]
    back = Plan.from_json(p.to_json())
    assert back == p and back.spec.training.seq_len == back.config.seq_len == 2048
    data["spec"]["training"]["seq_len"] = 2048
    with pytest.raises(ValueError, match="holds seq_len once"):
        Plan.model_validate(data)


def test_a_version_1_plan_reads_and_the_launcher_refuses_it():
    p = make_plan(parse_spec({"model": "llama-3.2-1b"}))
    v1 = json.loads(p.to_json())
    for key in ("notes", "objective", "other_objective"):
        v1.pop(key)
    v1["schema_version"] = 1
    v1["spec"]["training"]["seq_len"] = v1["config"]["seq_len"]
    old = Plan.model_validate(v1)
    assert old.schema_version == 1 and old.warnings == p.warnings
    assert {n.code for n in old.notes} == {"v1"}
    with pytest.raises(SpecError, match="this container reads schema_version 2"):
        check_plan(old, Path("plan.json"))
    v1["spec"]["training"]["seq_len"] = 99
    with pytest.raises(ValueError, match=r"disagrees with config\.seq_len"):
        Plan.model_validate(v1)
    with pytest.raises(ValueError, match="schema_version 3 is not one this bsm reads"):
        Plan.model_validate({**v1, "schema_version": 3})


@pytest.mark.parametrize(
    ("count", "codes"),
    [
        (20, set()),
        (21, {"quota_instances_per_job"}),
        (1000, {"quota_instances_per_job", "scale_beyond_search"}),
    ],
)
def test_every_count_above_a_known_quota_says_which(count, codes):
    p = plan("llama-3.1-8b", **{"compute.instance_count": count, "training.total_tokens": 10**9})
    got = {n.code for n in p.notes} & {"quota_instances_per_job", "scale_beyond_search"}
    assert got == codes
    if codes:
        [text] = [n.text for n in p.notes if n.code == "quota_instances_per_job"]
        assert "Maximum number of instances per training job" in text
        assert "ml.p6-b200.48xlarge for training job usage" in text


def test_the_b200_prior_predicts_its_public_fsdp2_rows():
    """BLACKWELL_SCALE is fitted on the torchtitan rows of 750 W B200s (benchmarks/data)."""
    rows = [
        r
        for r in csv.DictReader((ROOT / "benchmarks/data/measurements.csv").open())
        if r["fitted_for"] == "calibration.BLACKWELL_SCALE"
    ]
    assert {r["precision"] for r in rows} == {"bf16", "fp8-tensorwise", "mxfp8"}
    for r in rows:
        assert r["url"].startswith("https://") and r["date"]
        row = csv_row(r)
        got = evaluate(row.ctx, row.cand).tokens_per_s_per_gpu
        assert got == pytest.approx(float(r["tokens_per_s_per_gpu"]), rel=0.05), r["id"]
    p = plan("llama-3.1-8b", seq_len=8192, precision="fp8", **{"compute.instance_count": 1})
    assert p.throughput.evidence == "anchored"
    assert p.throughput.tokens_per_s_per_gpu < 0.6 * 30624  # not at Megatron-Core's level


def test_each_instance_preference_is_planned_with_the_specs_objective():
    spec = parse_spec(
        {
            "model": "llama-3.1-70b",
            # 100B tokens: the deadline needs more nodes for time, one node is cheaper
            "training": {"seq_len": 8192, "total_tokens": 10**11, "loss_impl": "full-logits"},
            "compute": {
                "optimize": "cost",
                "instance_preferences": [
                    {"instance_type": "ml.p6-b200.48xlarge", "instance_count": "auto"},
                    {"instance_type": "ml.p5en.48xlarge", "instance_count": 4},
                ],
            },
        }
    )
    plans = plan(spec)
    assert [p.objective for p in plans.plans] == ["cost", "cost"]
    auto = plans.plans[0]
    assert auto.other_objective.objective == "time" and not auto.other_objective.same_as_plan
    assert auto.run.cost_usd < auto.other_objective.cost_usd


def test_a_preferences_cost_warning_uses_the_specs_threshold():
    spec = {
        "model": "llama-3.1-70b",
        "compute": {
            "confirm_cost_usd": 10**8,
            "instance_preferences": [{"instance_type": "ml.p6-b200.48xlarge"}],
        },
    }
    [p] = plan(parse_spec(spec)).plans
    assert p.run.cost_usd_range[1] > 100_000 and not p.has_note("cost_confirm")
