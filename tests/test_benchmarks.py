"""Smoke tests of the benchmark scripts on tiny settings: they run end to end and print valid
JSON lines. The figures themselves are not asserted (they are measurements, not results); what is
asserted is what would break if the scripts or the code they drive rotted."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import capture

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import _common  # noqa: E402
import cli_latency  # noqa: E402
import gpu_check  # noqa: E402
import loop_overhead  # noqa: E402
import run_all  # noqa: E402


def _records(text: str) -> dict[str, dict]:
    """Every stdout line is one JSON figure with name, value, unit and ok."""
    out = {}
    for line in text.splitlines():
        rec = json.loads(line)
        assert {"name", "value", "unit", "ok"} <= rec.keys(), rec
        out[rec["name"]] = rec
    return out


def test_check_parses_targets():
    assert _common.check(0.2, "< 0.3") is True
    assert _common.check(0.3, "< 0.3") is False
    assert _common.check(0.9, ">= 0.9") is True
    assert _common.check(1.0, "within 10% of predicted") is None
    assert _common.check(None, "< 1") is None


def _rows(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture(scope="module")
def local_wheels(tmp_path_factory):
    """A wheels folder for this interpreter, as `gpu_check.sh --prepare-wheels --target
    this-machine` makes it, offline (tests/wheel_support.py: the bootstrap finds everything
    installed here and installs none of them)."""
    from wheel_support import offline_pip

    from blackwell_sm.job.requirements import container_requirements
    from blackwell_sm.job.wheels import fetch_wheels, this_machine_target, write_folder

    target = this_machine_target()
    reqs = container_requirements(target, precision="fp8")
    tmp = tmp_path_factory.mktemp("whl")
    with offline_pip(reqs, tmp / "links"):
        house = fetch_wheels(reqs, target, cache=tmp / "cache")
    write_folder(house, tmp / "out")
    return tmp / "out"


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_gpu_check_cpu_dry_runs_the_real_launcher_end_to_end(tmp_path, local_wheels):
    """Through the bootstrap (nothing to install here), then the checkpoint/resume/export run
    (two launches) and the fp8 run (skipped on CPU, saying why). The other runs differ only in
    the spec they plan: the plan-only test below covers them."""
    out = tmp_path / "run"
    runs = "ckpt-resume-export,fp8,bf16-ac-none,loss-full-logits,cp-numerics,gpu-form-trace"
    args = ["--cpu-dry", "--out", out, "--runs", runs, "--results", tmp_path / "rows.jsonl"]
    env = {**os.environ, "BSM_GPU_CHECK_WHEELS": str(local_wheels), "PYTHON": sys.executable}
    proc = capture(["bash", "benchmarks/gpu_check.sh", *args], timeout=400, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[bsm-bootstrap] pydantic " in proc.stderr  # the container's bootstrap ran first
    ckpt, fp8, chunked, full, cp, forms = _rows(proc.stdout)
    assert _rows((tmp_path / "rows.jsonl").read_text()) == [ckpt, fp8, chunked, full, cp, forms]
    # a CP plan traced in the GPU form (stand-in kernels on the CPU), held to the planner
    tiny = forms["plans"]["tiny-cp2"]
    assert tiny["config"]["cp_degree"] == 2 and tiny["ok"] is True
    assert [t["device"] for t in tiny["traces"]] == ["cpu"] and forms["value"] <= 0.05
    off = forms["plans"]["tiny-offload"]
    assert off["config"]["offload"] is True and off["traces"][0]["host_bytes"] > 0
    # the two loss paths on the same data agree, and each says which it ran
    assert (chunked["loss_impl"], full["loss_impl"]) == ("chunked", "full-logits")
    match = full["loss_vs_bf16-ac-none"]
    assert match["steps"] == 3 and match["max_rel_diff"] < 1e-3
    # context parallelism's bookkeeping on one device: every degree, packed or not, exact
    assert cp["run"] == "cp-numerics" and set(cp["numerics"]) == {
        "cp2-dense",
        "cp4-dense",
        "cp2-dense-packed",
        "cp4-dense-packed",
    }
    assert cp["within_tolerance"] is True and cp["value"] < 1e-4 and "NCCL" in cp["needs_two_gpus"]
    assert ckpt["name"] == fp8["name"] == "gpu_check.run" and ckpt["run"] == "ckpt-resume-export"
    assert ckpt["mode"] == "cpu-dry" and ckpt["model"] == "tiny" and ckpt["ok"] is None
    m, p = ckpt["measured"], ckpt["predicted"]
    assert m["tokens_per_s_per_gpu"] > 0 and p["tokens_per_s_per_gpu"] > 0 and 0 < m["mfu"] < 1
    assert m["memory_kind"] == "cpu_max_rss" and m["step_time_s"] > 0
    lo, hi = ckpt["goal_band"]["tokens_per_s_per_gpu"]
    assert lo < p["tokens_per_s_per_gpu"] < hi
    assert ckpt["status"] == "completed" and math.isfinite(ckpt["final_loss"])
    assert 3 <= ckpt["stopped_at_step"] == ckpt["resumed_from_step"] < ckpt["final_step"] == 6
    assert ckpt["export"]["loaded"] is True and ckpt["export"]["params"] > 0
    # the fake-tensor trace of the same plan, beside the measurement (the goal on a GPU only)
    assert ckpt["traced"]["source"] == "traced now on fake cpu tensors"
    assert ckpt["traced"]["peak_gib"] > 0
    assert "peak_allocated_vs_trace" in ckpt["goals"]
    assert ckpt["config"]["precision"] == "bf16" and ckpt["config"]["compile"] is False
    assert fp8["run"] == "fp8" and "CUDA" in fp8["skipped"] and fp8["value"] is None
    assert "[bsm-step] step=6 " in proc.stderr  # the real launcher and worker ran
    summary = json.loads((out / "ckpt-resume-export" / "output/data/summary.json").read_text())
    assert summary["final_step"] == 6


def test_gpu_check_without_prepared_wheels_says_how(tmp_path):
    proc = subprocess.run(
        ["bash", "benchmarks/gpu_check.sh", "--cpu-dry"],
        cwd=REPO,
        capture_output=True,
        text=True,
        env={
            **os.environ,
            "BSM_GPU_CHECK_WHEELS": str(tmp_path / "none"),
            "PYTHON": sys.executable,
        },
    )
    assert proc.returncode == 2 and "--prepare-wheels" in proc.stderr


def test_gpu_check_lists_every_ac_mode_fp8_near_limit_and_checkpointing():
    from typing import get_args

    from blackwell_sm.spec.training import Checkpointing

    names = [r.name for r in gpu_check.runs()]
    assert names[: len(get_args(Checkpointing))] == [
        f"bf16-ac-{m}" for m in get_args(Checkpointing)
    ]
    assert names[len(get_args(Checkpointing)) :] == [
        "fp8",
        "loss-full-logits",
        "long-seq",
        "near-limit",
        "cp-numerics",
        "gpu-form-trace",
        "ckpt-resume-export",
    ]


@pytest.mark.parametrize("gpu", ["H100", "H200", "B200"])
def test_gpu_check_plans_every_run_feasibly_for_each_gpu(gpu, capsys):
    assert gpu_check.main(["--plan-only", "--gpu", gpu]) == 0
    rows = {r["run"]: r for r in _rows(capsys.readouterr().out)}
    assert list(rows) == [r.name for r in gpu_check.runs()]
    assert all(r["feasible"] for r in rows.values()), {k: r["feasible"] for k, r in rows.items()}
    cfg, pred = rows["bf16-ac-none"]["config"], rows["bf16-ac-none"]["predicted"]
    assert rows["bf16-ac-none"]["value"] == "llama-3.2-1b"
    assert cfg["seq_len"] == 4096 and cfg["precision"] == "bf16" and cfg["compile"] is True
    assert cfg["shard_degree"] == 1 and cfg["micro_batch_size"] * cfg["grad_accum_steps"] == 8
    assert 0 < pred["mfu"] < 1 and 0 < pred["reserved_gib"] <= pred["total_gib"]
    assert rows["fp8"]["config"]["precision"] == "fp8"
    assert rows["bf16-ac-full"]["config"]["activation_checkpointing"] == "full"
    assert rows["near-limit"]["value"] == "llama-3.2-3b"
    # the long run: the longest sequence the chunked loss fits, which full logits would not
    long = rows["long-seq"]
    assert long["config"]["seq_len"] == long["seq_tried"][-1] >= 16384
    assert long["full_logits_predicted_gib"] > long["predicted"]["total_gib"]


@pytest.mark.timeout(180)
def test_loop_overhead_emits_every_figure(capsys):
    before = dict(os.environ)
    rc = loop_overhead.main(
        ["--steps", "4", "--warmup", "1", "--repeats", "1", "--seq-len", "16", "--accum", "1"]
    )
    assert rc == 0
    assert dict(os.environ) == before  # the rank variables do not leak out
    recs = _records(capsys.readouterr().out)
    for key in ("plain", "real", "plain_fsdp2"):
        rec = recs[f"loop.{key}_tokens_per_s"]
        assert rec["value"] > 0 and rec["per_cpu_second"] > 0
    for name in ("loop.real_over_plain_cpu", "loop.real_over_plain_wall"):
        assert recs[name]["target"] == ">= 0.9" and recs[name]["ok"] in (True, False)
    n_params = recs["loop.plain_tokens_per_s"]["setting"]["n_params"]
    # fp32 weights + two AdamW moments at least; the restore put back exactly the saved weights.
    assert recs["checkpoint.bytes"]["value"] >= 12 * n_params
    assert recs["checkpoint.save_s"]["value"] > 0
    assert recs["checkpoint.restore_s"]["ok"] is True


def test_cli_latency_times_commands_and_reports_missing_ones(monkeypatch, capsys):
    py = sys.executable
    cheap = {
        "python_startup": [py, "-c", "pass"],
        "bsm_help": [*cli_latency.bsm_argv(), "--help"],
        "bsm_plan": [py, "-c", "import sys; sys.exit('plan: not here')"],
        "bsm_submit_dry_run": [py, "-c", "import json"],
        "sdk_import": [py, "-c", "import json"],
    }
    monkeypatch.setattr(cli_latency, "commands", lambda: cheap)
    assert cli_latency.main(["--repeats", "1", "--sdk-repeats", "1"]) == 0
    recs = _records(capsys.readouterr().out)
    assert recs["cli.bsm_help_s"]["value"] > 0
    assert any(r["module"] == "click" for r in recs["cli.bsm_help_s"]["heaviest_imports"])
    plan = recs["cli.bsm_plan_s"]
    assert plan["value"] is None and plan["ok"] is False and "plan: not here" in plan["error"]
    phases = recs["cli.bsm_plan_phases"]["value"]  # one real bsm plan, in process, by phase
    assert set(phases) >= {"pydantic and its first model", "planning", "JSON"}
    assert all(ms >= 0 for ms in phases.values())
    assert recs["cli.bsm_plan_over_sdk_import"]["ok"] is False


def test_run_all_rejects_unknown_benchmarks():
    with pytest.raises(SystemExit) as e:
        run_all.main(["--only", "cli_latency,nope"])
    assert e.value.code == 2


def test_planner_accuracy_reads_every_row_and_meets_its_targets(capsys, monkeypatch):
    """The shared reference (with the Megatron MXFP8 and 700 W H100-SXM rows) and this project's
    own rows in benchmarks/data are all re-predicted; the fitted FSDP rows meet the targets."""
    import planner_accuracy

    monkeypatch.setattr(sys, "argv", ["planner_accuracy.py"])
    monkeypatch.delenv("BSM_MEASUREMENTS_CSV", raising=False)
    shared = planner_accuracy.shared_csv()
    assert shared.is_file(), f"the reference rows belong in the repository: {shared}"
    original = planner_accuracy.shared_original()
    if original is not None:  # the copy must not drift from the shared reference
        assert shared.read_bytes() == original.read_bytes(), f"update {shared} from {original}"
    planner_accuracy.main()
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    names = {x["name"] for x in lines}
    for row in ("mb-b200x8-mxfp8-upper", "mb-h100x8-fp8-fsdp-upper", "adt-p5x4-bf16-eager"):
        assert f"planner_accuracy.{row}.tokens_per_s_per_gpu" in names, row
    med = {x["name"]: x for x in lines if x["name"].endswith("median_abs_error")}
    for m in med.values():
        assert m["value"] <= m["reference"], m
    upper = [x for x in lines if x.get("kind") == "upper bound"]
    assert upper and all(x["value"] <= x["reference"] for x in upper)  # FSDP2 below Megatron
    # Leave-one-out calibration: every FSDP row predicted by a profile fitted on the others.
    loo = [x for x in lines if x["name"].startswith("planner_accuracy.loo.reference.")]
    summary = [x for x in loo if x["name"].endswith("median_abs_error_after")]
    assert len(summary) == 1 and summary[0]["rows"] == len(loo) - 1 >= 8
    assert all("error_before" in x and "error_after" in x for x in loo if x not in summary)


def test_trace_plans_traces_through_the_command_and_merges_its_rows(tmp_path, monkeypatch):
    """benchmarks/trace_plans.py on the tiny preset: the row is the command's own trace check
    (printed less allowance beside traced, GPU form) and --write keeps other cases' rows."""
    import trace_plans

    row = trace_plans.trace_case("tiny", ["--model", "tiny", "--seq-len", "256"])
    assert row["form"] == "gpu" and row["traced_gib"] > 0 and row["wall_s"] > 0
    want = (row["printed_less_allowance_gib"] - row["traced_gib"]) / row["traced_gib"]
    assert row["plan_error"] == pytest.approx(want, abs=1e-3)
    monkeypatch.setattr(trace_plans, "RESULTS", tmp_path)
    monkeypatch.setattr(trace_plans, "CASES", [("other", []), ("tiny", [])])
    (tmp_path / "trace_plans.jsonl").write_text(json.dumps({**row, "case": "other"}) + "\n")
    trace_plans.write([row])
    cases = [
        json.loads(x)["case"] for x in (tmp_path / "trace_plans.jsonl").read_text().splitlines()
    ]
    assert cases == ["other", "tiny"]
    assert "| tiny |" in (tmp_path / "trace_plans.md").read_text()


def test_lora_plans_rows_and_their_table():
    """benchmarks/lora_plans.py: a LoRA row holds the adapters' state only and counts its MFU on
    the work its step needs (no dW for frozen linears: below the full fine-tune's basis)."""
    import lora_plans

    full, lora = (lora_plans.row("llama-3.2-1b", 8192, lora=x) for x in (False, True))
    assert full["feasible"] and lora["feasible"]
    assert lora["state_gib"] < full["state_gib"] / 4
    per_token = lora["mfu"] / lora["tokens_per_s_per_gpu"]
    assert per_token < full["mfu"] / full["tokens_per_s_per_gpu"]
    table = lora_plans.markdown([full, {**lora, "feasible": False}]).splitlines()
    assert table[2].startswith("| llama-3.2-1b | 8,192 | full | ") and "does not fit" in table[3]
