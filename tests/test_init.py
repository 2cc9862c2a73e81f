"""`bsm init` and `bsm presets` (issue 21): a spec from the packaged templates that loads and plans
for every preset and task, a Hugging Face folder, never overwriting a file, and bad input through
the real command (exit 2, the argument or flag named, one JSON error object)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli_support import run

from blackwell_sm.planner.api import make_plan
from blackwell_sm.safe_load import parse_yaml
from blackwell_sm.spec import load_spec, parse_spec
from blackwell_sm.spec.presets import PRESETS
from blackwell_sm.spec.starter import ARG, BASE, template_names, template_text

ROOT = Path(__file__).resolve().parents[1]
HF_CONFIGS = json.loads((ROOT / "tests" / "data" / "hf_configs.json").read_text())


@pytest.mark.parametrize("task", ["pretrain", "finetune"])
def test_every_preset_gets_a_spec_that_loads_and_plans(task):
    for name, model in PRESETS.items():
        code, out, err = run("init", name, "--task", task)
        assert code == 0, (name, err)
        spec = parse_spec(parse_yaml(out), source=name)
        assert spec.model == model and spec.training.task == task, name
        if name == "tiny" and task == "pretrain":
            assert out == template_text("demo-tiny")  # a local CPU spec: no job to plan
            continue
        assert spec.job is not None and "REPLACE-ME" in spec.job.role_arn, name
        plan = make_plan(spec)
        assert plan.feasible, (name, task, plan.warnings)
        assert "templates/" not in out, name  # no path a wheel install does not have


def test_a_preset_with_its_own_template_gets_it_verbatim():
    for name in template_names():
        code, out, _ = run("init", name)
        assert code == 0 and out == template_text(name)
    _, out, _ = run("init", "llama-3.1-70b")
    assert out == template_text("llama-3.1-70b")
    _, out, _ = run("init", "qwen3-8b", "--task", "finetune")
    assert out == template_text(BASE["finetune"])
    _, out, _ = run("init")  # the default: llama-3.1-8b
    assert out == template_text("llama-3.1-8b")


def test_a_retargeted_spec_keeps_its_comments_and_fits_the_model():
    _, out, _ = run("init", "llama-2-13b", "--task", "finetune")
    spec = parse_spec(parse_yaml(out))
    assert spec.training.seq_len == 4096 and spec.training.init_from.endswith("/hf/llama-2-13b/")
    assert out.startswith("# llama-2-13b (finetune)") and "# Set data.sequences" in out
    _, out, _ = run("init", "qwen2.5-7b")
    spec = parse_spec(parse_yaml(out))
    assert spec.training.total_tokens == 152 * 10**9  # about 20 per parameter
    assert spec.compute.instance_count == "auto" and "# Replace the REPLACE-ME values" in out


def test_init_out_writes_a_new_file_that_plans_and_never_overwrites_one(tmp_path):
    out = tmp_path / "s.yaml"
    code, stdout, err = run("init", "llama-3.1-70b", "--out", str(out))
    assert code == 0 and stdout == "" and f"bsm plan {out}" in err
    assert out.read_text() == template_text("llama-3.1-70b")
    code, stdout, _ = run("plan", str(out), "-o", "json")
    assert code == 0 and json.loads(stdout)["feasible"] is True
    assert load_spec(out).model.name == "llama-3.1-70b"

    out.write_text("mine\n")
    code, stdout, err = run("init", "tiny", "--out", str(out), "-o", "json")
    assert code == 2 and str(out) in err
    error = json.loads(stdout)["error"]
    assert error["field"] == "--out" and "exists" in error["message"]
    assert out.read_text() == "mine\n" and list(tmp_path.iterdir()) == [out]


def test_init_json_holds_the_spec_and_where_it_came_from(tmp_path):
    code, stdout, _ = run("init", "qwen3-4b", "-o", "json")
    doc = json.loads(stdout)
    assert code == 0 and doc["source"] == "preset qwen3-4b" and doc["out"] is None
    assert parse_spec(parse_yaml(doc["spec"])).model.name == "qwen3-4b"


def _hf_folder(tmp_path: Path, preset: str, **changes: object) -> Path:
    folder = tmp_path / f"{preset}-hf"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps({**HF_CONFIGS[preset], **changes}))
    return folder


def test_init_from_a_hugging_face_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _hf_folder(tmp_path, "qwen3-8b")
    code, out, err = run("init", "qwen3-8b-hf", "--task", "finetune")
    assert code == 0, err
    assert "model: {hf: qwen3-8b-hf}" in out and "--tokenizer qwen3-8b-hf" in out
    spec = parse_spec(parse_yaml(out))
    assert spec.model.n_params == PRESETS["qwen3-8b"].n_params
    assert make_plan(spec).feasible


def _json_error(*args: str) -> dict:
    code, stdout, err = run(*args, "-o", "json")
    assert code == 2, (args, err)
    assert "Traceback" not in err
    return json.loads(stdout)["error"]  # exactly one JSON document on stdout


def test_bad_input_names_the_argument(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    e = _json_error("init", "llama-3.1-8bb")
    assert e["field"] == ARG and e["hint"] == "did you mean 'llama-3.1-8b'?"
    e = _json_error("init", "./missing")
    assert e["field"] == ARG and "no such folder" in e["message"]
    (tmp_path / "empty").mkdir()
    e = _json_error("init", "empty/")
    assert e["field"] == ARG and "config.json" in e["message"]
    _hf_folder(tmp_path, "qwen3-8b", num_experts=8)  # a mixture of experts: refused now
    e = _json_error("init", "qwen3-8b-hf")
    assert e["field"] == ARG and "num_experts" in e["message"]
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "config.json").write_text("{not json")
    e = _json_error("init", "bad")
    assert e["field"] == ARG
    e = _json_error("init", "tiny", "--task", "sft")
    assert e["field"] == "--task" and e["code"] == "usage"
    e = _json_error("init", "llama-3.2-1b-128k", "--task", "finetune")
    assert e["field"] == "--task" and "bsm init llama-3.2-1b --task finetune" in e["hint"]
    e = _json_error("init", "tiny", "--out", str(tmp_path / "no" / "s.yaml"))
    assert e["field"] == "--out" and "does not exist" in e["message"]
    e = _json_error("init", "tiny", "--out", str(tmp_path))
    assert e["field"] == "--out" and "folder" in e["message"]


def test_a_spec_without_job_points_to_bsm_init(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("model: tiny\ntraining: {seq_len: 128, total_steps: 10}\n")
    e = _json_error("submit", str(spec), "--dry-run")
    assert e["field"] == "job" and "bsm init" in e["hint"] and "templates/" not in e["hint"]


def test_presets_lists_every_preset_with_its_fit():
    code, stdout, _ = run("presets", "-o", "json")
    rows = json.loads(stdout)["presets"]
    assert code == 0 and [r["name"] for r in rows] == list(PRESETS)
    by = {r["name"]: r for r in rows}
    assert by["llama-3.1-70b"]["fits_one_instance"] is True
    assert by["llama-3.1-70b"]["n_params"] == PRESETS["llama-3.1-70b"].n_params
    assert by["llama-2-13b"]["max_seq_len"] == 4096 and by["tiny"]["seq_len"] == 512
    for r in rows:
        assert r["fits_one_instance"] == (r["memory_gib"] <= r["usable_gib"])
    code, stdout, _ = run("presets")
    assert code == 0 and all(name in stdout for name in PRESETS)
    e = _json_error("presets", "--instance-type", "ml.p9.nope")
    assert e["field"] == "--instance-type" and "ml.p6-b200.48xlarge" in e["message"]


def test_presets_show_a_model_that_does_not_fit_one_instance():
    """Judged by the planner: on one p5 (80 GB H100s) the 70B model does not fit."""
    code, stdout, _ = run("presets", "--instance-type", "ml.p5.48xlarge", "-o", "json")
    by = {r["name"]: r for r in json.loads(stdout)["presets"]}
    assert code == 0 and by["llama-3.1-70b"]["fits_one_instance"] is False
    assert by["llama-3.2-1b"]["fits_one_instance"] is True
