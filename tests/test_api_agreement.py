"""The agreement suite (issue 32): `bsm plan -o json` and `blackwell_sm.plan()` give the same
plan for every template and a set of generated specs, and the same error (code, exit code, field;
the message too where the plan is infeasible) where a spec is invalid or cannot run; the text
output and the JSON state one job count. In-process and pure: no AWS, no torch."""

from __future__ import annotations

import itertools
import json
import random
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import REPO, run

from blackwell_sm.api.plan import plan
from blackwell_sm.errors import BsmError
from blackwell_sm.planner.plan import Plan

TEMPLATES = sorted({*REPO.glob("templates/*.yaml"), *REPO.glob("blackwell_sm/templates/*.yaml")})

# Generated specs: a fixed sample of presets x lengths x counts x precisions x budgets.
PRESETS = ("llama-3.2-1b", "llama-3.1-8b", "qwen3-8b", "codellama-34b", "llama-3.1-70b")
GRID = list(
    itertools.product(PRESETS, (2048, 8192, 32768), (1, 2, "auto"), ("auto", "bf16"), (2e9, 50e9))
)
GENERATED = random.Random(32).sample(GRID, 14)

# Specs that are invalid (exit 2) or cannot run (exit 3), with the flags the CLI gives them.
REFUSED: dict[str, tuple[dict[str, Any], list[str]]] = {
    "unknown key": ({"model": "tiny", "training": {"seq_len": 128, "bogus": 1}}, []),
    "bad pin": ({"model": "tiny", "training": {"seq_len": 128, "pins": {"cp_degree": 3}}}, []),
    "seq over the model": ({"model": "llama-3.2-1b", "training": {"seq_len": 10**9}}, []),
    "does not fit": (
        {
            "model": "llama-3.1-70b",
            "compute": {"instance_type": "ml.p5.48xlarge", "instance_count": 1},
            "training": {"seq_len": 32768, "pins": {"cp_degree": 1}},
        },
        [],
    ),
    "misses the deadline": (
        {"model": "llama-3.1-70b", "compute": {"instance_count": "auto", "deadline_hours": 10}},
        [],
    ),
    "empty init_from": ({"model": "tiny", "training": {"init_from": "EMPTY"}}, []),
}


def _cli(path: Path, *flags: str) -> tuple[int, dict[str, Any]]:
    code, out, _ = run("plan", str(path), *flags, "-o", "json")
    return code, json.loads(out)


def _api(path: Path, **kw: Any) -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return plan(path, **kw)


def _same(path: Path, flags: list[str], kw: dict[str, Any]) -> None:
    """The CLI's JSON and plan()'s result (or error) for one spec file are the same."""
    code, doc = _cli(path, *flags)
    try:
        result = _api(path, **kw)
    except BsmError as e:
        want = e.to_json()
        assert code == e.exit_code and code in (2, 3), (code, doc)
        got = {k: doc["error"][k] for k in ("code", "exit_code", "field")}
        assert got == {k: want["error"][k] for k in got}
        if code == 3:  # infeasible: the same words and the same plan
            assert doc["error"]["message"] == want["error"]["message"]
            assert doc["plan"] == want["plan"]
        return
    assert code == 0, doc
    assert doc == result.model_dump(mode="json")


@pytest.mark.parametrize("template", TEMPLATES, ids=lambda p: p.name)
def test_every_template_gives_one_plan_through_both_doors(template: Path) -> None:
    _same(template, [], {})


@pytest.mark.parametrize(("preset", "seq", "count", "precision", "tokens"), GENERATED)
def test_generated_specs_agree(
    tmp_path: Path, preset: str, seq: int, count: int | str, precision: str, tokens: float
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"model": preset, "training": {"precision": precision}}))
    flags = ["--seq-len", str(seq), "--instance-count", str(count)]
    flags += ["--total-tokens", str(int(tokens))]
    kw = {"seq_len": seq, "instance_count": count, "total_tokens": int(tokens)}
    _same(spec, flags, kw)


@pytest.mark.parametrize("case", REFUSED, ids=str)
def test_refused_specs_give_one_error_through_both_doors(tmp_path: Path, case: str) -> None:
    data, flags = REFUSED[case]
    if data.get("training", {}).get("init_from") == "EMPTY":
        (tmp_path / "empty").mkdir()
        data = {**data, "training": {**data["training"], "init_from": str(tmp_path / "empty")}}
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(data))
    code, _ = _cli(spec, *flags)
    assert code in (2, 3), case
    _same(spec, flags, {})


def test_a_trace_of_a_spec_with_preferences_is_refused_alike(tmp_path: Path) -> None:
    """`plan(trace=True)` of a spec with instance preferences raises what `bsm plan --trace`
    prints (it used to return a PreferencePlans typed as a TracedPlan)."""
    spec = tmp_path / "prefs.yaml"
    prefs = [{"instance_type": "ml.p6-b200.48xlarge"}, {"instance_type": "ml.p5en.48xlarge"}]
    spec.write_text(yaml.safe_dump({"model": "tiny", "compute": {"instance_preferences": prefs}}))
    code, doc = _cli(spec, "--trace")
    with pytest.raises(BsmError) as e:
        _api(spec, trace=True)
    assert code == 2 and doc == e.value.to_json()


def test_text_and_json_state_one_job_count() -> None:
    """A plan longer than one job: the headline (default and -v), every warning that counts
    jobs and the JSON's `run.jobs` say one number, and the way to run them is `--until-done`."""
    args = ("plan", "--model", "llama-3.1-70b", "--instance-count", "1")
    code, js, _ = run(*args, "-o", "json")
    p = Plan.model_validate(json.loads(js))
    jobs = p.run.jobs
    assert code == 0 and jobs > 1
    for view in ((), ("-v",)):
        _, out, _ = run(*args, *view)
        found = re.findall(r"([\d,]+) (?:28-day )?(?:SageMaker )?jobs", out)
        assert {int(n.replace(",", "")) for n in found} == {jobs}, out
    said = [w for w in p.warnings if "jobs" in w]
    assert said and all(f"needs {jobs} " in w and "--until-done" in w for w in said)
    assert "--new" not in " ".join(said)


@pytest.mark.slow
def test_an_infeasible_traced_plan_prints_its_trace_under_json() -> None:
    """What the CLI computes, `-o json` prints: the trace of a plan that misses its deadline
    rides in the exit-3 error object beside the plan (it used to be computed, then dropped)."""
    pytest.importorskip("torch")
    code, out, _ = run(
        "plan",
        "--model",
        "tiny",
        "--instance-count",
        "auto",
        "--total-tokens",
        "100000000000",
        "--set",
        "compute.deadline_hours=0.0001",
        "--trace",
        "-o",
        "json",
    )
    doc = json.loads(out)
    assert code == 3 and doc["error"]["code"] == "infeasible_plan"
    assert doc["plan"]["feasible"] is False and doc["trace"]["traced_gib"] > 0
